/* test_struct_size.c - the versioned-struct rule (stalloc.h) on every public struct: a caller
 * built against an older header passes a struct whose struct_size covers only its first
 * fields. Inputs: the fields past struct_size hold values the call would refuse or crash on,
 * so reading them fails the test. Outputs: the struct sits in a buffer filled with a guard
 * byte; the fields it covers are filled, no byte past struct_size changes, and struct_size
 * stays the caller's. A newer, larger struct is served too, and an unset one is refused with
 * nothing written. */
#include <stddef.h>
#include <string.h>

#include "check.h"

#define GUARD 0xA5
#define SLACK 64

/* A caller's struct of `size` bytes at the start of a guarded buffer, after its *_init. */
typedef struct guarded {
  unsigned char bytes[512];
} guarded;

static void* guard(guarded* g, const void* inited, size_t full, size_t size) {
  CHECK(full + SLACK <= sizeof g->bytes);
  memset(g->bytes, GUARD, sizeof g->bytes);
  memcpy(g->bytes, inited, size < full ? size : full);
  memcpy(g->bytes, &size, sizeof size);
  return g->bytes;
}

/* Nothing written from `size` on, and struct_size as the caller set it. */
static void check_untouched(const guarded* g, size_t size) {
  size_t kept;
  memcpy(&kept, g->bytes, sizeof kept);
  CHECK(kept == size);
  size_t from = size > sizeof kept ? size : sizeof kept; /* struct_size itself is the caller's */
  for (size_t i = from; i < sizeof g->bytes; i++) CHECK(g->bytes[i] == GUARD);
}

#define OLDER(type, last_field) (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

static stalloc_trace_t* small_trace(void) {
  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_create(&t));
  uint64_t id = 1;
  for (int step = 0; step < 6; step++) {
    stalloc_event_t ev[5] = {{.id = (uint64_t)step, .kind = STALLOC_EVENT_STEP},
                             {.id = id, .size = 4096, .kind = STALLOC_EVENT_ALLOC},
                             {.id = id + 1, .size = 8192, .kind = STALLOC_EVENT_ALLOC},
                             {.id = id, .size = 4096, .kind = STALLOC_EVENT_FREE},
                             {.id = id + 1, .size = 8192, .kind = STALLOC_EVENT_FREE}};
    CHECK_OK(stalloc_trace_append(t, ev, 5));
    id += 2;
  }
  return t;
}

static void test_options_and_stats(void) {
  stalloc_options_t full;
  stalloc_options_init(&full);
  full.backend = STALLOC_BACKEND_HOST;
  guarded g;
  stalloc_options_t* o = guard(&g, &full, sizeof full, OLDER(stalloc_options_t, alignment));
  memset(&o->memory_limit, 0, sizeof o->memory_limit);
  o->memory_limit = 1;                  /* read, it would refuse every alloc */
  o->record_path = "/nonexistent/x/y";  /* read, create would fail */
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(o, &a));
  void* p;
  CHECK_OK(stalloc_allocator_alloc(a, 1 << 20, 0, 0, &p));

  stalloc_stats_t s;
  stalloc_stats_init(&s);
  size_t old = OLDER(stalloc_stats_t, peak_allocated_bytes);
  stalloc_stats_t* out = guard(&g, &s, sizeof s, old);
  CHECK_OK(stalloc_allocator_stats(a, out));
  CHECK(out->allocated_bytes == 1 << 20 && out->peak_allocated_bytes == 1 << 20);
  check_untouched(&g, old);
  /* newer: a larger struct is filled as far as the library knows, the rest left alone */
  out = guard(&g, &s, sizeof s, sizeof s + 16);
  CHECK_OK(stalloc_allocator_stats(a, out));
  CHECK(out->alloc_count == 1);
  check_untouched(&g, sizeof s + 16);
  /* unset: refused, nothing written */
  out = guard(&g, &s, sizeof s, 0);
  CHECK_STATUS(stalloc_allocator_stats(a, out), STALLOC_ERR_INVALID_ARGUMENT);
  check_untouched(&g, 0);
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_trace_summary(void) {
  stalloc_trace_t* t = small_trace();
  stalloc_trace_summary_t s;
  stalloc_trace_summary_init(&s);
  guarded g;
  size_t old = OLDER(stalloc_trace_summary_t, requests);
  stalloc_trace_summary_t* out = guard(&g, &s, sizeof s, old);
  CHECK_OK(stalloc_trace_summary(t, out));
  CHECK(out->events == 30 && out->requests == 12);
  check_untouched(&g, old);
  stalloc_trace_destroy(t);
}

