/* fuzz_replay.c - libFuzzer target for everything after a trace is accepted: the checked append
 * (trace/trace.c), the summary, the planner (plan/), the plan file, and replay through a fresh
 * allocator with the plan (sim/replay.c, runtime/) and without one.
 *
 * Input: one parameter byte, then 4 bytes per event, a compact code the fuzzer can mutate
 * into valid traces easily:
 *   byte 0: kind (bits 0-1: alloc, free, step, failed alloc), bit 2: UNMATCHED flag,
 *           bits 3-4: stream
 *   byte 1: request id (0 too: it must be refused)
 *   bytes 2-3: size = (byte2 + 1) << (byte3 & 63), wrapping past 2^64 on purpose; bit 6 of
 *           byte 3 on a free: size 0 (a free need not repeat its size)
 * Parameter byte: bit 0 detect_period, bit 1 classify, bit 2 reuse_space, bit 3 tolerate_sizes,
 * bit 4 use_step_markers, bit 5 replay on the host backend with the data check, bit 6 replay a
 * third time through the online lifecycle (runtime/online.c: recording, planning, the switch,
 * the growable pool with its layout hints, shape rules and lowest fit), bit 7 model a GPU that
 * runs behind the host (device_lag, on the virtual backend). An odd number of events also has
 * the online replay's pool place at the ends of free blocks from its first steady step
 * (pool_at_ends_after 1).
 * A trace the append accepts must plan, and its replays must never report an overlap or a
 * damaged block (STALLOC_ERR_INTERNAL). */
#include "fuzz_input.h"

enum { MAX_EVENTS = 1024 };

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t param = data[0];
  size_t n = (size - 1) / 4;
  if (n > MAX_EVENTS) n = MAX_EVENTS;
  static stalloc_event_t ev[MAX_EVENTS];
  static const uint8_t kinds[4] = {STALLOC_EVENT_ALLOC, STALLOC_EVENT_FREE, STALLOC_EVENT_STEP,
                                   STALLOC_EVENT_ALLOC_FAILED};
  for (size_t i = 0; i < n; i++) {
    const uint8_t* p = data + 1 + 4 * i;
    uint8_t kind = kinds[p[0] & 3];
    uint64_t bytes = (uint64_t)(p[2] + 1) << (p[3] & 63);
    if (kind == STALLOC_EVENT_FREE && (p[3] & 64)) bytes = 0;
    ev[i] = (stalloc_event_t){.id = p[1], .size = bytes, .stream = (p[0] >> 3) & 3u,
                              .kind = kind, .flags = (p[0] & 4) ? STALLOC_EVENT_FLAG_UNMATCHED : 0};
  }
  stalloc_trace_t* t;
  FUZZ_ASSERT(stalloc_trace_create(&t) == STALLOC_OK);
  stalloc_status_t s = stalloc_trace_append(t, ev, n);
  if (s != STALLOC_OK) {
    FUZZ_ASSERT(s == STALLOC_ERR_BAD_FORMAT && stalloc_last_error()[0] != '\0');
    const stalloc_event_t* none;
    size_t count;
    FUZZ_ASSERT(stalloc_trace_events(t, &none, &count) == STALLOC_OK && count == 0);
    stalloc_trace_destroy(t);
    return 0;
  }
  stalloc_trace_summary_t sum;
  stalloc_trace_summary_init(&sum);
  FUZZ_ASSERT(stalloc_trace_summary(t, &sum) == STALLOC_OK);
  FUZZ_ASSERT(sum.lower_bound <= sum.total_bytes && sum.max_request <= sum.lower_bound);

  stalloc_plan_params_t pp;
  stalloc_plan_params_init(&pp);
  pp.time_limit = 0; /* the greedy placement only: the search is a matter of time, not safety */
  pp.detect_period = param & 1;
  pp.classify = (param >> 1) & 1;
  pp.reuse_space = (param >> 2) & 1;
  pp.tolerate_sizes = (param >> 3) & 1;
  pp.use_step_markers = (param >> 4) & 1;
  stalloc_plan_t* plan = NULL;
  s = stalloc_plan_create(t, &pp, &plan);
  /* Planning may refuse a trace whose live bytes pass 2^64 - 1 (a size that overflows:
   * STALLOC_ERR_INVALID_ARGUMENT); nothing else. */
  FUZZ_ASSERT(s == STALLOC_OK || (s == STALLOC_ERR_INVALID_ARGUMENT && plan == NULL &&
                                  strstr(stalloc_last_error(), "2^64") != NULL));
  /* A plan is the plan for its own trace, sizes tolerated or not. */
  if (plan) FUZZ_ASSERT(stalloc_plan_check(plan, t) == STALLOC_OK);

  stalloc_replay_options_t o;
  stalloc_replay_options_init(&o);
  o.virtual_capacity = 1ull << 40;
  if (param & 32) {
    o.backend = STALLOC_BACKEND_HOST;
    o.check_data = 1;
    if (sum.lower_bound > (64u << 20)) o.backend = STALLOC_BACKEND_VIRTUAL, o.check_data = 0;
  }
  if ((param & 128) && o.backend == STALLOC_BACKEND_VIRTUAL) o.device_lag = 4;
  for (int run = 0; run < 3; run++) {
    if (run == 1 && !plan) continue;
    if (run == 2) {
      if (!(param & 64)) break;
      o.online = 1;
      o.online_params.time_limit = 0; /* the greedy placement, as above */
      o.online_params.pool_at_ends_after = (uint32_t)(n & 1); /* an odd count of events: at once */
    }
    stalloc_replay_result_t r;
    stalloc_replay_result_init(&r);
    s = stalloc_replay(t, run == 1 ? plan : NULL, &o, &r);
    FUZZ_ASSERT(s != STALLOC_ERR_INTERNAL);
    if (s == STALLOC_OK) {
      FUZZ_ASSERT(r.lower_bound == sum.lower_bound);
      FUZZ_ASSERT(r.peak_allocated <= r.peak_reserved || r.peak_allocated == 0);
    }
  }
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
  return 0;
}
