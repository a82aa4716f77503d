/* deferred.h - frees held back until other streams are done with the block (deferred.c): a
 * block recorded on extra streams (stalloc_allocator_record_stream, PyTorch's record_stream)
 * goes back to its pool only once every such stream's work queued before the free is done.
 * Called by allocator.c with the allocator's lock held. */
#ifndef STALLOC_DEFERRED_H
#define STALLOC_DEFERRED_H

#include "backends/backend.h"

typedef struct st_deferred st_deferred;

typedef struct st_deferred_list {
  st_deferred* head;
  uint64_t count;       /* frees held back now */
  uint64_t quarantined; /* of those, ones whose stream could not be ordered: kept until destroy */
} st_deferred_list;

/* Called when a held-back free may go to its pool: origin and handle as given to add. */
typedef void (*st_deferred_release_fn)(void* arg, uint8_t origin, void* handle, uint64_t free_stream);

/* Holds back the free of (origin, handle), freed on free_stream, until the work queued now on
 * each of streams[0..count) is done: records one event per stream. If an event cannot be
 * recorded the block is quarantined (never reused). Fails only for lack of host memory, and
 * then holds nothing back: the caller must quarantine the block itself. */
stalloc_status_t st_deferred_add(st_deferred_list* list, const backend_ops* ops, void* backend,
                                 uint8_t origin, void* handle, uint64_t free_stream,
                                 const uint64_t* streams, uint32_t count);
/* Hands every held-back free whose events are all done to release; returns how many. */
uint64_t st_deferred_collect(st_deferred_list* list, const backend_ops* ops, void* backend,
                             st_deferred_release_fn release, void* arg);
/* Drops every entry and its events (the pools are being destroyed with their blocks). */
void st_deferred_destroy(st_deferred_list* list, const backend_ops* ops, void* backend);

#endif
