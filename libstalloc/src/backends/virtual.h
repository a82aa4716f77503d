/* virtual.h - the virtual backend as an asynchronous device (options.virtual_lag > 0): a free's
 * queued work finishes virtual_lag allocator calls later, as on a GPU the host runs ahead of. */
#ifndef STALLOC_VIRTUAL_H
#define STALLOC_VIRTUAL_H

#include "backends/backend.h"

/* The virtual backend maps in granules of this size: cuMemGetAllocationGranularity's answer on
 * current GPUs. The layout hints replay on it and count in it. */
#define ST_VIRTUAL_GRANULE (2ull << 20)

extern const backend_ops st_backend_virtual_lagged;
/* The times the host had to wait for the modelled device (an unmap of a range queued work may
 * use, or event_wait on work not done). */
uint64_t st_virtual_waits(void* state);

#endif
