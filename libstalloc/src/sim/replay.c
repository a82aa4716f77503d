/* replay.c - drives a fresh allocator with a trace's events (stalloc_replay), optionally
 * checking every step with means that share nothing with the runtime: a sorted array of live
 * address ranges (overlap) and a per-block fill pattern (data). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/virtual.h"
#include "base/grow.h"
#include "base/struct_size.h"
#include "runtime/allocator.h"
#include "trace/trace.h"

void stalloc_replay_options_init(stalloc_replay_options_t* o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->backend = STALLOC_BACKEND_VIRTUAL;
  o->check_overlap = 1;
  o->use_steps = 1;
  o->growable_pool = 1;
  stalloc_online_params_init(&o->online_params);
}

void stalloc_replay_result_init(stalloc_replay_result_t* r) {
  if (!r) return;
  memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
}

/* ---- the independent overlap check: live [start, end) ranges sorted by start ---- */

typedef struct live_set {
  uint64_t *start, *end;
  size_t count, cap;
} live_set;

static size_t lower_index(const live_set* s, uint64_t start) {
  size_t lo = 0, hi = s->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->start[mid] < start) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* 0 ok, 1 overlap, 2 no memory. */
static int live_add(live_set* s, uint64_t start, uint64_t end) {
  size_t cap = s->cap; /* two arrays of one length */
  uint64_t* a = st_room(s->start, s->count, &cap, sizeof *a, 1024);
  if (!a) return 2;
  s->start = a;
  cap = s->cap;
  uint64_t* b = st_room(s->end, s->count, &cap, sizeof *b, 1024);
  if (!b) return 2;
  s->end = b;
  s->cap = cap;
  size_t i = lower_index(s, start);
  if (i > 0 && s->end[i - 1] > start) return 1;
  if (i < s->count && s->start[i] < end) return 1;
  memmove(&s->start[i + 1], &s->start[i], (s->count - i) * sizeof *s->start);
  memmove(&s->end[i + 1], &s->end[i], (s->count - i) * sizeof *s->end);
  s->start[i] = start;
  s->end[i] = end;
  s->count++;
  return 0;
}

static void live_remove(live_set* s, uint64_t start) {
  size_t i = lower_index(s, start);
  if (i == s->count || s->start[i] != start) return;
  memmove(&s->start[i], &s->start[i + 1], (s->count - i - 1) * sizeof *s->start);
  memmove(&s->end[i], &s->end[i + 1], (s->count - i - 1) * sizeof *s->end);
  s->count--;
}

/* ---- the data check: every 8-byte word of a block holds a value derived from its id ---- */

static uint64_t pattern_of(uint64_t id) { return (id + 1) * 0x9E3779B97F4A7C15ull; }

static void fill(void* p, uint64_t size, uint64_t id) {
  uint64_t v = pattern_of(id);
  uint8_t* b = p;
  uint64_t words = size / 8;
  for (uint64_t i = 0; i < words; i++) memcpy(b + 8 * i, &v, 8);
  memcpy(b + 8 * words, &v, size % 8);
}

static bool intact(const void* p, uint64_t size, uint64_t id) {
  uint64_t v = pattern_of(id), w;
  const uint8_t* b = p;
  uint64_t words = size / 8;
  for (uint64_t i = 0; i < words; i++) {
    memcpy(&w, b + 8 * i, 8);
    if (w != v) return false;
  }
  return memcmp(b + 8 * words, &v, size % 8) == 0;
}

/* ---- the replay ---- */

typedef struct live_req {
  void* ptr;
  uint64_t size;
} live_req;

stalloc_status_t stalloc_replay(const stalloc_trace_t* trace, const stalloc_plan_t* plan,
                                const stalloc_replay_options_t* options, stalloc_replay_result_t* result) {
  stalloc_replay_options_t o;
  stalloc_replay_options_init(&o);
  stalloc_status_t s = st_struct_read(&o, sizeof o, options, "replay: options");
  if (s) return s;
  o.timeline_points = 0; /* no arrays to fill */
  return stalloc_replay_timeline(trace, plan, &o, result, NULL, NULL, NULL);
}

/* One timeline bucket per run of events, as stalloc_simulate fills its timeline. */
typedef struct timeline {
  uint64_t points, n, count, bucket_alloc, bucket_res;
  uint64_t *event, *allocated, *reserved;
} timeline;

