/* trace.c - the in-memory trace: checked appends, pairing allocs with frees into requests,
 * and the summary (lower bound, distinct sizes, steps). */
#include <stdlib.h>
#include <string.h>

#include "base/struct_size.h"
#include "trace/trace.h"

stalloc_status_t stalloc_trace_create(stalloc_trace_t** trace) {
  if (!trace) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_create: NULL out-parameter");
  *trace = calloc(1, sizeof **trace);
  if (!*trace) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace_create: no host memory");
  u64map_init(&(*trace)->live);
  return STALLOC_OK;
}

void stalloc_trace_destroy(stalloc_trace_t* trace) {
  if (!trace) return;
  free(trace->events);
  free(trace->requests);
  u64map_destroy(&trace->live);
  free(trace);
}

static bool grow(void** array, size_t* capacity, size_t need, size_t elem) {
  if (need <= *capacity) return true;
  size_t cap = *capacity ? *capacity : 1024;
  while (cap < need) cap *= 2;
  void* p = realloc(*array, cap * elem);
  if (!p) return false;
  *array = p;
  *capacity = cap;
  return true;
}

stalloc_status_t st_trace_reserve(stalloc_trace_t* t, size_t events) {
  if (!grow((void**)&t->events, &t->event_capacity, events, sizeof *t->events))
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace: no host memory for %zu events", events);
  return STALLOC_OK;
}

/* Pairs one event into the request table; index is the event's position in the trace. */
static stalloc_status_t pair_event(stalloc_trace_t* t, stalloc_event_t* e, size_t index) {
  switch (e->kind) {
    case STALLOC_EVENT_ALLOC: {
      if (e->id == 0) return st_fail(STALLOC_ERR_BAD_FORMAT, "event %zu: alloc with request id 0", index);
      if (u64map_get(&t->live, e->id))
        return st_fail(STALLOC_ERR_BAD_FORMAT,
                       "event %zu: alloc of request id %llu, which is already live", index,
                       (unsigned long long)e->id);
      if (!grow((void**)&t->requests, &t->request_capacity, t->request_count + 1,
                sizeof *t->requests) ||
          !u64map_put(&t->live, e->id, t->request_count))
        return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace: no host memory for requests");
      stalloc_request_t* r = &t->requests[t->request_count++];
      r->id = e->id;
      r->size = e->size;
      r->alloc_event = index;
      r->free_event = UINT64_MAX;
      r->stream = e->stream;
      r->step = t->steps;
      r->device = e->device;
      r->reserved = 0;
      return STALLOC_OK;
    }
    case STALLOC_EVENT_FREE: {
      if (e->flags & STALLOC_EVENT_FLAG_UNMATCHED) {
        t->unmatched_frees++;
        return STALLOC_OK;
      }
      if (e->id == 0) return st_fail(STALLOC_ERR_BAD_FORMAT, "event %zu: free with request id 0", index);
      uint64_t* slot = u64map_get(&t->live, e->id);
      if (!slot)
        return st_fail(STALLOC_ERR_BAD_FORMAT,
                       "event %zu: free of request id %llu, which is not live", index,
                       (unsigned long long)e->id);
      stalloc_request_t* r = &t->requests[*slot];
      if (e->size != 0 && e->size != r->size)
        return st_fail(STALLOC_ERR_BAD_FORMAT,
                       "event %zu: free of request id %llu says %llu bytes, its alloc %llu",
                       index, (unsigned long long)e->id, (unsigned long long)e->size,
                       (unsigned long long)r->size);
      r->free_event = index;
      e->size = r->size;
      u64map_remove(&t->live, e->id, NULL);
      return STALLOC_OK;
    }
    case STALLOC_EVENT_STEP:
      t->steps++;
      return STALLOC_OK;
    case STALLOC_EVENT_ALLOC_FAILED:
      t->failed_allocs++;
      return STALLOC_OK;
    default:
      return st_fail(STALLOC_ERR_BAD_FORMAT, "event %zu: unknown event kind %u", index,
                     (unsigned)e->kind);
  }
}

/* Rebuilds the request table from the first `count` events (used to undo a failed append). */
static void rebuild(stalloc_trace_t* t, size_t count) {
  t->event_count = 0;
  t->request_count = 0;
  t->steps = 0;
  t->unmatched_frees = 0;
  t->failed_allocs = 0;
  u64map_clear(&t->live);
  for (size_t i = 0; i < count; i++) {
    pair_event(t, &t->events[i], i); /* these events passed before: cannot fail */
    t->event_count++;
  }
}

