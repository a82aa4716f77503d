/* deferred.c - frees held back until every stream a block was used on is done with it
 * (deferred.h). PyTorch's caching allocator does the same for record_stream: an event per
 * extra stream at the free, the block reusable by nobody until all of them have completed.
 * The list is short (blocks freed while a side stream still reads them) and polled on alloc. */
#include <stdlib.h>

#include "runtime/deferred.h"

struct st_deferred {
  uint8_t origin;
  void* handle;
  uint64_t free_stream;
  bool quarantined; /* an event could not be recorded: never released */
  uint32_t count;
  void** events;    /* count events, NULL where done and dropped */
  st_deferred* next;
};

static void drop_events(st_deferred* d, const backend_ops* ops, void* backend) {
  for (uint32_t i = 0; i < d->count; i++)
    if (d->events[i]) ops->event_destroy(backend, d->events[i]);
  free(d->events);
  d->events = NULL;
}

stalloc_status_t st_deferred_add(st_deferred_list* list, const backend_ops* ops, void* backend,
                                 uint8_t origin, void* handle, uint64_t free_stream,
                                 const uint64_t* streams, uint32_t count) {
  st_deferred* d = calloc(1, sizeof *d);
  void** events = count ? calloc(count, sizeof *events) : NULL;
  if (!d || (count && !events)) {
    free(d);
    free(events);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "record_stream: no host memory to hold a free back");
  }
  *d = (st_deferred){.origin = origin, .handle = handle, .free_stream = free_stream,
                     .count = count, .events = events};
  for (uint32_t i = 0; i < count; i++) {
    if (!ops->event_record || ops->event_record(backend, streams[i], &events[i]) != STALLOC_OK) {
      events[i] = NULL;
      d->quarantined = true; /* this stream's work cannot be waited for: keep the bytes out */
    }
  }
  d->next = list->head;
  list->head = d;
  list->count++;
  if (d->quarantined) list->quarantined++;
  return STALLOC_OK;
}

static bool all_done(st_deferred* d, const backend_ops* ops, void* backend) {
  if (d->quarantined) return false;
  for (uint32_t i = 0; i < d->count; i++) {
    if (!d->events[i]) continue;
    if (!ops->event_done(backend, d->events[i])) return false;
    ops->event_destroy(backend, d->events[i]);
    d->events[i] = NULL;
  }
  return true;
}

uint64_t st_deferred_collect(st_deferred_list* list, const backend_ops* ops, void* backend,
                             st_deferred_release_fn release, void* arg) {
  uint64_t n = 0;
  for (st_deferred** at = &list->head; *at;) {
    st_deferred* d = *at;
    if (!all_done(d, ops, backend)) {
      at = &d->next;
      continue;
    }
    *at = d->next;
    list->count--;
    release(arg, d->origin, d->handle, d->free_stream);
    drop_events(d, ops, backend);
    free(d);
    n++;
  }
  return n;
}

void st_deferred_destroy(st_deferred_list* list, const backend_ops* ops, void* backend) {
  for (st_deferred *d = list->head, *next; d; d = next) {
    next = d->next;
    drop_events(d, ops, backend);
    free(d);
  }
  *list = (st_deferred_list){0};
}
