/* record.h - record mode (record.c): the allocator's events to a streaming trace writer. */
#ifndef STALLOC_RECORD_H
#define STALLOC_RECORD_H

#include "base/internal.h"

/* Appends one event to the trace being recorded, if any. Lock held. */
void st_record_event(stalloc_allocator_t* a, uint8_t kind, uint64_t id, uint64_t size,
                     const void* ptr, uint64_t stream, int32_t device, uint8_t flags);

#endif