stalloc_status_t stalloc_trace_append(stalloc_trace_t* t, const stalloc_event_t* events,
                                      size_t count) {
  if (!t || (!events && count))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_append: NULL argument");
  stalloc_status_t s = st_trace_reserve(t, t->event_count + count);
  if (s) return s;
  size_t before = t->event_count;
  for (size_t i = 0; i < count; i++) {
    stalloc_event_t e = events[i];
    s = pair_event(t, &e, t->event_count);
    if (s) {
      char message[1024];
      strncpy(message, stalloc_last_error(), sizeof message - 1);
      message[sizeof message - 1] = '\0';
      rebuild(t, before);
      st_clear_error();
      return st_fail(s, "%s", message);
    }
    t->events[t->event_count++] = e;
  }
  return STALLOC_OK;
}

stalloc_status_t stalloc_trace_events(const stalloc_trace_t* t, const stalloc_event_t** events,
                                      size_t* count) {
  if (!t || !events || !count)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_events: NULL argument");
  *events = t->events;
  *count = t->event_count;
  return STALLOC_OK;
}

stalloc_status_t stalloc_trace_requests(const stalloc_trace_t* t,
                                        const stalloc_request_t** requests, size_t* count) {
  if (!t || !requests || !count)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_requests: NULL argument");
  *requests = t->requests;
  *count = t->request_count;
  return STALLOC_OK;
}

void stalloc_trace_summary_init(stalloc_trace_summary_t* s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

/* Distinct values among n uint64 (sorts the scratch array). */
static uint64_t count_distinct(uint64_t* v, size_t n) {
  if (!n) return 0;
  st_sort(v, n, sizeof *v, cmp_u64);
  uint64_t d = 1;
  for (size_t i = 1; i < n; i++) d += v[i] != v[i - 1];
  return d;
}

stalloc_status_t stalloc_trace_summary(const stalloc_trace_t* t, stalloc_trace_summary_t* out) {
  if (!t) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_summary: NULL trace");
  stalloc_status_t st = st_struct_check(out, "trace_summary");
  if (st) return st;
  stalloc_trace_summary_t s;
  stalloc_trace_summary_init(&s);
  s.events = t->event_count;
  s.requests = t->request_count;
  s.unmatched_frees = t->unmatched_frees;
  s.failed_allocs = t->failed_allocs;
  s.steps = t->steps;

  size_t n = t->request_count;
  uint64_t* scratch = malloc((n ? n : 1) * sizeof *scratch);
  if (!scratch) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace_summary: no host memory");
  for (size_t i = 0; i < n; i++) {
    const stalloc_request_t* r = &t->requests[i];
    /* saturates: two requests of 2^63 bytes are not "0 B" */
    s.total_bytes = r->size > UINT64_MAX - s.total_bytes ? UINT64_MAX : s.total_bytes + r->size;
    s.unfreed_requests += r->free_event == UINT64_MAX;
    if (r->size > s.max_request) s.max_request = r->size;
    scratch[i] = r->size;
  }
  s.distinct_sizes = count_distinct(scratch, n);
  for (size_t i = 0; i < n; i++) scratch[i] = t->requests[i].stream;
  s.streams = count_distinct(scratch, n);
  for (size_t i = 0; i < n; i++) scratch[i] = (uint64_t)(uint16_t)t->requests[i].device;
  s.devices = count_distinct(scratch, n);
  free(scratch);

  /* Lower bound: frees carry their alloc's size (pair_event fills it in). Live bytes are
   * summed exactly in 128 bits; a bound past 2^64 - 1 saturates there. */
  unsigned __int128 live = 0;
  for (size_t i = 0; i < t->event_count; i++) {
    const stalloc_event_t* e = &t->events[i];
    if (e->kind == STALLOC_EVENT_ALLOC) {
      live += e->size;
      uint64_t now = live > UINT64_MAX ? UINT64_MAX : (uint64_t)live;
      if (now > s.lower_bound) {
        s.lower_bound = now;
        s.lower_bound_event = i;
      }
    } else if (e->kind == STALLOC_EVENT_FREE && !(e->flags & STALLOC_EVENT_FLAG_UNMATCHED)) {
      live -= e->size;
    }
  }
  st_struct_write(out, &s, sizeof s);
  return STALLOC_OK;
}
