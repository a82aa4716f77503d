/* trace.h - the in-memory trace shared by trace.c, trace_file.c and the planner. */
#ifndef STALLOC_TRACE_H
#define STALLOC_TRACE_H

#include "base/internal.h"
#include "base/u64map.h"

struct stalloc_trace {
  stalloc_event_t* events;
  size_t event_count, event_capacity;
  stalloc_request_t* requests; /* in alloc order */
  size_t request_count, request_capacity;
  u64map live;                 /* request id -> index in requests, while live */
  uint32_t steps;
  uint64_t unmatched_frees;
  uint64_t failed_allocs;
};

/* trace.c: room for at least `events` events. */
stalloc_status_t st_trace_reserve(stalloc_trace_t* trace, size_t events);

#endif