static void timeline_note(timeline* tl, uint64_t k, stalloc_allocator_t* a) {
  stalloc_stats_t st;
  stalloc_stats_init(&st);
  stalloc_allocator_stats(a, &st);
  if (st.allocated_bytes > tl->bucket_alloc) tl->bucket_alloc = st.allocated_bytes;
  if (st.reserved_bytes > tl->bucket_res) tl->bucket_res = st.reserved_bytes;
  uint64_t b = (uint64_t)(((unsigned __int128)k * tl->points) / tl->n);
  uint64_t b_next = (uint64_t)(((unsigned __int128)(k + 1) * tl->points) / tl->n);
  if (k + 1 == tl->n || b_next != b) {
    tl->event[tl->count] = k;
    tl->allocated[tl->count] = tl->bucket_alloc;
    tl->reserved[tl->count] = tl->bucket_res;
    tl->count++;
    tl->bucket_alloc = st.allocated_bytes;
    tl->bucket_res = st.reserved_bytes;
  }
}

/* Per-step figures as the replay goes (see stalloc_replay_steps). */
typedef struct step_log {
  stalloc_replay_step_t* steps;
  size_t capacity, count;
  bool any_event;          /* an alloc or free seen: a marker now opens a new step */
  uint64_t hit0, miss0;    /* the allocator's byte counters when the step began */
} step_log;

static void step_note(step_log* sl, stalloc_allocator_t* a) {
  if (!sl->count) sl->count = 1;
  size_t k = sl->count - 1;
  if (k >= sl->capacity) return;
  stalloc_replay_step_t* s = &sl->steps[k];
  s->peak_allocated = ST_MAX(s->peak_allocated, a->stats.allocated_bytes);
  s->peak_reserved = ST_MAX(s->peak_reserved, a->budget.reserved);
  st_runtime_counters c = st_allocator_plan_counters(a);
  s->hit_bytes = c.hit_bytes - sl->hit0;
  s->miss_bytes = c.miss_bytes - sl->miss0;
}

static void step_open(step_log* sl, stalloc_allocator_t* a) {
  if (!sl->any_event && sl->count <= 1) return; /* a leading marker opens step 0 itself */
  step_note(sl, a); /* close the step */
  size_t k = sl->count - 1;
  if (k < sl->capacity) {
    sl->hit0 += sl->steps[k].hit_bytes;
    sl->miss0 += sl->steps[k].miss_bytes;
  } else {
    st_runtime_counters c = st_allocator_plan_counters(a);
    sl->hit0 = c.hit_bytes;
    sl->miss0 = c.miss_bytes;
  }
  sl->count++;
  if (sl->count - 1 < sl->capacity) memset(&sl->steps[sl->count - 1], 0, sizeof *sl->steps);
}

static stalloc_status_t replay_core(const stalloc_trace_t* trace, const stalloc_plan_t* plan,
                                    const stalloc_replay_options_t* options,
                                    stalloc_replay_result_t* result, uint64_t* timeline_event,
                                    uint64_t* timeline_allocated, uint64_t* timeline_reserved,
                                    step_log* sl, stalloc_online_plan_record_t* plans,
                                    size_t plan_capacity, size_t* plan_count);

stalloc_status_t stalloc_replay_timeline(const stalloc_trace_t* trace, const stalloc_plan_t* plan,
                                         const stalloc_replay_options_t* options,
                                         stalloc_replay_result_t* result, uint64_t* timeline_event,
                                         uint64_t* timeline_allocated, uint64_t* timeline_reserved) {
  step_log sl = {0};
  size_t plan_count;
  return replay_core(trace, plan, options, result, timeline_event, timeline_allocated,
                     timeline_reserved, &sl, NULL, 0, &plan_count);
}

stalloc_status_t stalloc_replay_steps(const stalloc_trace_t* trace, const stalloc_plan_t* plan,
                                      const stalloc_replay_options_t* options,
                                      stalloc_replay_result_t* result, stalloc_replay_step_t* steps,
                                      size_t step_capacity, size_t* step_count,
                                      stalloc_online_plan_record_t* plans, size_t plan_capacity,
                                      size_t* plan_count) {
  if ((step_capacity && !steps) || (plan_capacity && !plans))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay_steps: a capacity is set but its array is NULL");
  step_log sl = {.steps = steps, .capacity = step_capacity};
  if (step_capacity) memset(steps, 0, sizeof *steps);
  size_t pc = 0;
  stalloc_status_t s = replay_core(trace, plan, options, result, NULL, NULL, NULL, &sl, plans,
                                   plan_capacity, &pc);
  if (step_count) *step_count = sl.count ? sl.count : 1;
  if (plan_count) *plan_count = pc;
  return s;
}

