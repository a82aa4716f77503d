/* fallback.h - the caching best-fit pool that serves what no plan covers (and all of record
 * mode). Segments come from the backend; blocks are split on alloc and coalesced on free. */
#ifndef STALLOC_FALLBACK_H
#define STALLOC_FALLBACK_H

#include "backends/backend.h"
#include "runtime/budget.h"

typedef struct st_block st_block;
typedef struct st_fallback st_fallback;

stalloc_status_t st_fallback_create(const backend_ops* ops, void* backend_state,
                                    const backend_caps* caps, uint64_t alignment,
                                    st_budget* budget, st_fallback** out);
/* Returns every segment to the backend, live blocks included. */
void st_fallback_destroy(st_fallback* pool);
/* A block of at least size bytes usable on stream; *block is the handle for free. */
stalloc_status_t st_fallback_alloc(st_fallback* pool, uint64_t size, uint64_t stream, void** ptr,
                                   st_block** block);
/* Frees a live block; stream is where its last use was queued. */
void st_fallback_free(st_fallback* pool, st_block* block, uint64_t stream);
/* The backend allocation (segment) that holds a block. */
void st_fallback_block_segment(const st_block* block, void** base, uint64_t* size);
/* With a plan loaded, the pool only serves the few requests the plan missed: segments of the
 * request's own size (granularity-rounded) waste less than cached 2 or 20 MiB ones, and idle
 * segments too small for a request are given back before a new one is made. */
void st_fallback_exact_segments(st_fallback* pool, bool exact);
/* Returns wholly free segments whose work is done to the backend; gives the bytes returned. */
uint64_t st_fallback_release_cached(st_fallback* pool);

#endif