static void test_place(void) {
  stalloc_place_item_t it[2] = {{0, 2, 100, UINT64_MAX}, {1, 3, 100, UINT64_MAX}};
  uint64_t off[2];
  stalloc_place_params_t pp;
  stalloc_place_params_init(&pp);
  guarded gp, gr;
  stalloc_place_params_t* in = guard(&gp, &pp, sizeof pp, OLDER(stalloc_place_params_t, alignment));
  in->alignment = 64;
  in->time_limit = -1;                      /* read, it is refused */
  in->cancel = (const volatile int*)(uintptr_t)8; /* read, the search would crash on it */
  stalloc_place_result_t r;
  stalloc_place_result_init(&r);
  size_t old = OLDER(stalloc_place_result_t, peak);
  stalloc_place_result_t* out = guard(&gr, &r, sizeof r, old);
  CHECK_OK(stalloc_place(it, 2, in, off, out));
  CHECK(out->peak == 228); /* alignment 64 was read: the second 100-B item starts at 128 */
  check_untouched(&gr, old);
}

static void test_plan_params_and_info(void) {
  stalloc_trace_t* t = small_trace();
  stalloc_plan_params_t pp;
  stalloc_plan_params_init(&pp);
  guarded gp, gi;
  stalloc_plan_params_t* in = guard(&gp, &pp, sizeof pp, OLDER(stalloc_plan_params_t, time_limit));
  in->time_limit = 0.05;
  in->alignment = 3; /* read, it is refused */
  stalloc_plan_t* plan;
  CHECK_OK(stalloc_plan_create(t, in, &plan));
  stalloc_plan_info_t info;
  stalloc_plan_info_init(&info);
  size_t old = OLDER(stalloc_plan_info_t, plan_peak);
  stalloc_plan_info_t* out = guard(&gi, &info, sizeof info, old);
  CHECK_OK(stalloc_plan_info(plan, out));
  CHECK(out->plan_peak == 12288 && out->lower_bound == 12288);
  check_untouched(&gi, old);

  stalloc_replay_options_t ro;
  stalloc_replay_options_init(&ro);
  stalloc_replay_options_t* rin = guard(&gp, &ro, sizeof ro, OLDER(stalloc_replay_options_t, check_overlap));
  rin->check_data = 1; /* read, it is refused: the data check needs the host backend */
  stalloc_replay_result_t rr;
  stalloc_replay_result_init(&rr);
  old = OLDER(stalloc_replay_result_t, requests);
  stalloc_replay_result_t* rout = guard(&gi, &rr, sizeof rr, old);
  CHECK_OK(stalloc_replay(t, plan, rin, rout));
  CHECK(rout->events == 30 && rout->requests == 12);
  check_untouched(&gi, old);
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
}

static void test_simulate(void) {
  stalloc_trace_t* t = small_trace();
  stalloc_sim_params_t sp;
  stalloc_sim_params_init(&sp);
  guarded gp, gr;
  stalloc_sim_params_t* in = guard(&gp, &sp, sizeof sp, OLDER(stalloc_sim_params_t, kind));
  in->max_split_size = 5; /* read, it is refused (must be above 20 MiB) */
  stalloc_sim_result_t r;
  stalloc_sim_result_init(&r);
  size_t old = OLDER(stalloc_sim_result_t, peak_allocated);
  stalloc_sim_result_t* out = guard(&gr, &r, sizeof r, old);
  CHECK_OK(stalloc_simulate(t, in, out, NULL, NULL, NULL));
  CHECK(out->peak_allocated == 12288);
  check_untouched(&gr, old);
  stalloc_trace_destroy(t);
}

int main(void) {
  RUN(test_options_and_stats);
  RUN(test_trace_summary);
  RUN(test_place);
  RUN(test_plan_params_and_info);
  RUN(test_simulate);
  puts("test_struct_size: ok");
  return 0;
}