static stalloc_status_t replay_core(const stalloc_trace_t* trace, const stalloc_plan_t* plan,
                                    const stalloc_replay_options_t* options,
                                    stalloc_replay_result_t* result, uint64_t* timeline_event,
                                    uint64_t* timeline_allocated, uint64_t* timeline_reserved,
                                    step_log* sl, stalloc_online_plan_record_t* plans,
                                    size_t plan_capacity, size_t* plan_count) {
  if (!trace) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay: NULL trace");
  stalloc_replay_options_t o;
  stalloc_replay_options_init(&o);
  stalloc_status_t bad = st_struct_check(result, "replay: result");
  if (!bad) bad = st_struct_read(&o, sizeof o, options, "replay: options");
  if (bad) return bad;
  if (o.backend != STALLOC_BACKEND_VIRTUAL && o.backend != STALLOC_BACKEND_HOST)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay: backend must be virtual or host, not %s",
                   stalloc_backend_name(o.backend));
  if (o.online && plan)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay: an online replay makes its own plans; give none");
  if (o.check_data && o.backend != STALLOC_BACKEND_HOST)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay: the data check needs the host backend");
  if (o.timeline_points && (!timeline_event || !timeline_allocated || !timeline_reserved))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay: timeline_points is %llu but a timeline array is NULL",
                   (unsigned long long)o.timeline_points);
  timeline tl = {.points = o.timeline_points, .n = trace->event_count, .event = timeline_event,
                 .allocated = timeline_allocated, .reserved = timeline_reserved};
  stalloc_trace_summary_t summary;
  stalloc_trace_summary_init(&summary);
  stalloc_status_t s = stalloc_trace_summary(trace, &summary);
  if (s) return s;

  stalloc_options_t ao;
  stalloc_options_init(&ao);
  ao.backend = o.backend;
  ao.device = 0;
  ao.memory_limit = 0;
  ao.record_path = NULL;
  ao.alignment = o.alignment ? o.alignment : plan && plan->alignment ? plan->alignment : 512;
  if (o.virtual_capacity) ao.virtual_capacity = o.virtual_capacity;
  if (o.device_lag < 0 || (o.device_lag && o.backend != STALLOC_BACKEND_VIRTUAL))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "replay: device_lag %d needs the virtual backend and must be >= 0",
                   (int)o.device_lag);
  ao.virtual_lag = o.device_lag;
  ao.growable_pool = o.growable_pool;
  stalloc_allocator_t* a;
  s = stalloc_allocator_create(&ao, &a);
  if (s) return s;
  if (plan && (s = stalloc_allocator_load_plan(a, plan))) {
    stalloc_allocator_destroy(a);
    return s;
  }
  if (o.online) {
    stalloc_online_params_t op = o.online_params;
    op.wait_for_plan = 1; /* a replay is a simulation: its figures must not depend on the machine */
    if ((s = stalloc_allocator_online_start(a, &op))) {
      stalloc_allocator_destroy(a);
      return s;
    }
  }

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  u64map ids;
  u64map_init(&ids);
  live_set set = {0};
  live_req* reqs = calloc(trace->request_count ? trace->request_count : 1, sizeof *reqs);
  size_t next_req = 0;
  uint64_t checked = 0;
  if (!reqs) s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "replay: no host memory");
  for (size_t i = 0; !s && i < trace->event_count; i++) {
    if (i && tl.points) timeline_note(&tl, i - 1, a); /* the previous event, now done */
    const stalloc_event_t* e = &trace->events[i];
    if (e->kind == STALLOC_EVENT_STEP) {
      step_open(sl, a);
      if (o.use_steps) s = stalloc_allocator_step_begin(a, e->id);
      step_note(sl, a);
      continue;
    }
    sl->any_event = true;
    if (e->kind == STALLOC_EVENT_ALLOC) {
      live_req* r = &reqs[next_req++];
      r->size = e->size;
      s = stalloc_allocator_alloc(a, (size_t)e->size, 0, e->stream, &r->ptr);
      if (s) {
        s = st_fail(s, "replay: event %zu: alloc of %llu bytes: %s", i, (unsigned long long)e->size,
                    stalloc_last_error()); /* st_fail copies the message it quotes first */
        break;
      }
      if (!r->ptr) continue; /* size 0 */
      if (!u64map_put(&ids, e->id, (uint64_t)(r - reqs) + 1)) {
        s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "replay: no host memory");
        break;
      }
      if (o.check_overlap) {
        uint64_t start = (uint64_t)(uintptr_t)r->ptr;
        int rc = live_add(&set, start, start + e->size);
        if (rc == 1)
          s = st_fail(STALLOC_ERR_INTERNAL, "replay: event %zu: block [%p, +%llu) overlaps a live block",
                      i, r->ptr, (unsigned long long)e->size);
        else if (rc == 2)
          s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "replay: no host memory");
        checked++;
      }
      if (!s && o.check_data) fill(r->ptr, e->size, e->id);
      step_note(sl, a);
    } else if (e->kind == STALLOC_EVENT_FREE) {
      if (e->flags & STALLOC_EVENT_FLAG_UNMATCHED) continue;
      uint64_t v;
      if (!u64map_remove(&ids, e->id, &v) || v == 0 || v > next_req) continue; /* a size-0 alloc */
      live_req* r = &reqs[v - 1];
      if (o.check_data && !intact(r->ptr, r->size, e->id)) {
        s = st_fail(STALLOC_ERR_INTERNAL, "replay: event %zu: block %p of request %llu was overwritten while live",
                    i, r->ptr, (unsigned long long)e->id);
        break;
      }
      if (o.check_overlap) live_remove(&set, (uint64_t)(uintptr_t)r->ptr);
      s = stalloc_allocator_free_sized(a, r->ptr, (size_t)r->size, 0, e->stream);
      if (s) s = st_fail(s, "replay: event %zu: free of %llu bytes: %s", i, (unsigned long long)r->size,
                         stalloc_last_error());
    }
  }
  if (!s && tl.points && trace->event_count) timeline_note(&tl, trace->event_count - 1, a);
  clock_gettime(CLOCK_MONOTONIC, &t1);

  if (!s) {
    stalloc_stats_t st;
    stalloc_stats_init(&st);
    s = stalloc_allocator_stats(a, &st);
    stalloc_replay_result_t out;
    stalloc_replay_result_init(&out);
    out.events = trace->event_count;
    out.requests = trace->request_count;
    out.lower_bound = summary.lower_bound;
    out.peak_allocated = st.peak_allocated_bytes;
    out.peak_reserved = st.peak_reserved_bytes;
    out.fragmentation = st.peak_reserved_bytes ? 1.0 - (double)st.peak_allocated_bytes / (double)st.peak_reserved_bytes : 0.0;
    out.hits = st.plan_hits;
    out.misses = st.plan_misses;
    out.fallbacks = st.fallback_allocs;
    out.resyncs = st.resyncs;
    out.dynamic = st.dynamic_allocs;
    out.tiny = st.alloc_count - st.plan_hits - st.dynamic_allocs - st.fallback_allocs;
    out.pool_size = a->runtime ? st_runtime_pool_size(a->runtime) : 0;
    out.checked_events = checked;
    out.timeline_count = tl.count;
    out.seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    out.hinted = st.hinted_allocs;
    out.backend_allocs = st.backend_allocs;
    if (a->ops == &st_backend_virtual_lagged) out.device_waits = st_virtual_waits(a->backend);
    stalloc_online_info_t info;
    stalloc_online_info_init(&info);
    if (o.online && stalloc_allocator_online_info(a, &info) == STALLOC_OK) {
      out.hint_layouts = info.hint_layouts;
      out.hint_layouts_kept = info.hint_layouts_kept;
      out.hint_seconds_max = info.hint_seconds_max;
    }
    st_struct_write(result, &out, sizeof out);
  }
  if (o.online) stalloc_allocator_online_plans(a, plans, plan_capacity, plan_count);
  u64map_destroy(&ids);
  free(set.start);
  free(set.end);
  free(reqs);
  stalloc_status_t d = stalloc_allocator_destroy(a);
  return s ? s : d;
}
