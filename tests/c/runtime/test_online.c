/* test_online.c - the online lifecycle through the C API, with a real planning thread: the
 * switch comes at a step boundary without blocking it, a run whose shapes grow is re-planned,
 * a replaced pool goes back once its blocks are freed, an allocator destroyed while its
 * planner runs waits for it, and training and evaluation steps each get a plan. TSan checks the thread's hand-over in CI. */
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define LAYERS 16

static void nap(void) {
  struct timespec ts = {0, 2 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* One training-like step: activations kept through the forward, freed in reverse. */
static void step(stalloc_allocator_t* a, uint64_t scale) {
  void* act[LAYERS];
  for (int i = 0; i < LAYERS; i++) {
    CHECK_OK(stalloc_allocator_alloc(a, (size_t)(scale * (4 + i % 3) * 4096), 0, 0, &act[i]));
    void* tmp;
    CHECK_OK(stalloc_allocator_alloc(a, (size_t)(scale * 8192), 0, 0, &tmp));
    CHECK_OK(stalloc_allocator_free(a, tmp));
  }
  for (int i = LAYERS - 1; i >= 0; i--) CHECK_OK(stalloc_allocator_free(a, act[i]));
}

static stalloc_allocator_t* make(int32_t growable) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  o.growable_pool = growable;
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  return a;
}

/* An allocator running the lifecycle as a replay does: each boundary after planning began
 * waits for the plan (and for the layout hints it started), so what happens does not depend
 * on the machine. */
static stalloc_allocator_t* waiting(int32_t growable, int32_t layout_hints) {
  stalloc_allocator_t* a = make(growable);
  stalloc_online_params_t p;
  stalloc_online_params_init(&p);
  p.wait_for_plan = 1;
  p.layout_hints = layout_hints;
  CHECK_OK(stalloc_allocator_online_start(a, &p));
  return a;
}

static stalloc_online_info_t info_of(stalloc_allocator_t* a) {
  stalloc_online_info_t info;
  stalloc_online_info_init(&info);
  CHECK_OK(stalloc_allocator_online_info(a, &info));
  return info;
}

static void test_switches_in_the_background_and_replans(void) {
  stalloc_allocator_t* a = make(0);
  CHECK_OK(stalloc_allocator_online_start(a, NULL));
  void* weights;
  CHECK_OK(stalloc_allocator_alloc(a, 1 << 20, 0, 0, &weights));
  uint64_t n = 0;
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  CHECK(info_of(a).state == STALLOC_ONLINE_RECORDING);
  /* Steps go on until the plan is in use; no boundary waits for the planner. */
  for (int i = 0; i < 200 && info_of(a).plans_switched == 0; i++) {
    step(a, 4);
    CHECK_OK(stalloc_allocator_step_begin(a, n++));
    nap();
  }
  stalloc_online_info_t info = info_of(a);
  CHECK(info.plans_switched == 1 && info.state == STALLOC_ONLINE_SERVING && info.recording == 1);
  stalloc_stats_t before, after;
  stalloc_stats_init(&before);
  stalloc_stats_init(&after);
  CHECK_OK(stalloc_allocator_stats(a, &before));
  step(a, 3); /* a shorter batch takes the larger slots */
  CHECK_OK(stalloc_allocator_stats(a, &after));
  CHECK(after.plan_hits - before.plan_hits == 2 * LAYERS && after.plan_misses == before.plan_misses);
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  /* Larger shapes miss; the next plan covers them. */
  for (int i = 0; i < 200 && info_of(a).plans_switched < 2; i++) {
    step(a, 6);
    CHECK_OK(stalloc_allocator_step_begin(a, n++));
    nap();
  }
  CHECK(info_of(a).plans_switched == 2);
  stalloc_stats_init(&before);
  CHECK_OK(stalloc_allocator_stats(a, &before));
  step(a, 6);
  CHECK_OK(stalloc_allocator_stats(a, &after));
  CHECK(after.plan_hits - before.plan_hits == 2 * LAYERS && after.plan_misses == before.plan_misses);
  /* The first pool went back when its last block was freed: one pool's worth is reserved. */
  stalloc_online_plan_record_t rec[8];
  size_t count = 0;
  CHECK_OK(stalloc_allocator_online_plans(a, rec, 8, &count));
  CHECK(count >= 2 && rec[0].switched_step != UINT64_MAX && rec[1].switched_step > rec[0].switched_step);
  CHECK(rec[1].pool_size > rec[0].pool_size && rec[0].plan_seconds >= 0 && rec[0].status == 0);
  CHECK(after.reserved_bytes < rec[0].pool_size + rec[1].pool_size + (8u << 20));
  CHECK_OK(stalloc_allocator_free(a, weights));
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_destroy_while_planning(void) {
  stalloc_allocator_t* a = make(0);
  stalloc_online_params_t p;
  stalloc_online_params_init(&p);
  p.record_steps = 2;
  p.time_limit = 1.0;
  CHECK_OK(stalloc_allocator_online_start(a, &p));
  for (uint64_t n = 0; n < 3; n++) {
    CHECK_OK(stalloc_allocator_step_begin(a, n));
    step(a, 2);
  }
  CHECK_OK(stalloc_allocator_step_begin(a, 3)); /* planning starts here */
  CHECK_OK(stalloc_allocator_destroy(a));     /* joins the thread, frees its job */
}

static void test_misuse(void) {
  stalloc_allocator_t* a = make(0);
  stalloc_online_params_t p;
  stalloc_online_params_init(&p);
  p.record_steps = 1;
  CHECK_STATUS(stalloc_allocator_online_start(a, &p), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(stalloc_last_error(), "record_steps") != NULL);
  p.struct_size = 0;
  CHECK_STATUS(stalloc_allocator_online_start(a, &p), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_OK(stalloc_allocator_online_start(a, NULL));
  CHECK_STATUS(stalloc_allocator_online_start(a, NULL), STALLOC_ERR_INVALID_ARGUMENT);
  size_t count = 1;
  CHECK_OK(stalloc_allocator_online_plans(a, NULL, 0, &count));
  CHECK(count == 0);
  CHECK_OK(stalloc_allocator_destroy(a));
  stalloc_allocator_t* b = make(0);
  stalloc_online_info_t info = info_of(b);
  CHECK(info.state == STALLOC_ONLINE_OFF);
  CHECK_OK(stalloc_allocator_destroy(b));
}

/* With the growable pool, weights allocated between a step's activations (an optimizer
 * creating its state) keep granules shared: a plan's pool would come on top, so it is declined
 * and the pool goes on serving. */
static void test_declined_when_the_pool_needs_less(void) {
  stalloc_allocator_t* a = waiting(1, 1);
  void* state[LAYERS];
  for (uint64_t n = 0; n < 10; n++) {
    CHECK_OK(stalloc_allocator_step_begin(a, n));
    void* act[LAYERS];
    for (int i = 0; i < LAYERS; i++) {
      CHECK_OK(stalloc_allocator_alloc(a, (size_t)(5 + i % 3) << 18, 0, 0, &act[i]));
      if (n == 1) CHECK_OK(stalloc_allocator_alloc(a, 64 << 10, 0, 0, &state[i])); /* scattered */
    }
    for (int i = LAYERS - 1; i >= 0; i--) CHECK_OK(stalloc_allocator_free(a, act[i]));
  }
  stalloc_online_info_t info = info_of(a);
  CHECK(info.state == STALLOC_ONLINE_POOL && info.plans_switched == 0);
  stalloc_online_plan_record_t rec[4];
  size_t count = 0, declined = 0;
  CHECK_OK(stalloc_allocator_online_plans(a, rec, 4, &count));
  CHECK(count >= 1 && count <= 4);
  for (size_t i = 0; i < count; i++) { /* refused (too few repeated steps yet) or declined */
    CHECK(rec[i].switched_step == UINT64_MAX && (rec[i].declined == 1) != (rec[i].status != 0));
    if (rec[i].declined) {
      declined++;
      CHECK(rec[i].pool_size > 0);
    }
  }
  CHECK(declined == 1);
  for (int i = 0; i < LAYERS; i++) CHECK_OK(stalloc_allocator_free(a, state[i]));
  CHECK_OK(stalloc_allocator_destroy(a));
}

/* The peak reserved of ten training-like steps with the optimizer's state created between the
 * second step's activations (as in test_declined_when_the_pool_needs_less) and gradients that
 * live until the next step's start, with or without layout hints. */
static uint64_t peak_with_hints(int32_t hints, uint64_t* hinted_allocs) {
  stalloc_allocator_t* a = waiting(1, hints);
  void *state[LAYERS], *grad[LAYERS] = {0};
  for (uint64_t n = 0; n < 10; n++) {
    CHECK_OK(stalloc_allocator_step_begin(a, n));
    for (int i = 0; i < LAYERS; i++) /* zero_grad: the last step's gradients go first */
      if (grad[i]) CHECK_OK(stalloc_allocator_free(a, grad[i]));
    void *act[LAYERS], *tmp = NULL;
    for (int i = 0; i < LAYERS; i++) {
      CHECK_OK(stalloc_allocator_alloc(a, (size_t)(5 + i % 3) << 18, 0, 0, &act[i]));
      if (tmp) CHECK_OK(stalloc_allocator_free(a, tmp)); /* a temporary lives past the next layer's */
      CHECK_OK(stalloc_allocator_alloc(a, (size_t)(3 + i % 4) << 18, 0, 0, &tmp));
      if (n == 1) CHECK_OK(stalloc_allocator_alloc(a, (size_t)(2 + i % 5) << 18, 0, 0, &state[i]));
    }
    CHECK_OK(stalloc_allocator_free(a, tmp));
    for (int i = LAYERS - 1; i >= 0; i--) { /* backward: a gradient lives into the next step */
      CHECK_OK(stalloc_allocator_alloc(a, (size_t)(2 + i % 5) << 18, 0, 0, &grad[i]));
      CHECK_OK(stalloc_allocator_free(a, act[i]));
    }
  }
  for (int i = 0; i < LAYERS; i++) CHECK_OK(stalloc_allocator_free(a, grad[i]));
  stalloc_stats_t st;
  stalloc_stats_init(&st);
  CHECK_OK(stalloc_allocator_stats(a, &st));
  for (int i = 0; i < LAYERS; i++) CHECK_OK(stalloc_allocator_free(a, state[i]));
  CHECK_OK(stalloc_allocator_destroy(a));
  *hinted_allocs = st.hinted_allocs;
  return st.peak_reserved_bytes;
}

/* Layout hints: each step's requests go where a plan of the step before, placed around the
 * state in use, put them (hints are kept only where they beat best fit on the step they came
 * from); on this run the pool needs no more than best fit alone. The hint thread's hand-over
 * and the blocks that live into the next step run under the sanitizers in CI;
 * tests/python/test_online.py measures what hints save on recorded runs. */
static void test_layout_hints_follow_the_step_before(void) {
  uint64_t used_off, used_on;
  uint64_t best_fit = peak_with_hints(0, &used_off), hinted = peak_with_hints(1, &used_on);
  CHECK(used_off == 0 && used_on > 0);
  CHECK(hinted <= best_fit);
}

/* An evaluation pass: fewer allocs than a training step and no kept activations (no_grad),
 * each layer's input and a temporary freed at once. `training_sizes`: at the training step's
 * sizes, as its first requests (a pass the training plan holds); else another batch shape. */
static void eval_sized(stalloc_allocator_t* a, bool training_sizes) {
  for (int i = 0; i < LAYERS / 2; i++) {
    void *x, *tmp;
    size_t input = training_sizes ? (size_t)(4 * (4 + i % 3) * 4096) : (size_t)(7 + i % 2) * 4096;
    CHECK_OK(stalloc_allocator_alloc(a, input, 0, 0, &x));
    CHECK_OK(stalloc_allocator_alloc(a, training_sizes ? 4 * 8192 : 3 * 4096, 0, 0, &tmp));
    CHECK_OK(stalloc_allocator_free(a, tmp));
    CHECK_OK(stalloc_allocator_free(a, x));
  }
}

static void eval_pass(stalloc_allocator_t* a) { eval_sized(a, false); }

static uint64_t misses_of(stalloc_allocator_t* a) {
  stalloc_stats_t st;
  stalloc_stats_init(&st);
  CHECK_OK(stalloc_allocator_stats(a, &st));
  return st.plan_misses;
}

/* Steps in the order given, 'T' a training step and 'E' an evaluation pass, each closed by a
 * step marker; *n: the next marker's number. */
static void run_steps(stalloc_allocator_t* a, const char* order, void (*eval)(stalloc_allocator_t*), uint64_t* n) {
  for (const char* c = order; *c; c++) {
    if (*c == 'T') step(a, 4);
    else eval(a);
    CHECK_OK(stalloc_allocator_step_begin(a, (*n)++));
  }
}

/* Training steps and evaluation passes each get a plan; once both are in use, a regular order
 * and then an irregular one (told apart by each step's first requests) miss nothing. The
 * rolling recording, the choice of a kind's steps across others and the hand-over run under
 * the sanitizers in CI. */
static void test_each_kind_of_step_gets_a_plan(void) {
  stalloc_allocator_t* a = waiting(0, 1);
  void* weights;
  CHECK_OK(stalloc_allocator_alloc(a, 1 << 20, 0, 0, &weights));
  uint64_t n = 0;
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  run_steps(a, "TTETTETTETTETTE", eval_pass, &n);
  stalloc_online_info_t info = info_of(a);
  CHECK(info.state == STALLOC_ONLINE_SERVING && info.step_kinds == 2 && info.plans_switched >= 2);
  uint64_t before = misses_of(a);
  run_steps(a, "TTETETTTEETTTTE", eval_pass, &n);
  CHECK(misses_of(a) == before);
  CHECK(info_of(a).step_kinds == 2);
  CHECK_OK(stalloc_allocator_free(a, weights));
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void eval_in_training_slots(stalloc_allocator_t* a) { eval_sized(a, true); }

static uint64_t backend_allocs_of(stalloc_allocator_t* a) {
  stalloc_stats_t st;
  stalloc_stats_init(&st);
  CHECK_OK(stalloc_allocator_stats(a, &st));
  return st.backend_allocs;
}

/* A kind of step that another kind's plan already serves, missing nothing, gets no plan of its
 * own: two plans served by turns would move their idle granules between their regions at each
 * switch (the eighth GPU session: 566 granule moves an eval pass, 19% on the mean step). */
static void test_a_kind_the_plan_serves_gets_none(void) {
  stalloc_allocator_t* a = waiting(1, 1);
  void* weights;
  CHECK_OK(stalloc_allocator_alloc(a, 1 << 20, 0, 0, &weights));
  uint64_t n = 0;
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  const char* run = "TTETTETTETTETTETTE";
  run_steps(a, run, eval_in_training_slots, &n);
  stalloc_online_info_t info = info_of(a);
  CHECK(info.state == STALLOC_ONLINE_SERVING && info.step_kinds == 1 && info.plans_switched == 1);
  uint64_t misses = misses_of(a), maps = backend_allocs_of(a);
  run_steps(a, run, eval_in_training_slots, &n);
  CHECK(misses_of(a) == misses && backend_allocs_of(a) == maps); /* nothing moves */
  CHECK(info_of(a).step_kinds == 1);
  CHECK_OK(stalloc_allocator_free(a, weights));
  CHECK_OK(stalloc_allocator_destroy(a));
}

/* A larger batch from some step on (a batch ramp): more layers' worth of requests, each larger,
 * so a kind of step no plan knows. */
static void larger_step(stalloc_allocator_t* a) {
  void* act[LAYERS + 2];
  for (int i = 0; i < LAYERS + 2; i++) CHECK_OK(stalloc_allocator_alloc(a, (size_t)(6 + i % 5) << 16, 0, 0, &act[i]));
  for (int i = LAYERS + 1; i >= 0; i--) CHECK_OK(stalloc_allocator_free(a, act[i]));
}

/* With a growable pool, a step of a kind with no plan (the first of a batch ramp) is served by
 * the other kind's plan, as it cannot be told apart before it happens, and misses; the steps
 * after it go to the growable pool, not to that plan again, until their kind has a plan. */
static void test_a_kind_with_no_plan_goes_to_the_pool(void) {
  stalloc_allocator_t* a = waiting(1, 1);
  uint64_t n = 0;
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  for (int i = 0; i < 8; i++) {
    step(a, 4);
    CHECK_OK(stalloc_allocator_step_begin(a, n++));
  }
  CHECK(info_of(a).state == STALLOC_ONLINE_SERVING);
  uint64_t before = misses_of(a);
  larger_step(a); /* served by the plan: misses */
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  uint64_t first = misses_of(a);
  CHECK(first > before);
  larger_step(a); /* the pool */
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  CHECK(misses_of(a) == first);
  step(a, 4); /* the plan's kind again: its plan, which it hits */
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  CHECK(misses_of(a) == first);
  CHECK_OK(stalloc_allocator_destroy(a));
}

/* On an asynchronous device a free leaves its block pending on the stream's queued work, so a
 * replaced plan whose blocks were all freed in the step before the switch was not idle when it
 * was retired, and no later free looked at it again: it kept its pool for good. It goes back
 * at the first step boundary after that work is done. */
static void test_a_replaced_pool_goes_back_once_its_queued_work_is_done(void) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  o.growable_pool = 0;
  o.virtual_lag = 64; /* allocator calls: about one layer of a step */
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  stalloc_online_params_t p;
  stalloc_online_params_init(&p);
  p.wait_for_plan = 1;
  CHECK_OK(stalloc_allocator_online_start(a, &p));
  void* weights;
  CHECK_OK(stalloc_allocator_alloc(a, 1 << 20, 0, 0, &weights));
  uint64_t n = 0;
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  for (int i = 0; i < 50 && info_of(a).plans_switched == 0; i++) {
    step(a, 4);
    CHECK_OK(stalloc_allocator_step_begin(a, n++));
  }
  for (int i = 0; i < 50 && info_of(a).plans_switched < 2; i++) {
    step(a, 6);
    CHECK_OK(stalloc_allocator_step_begin(a, n++));
  }
  CHECK(info_of(a).plans_switched == 2);
  step(a, 6);
  CHECK_OK(stalloc_allocator_step_begin(a, n++));
  stalloc_online_plan_record_t rec[8];
  size_t count = 0;
  CHECK_OK(stalloc_allocator_online_plans(a, rec, 8, &count));
  stalloc_stats_t st;
  stalloc_stats_init(&st);
  CHECK_OK(stalloc_allocator_stats(a, &st));
  CHECK(count >= 2 && st.reserved_bytes < rec[1].pool_size + rec[0].pool_size / 2 + (4u << 20));
  CHECK_OK(stalloc_allocator_free(a, weights));
  CHECK_OK(stalloc_allocator_destroy(a));
}

int main(void) {
  RUN(test_switches_in_the_background_and_replans);
  RUN(test_a_replaced_pool_goes_back_once_its_queued_work_is_done);
  RUN(test_destroy_while_planning);
  RUN(test_misuse);
  RUN(test_declined_when_the_pool_needs_less);
  RUN(test_layout_hints_follow_the_step_before);
  RUN(test_each_kind_of_step_gets_a_plan);
  RUN(test_a_kind_the_plan_serves_gets_none);
  RUN(test_a_kind_with_no_plan_goes_to_the_pool);
  return 0;
}
