/* test_planner.c - the planner pipeline on synthetic training traces: iteration detection
 * with and without step markers, classes, validity of the layout judged by a naive overlap
 * checker written here (it shares no code with the planner) on the real trace and on a
 * 3-iteration unrolled timeline, reusable space, fingerprint checks and bad input. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "planner_traces.h"
#include "stalloc/stalloc.h"

/* ---- the independent judge ---------------------------------------------------------- */

typedef struct live {
  uint64_t lo, hi, off, size; /* hi = UINT64_MAX: never ends */
} live;

/* Every pair whose lifetimes intersect must have disjoint byte ranges. */
static void check_disjoint(const live* v, size_t n, const char* what) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++) {
      uint64_t lo = v[i].lo > v[j].lo ? v[i].lo : v[j].lo;
      uint64_t hi = v[i].hi < v[j].hi ? v[i].hi : v[j].hi;
      if (lo >= hi) continue;
      if (v[i].off < v[j].off + v[j].size && v[j].off < v[i].off + v[i].size) {
        fprintf(stderr, "%s: %zu [%llu,%llu)@%llu+%llu overlaps %zu [%llu,%llu)@%llu+%llu\n", what,
                i, (unsigned long long)v[i].lo, (unsigned long long)v[i].hi,
                (unsigned long long)v[i].off, (unsigned long long)v[i].size, j,
                (unsigned long long)v[j].lo, (unsigned long long)v[j].hi,
                (unsigned long long)v[j].off, (unsigned long long)v[j].size);
        exit(1);
      }
    }
}

static const stalloc_plan_entry_t* entry_for(const stalloc_plan_entry_t* pro, size_t np,
                                             const stalloc_plan_entry_t* it, size_t ni, size_t i) {
  if (i < np) return &pro[i];
  if (!ni) return NULL;
  return &it[(i - np) % ni];
}

/* The real run: every planned request of the trace at its planned offset, event-time lifetimes. */
static void check_on_trace(const stalloc_plan_t* plan, const stalloc_trace_t* t) {
  const stalloc_request_t* r;
  size_t n, np, ni;
  const stalloc_plan_entry_t *pro, *it;
  CHECK_OK(stalloc_trace_requests(t, &r, &n));
  CHECK_OK(stalloc_plan_entries(plan, 0, &pro, &np));
  CHECK_OK(stalloc_plan_entries(plan, 1, &it, &ni));
  stalloc_plan_info_t info;
  stalloc_plan_info_init(&info);
  CHECK_OK(stalloc_plan_info(plan, &info));
  live* v = malloc(n * sizeof *v);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    const stalloc_plan_entry_t* e = entry_for(pro, np, it, ni, i);
    if (!e || e->offset == UINT64_MAX) continue;
    if (e->cls == STALLOC_CLASS_DYNAMIC)
      CHECK(r[i].size <= e->size);          /* a slot: every size seen fits its capacity */
    else
      CHECK(e->size == r[i].size);          /* matched by position and size */
    CHECK(e->offset % info.alignment == 0);
    CHECK(e->offset + e->size <= info.pool_size);
    v[m++] = (live){r[i].alloc_event, r[i].free_event, e->offset, e->size};
  }
  CHECK(m > 0);
  check_disjoint(v, m, "trace replay");
  free(v);
}

/* alloc time of request i's free: allocs before it (the test's own computation) */
static uint64_t free_time(const stalloc_request_t* r, size_t n, size_t i) {
  if (r[i].free_event == UINT64_MAX) return UINT64_MAX;
  uint64_t k = i;
  while (k < n && r[k].alloc_event < r[i].free_event) k++;
  return k;
}

/* Prologue, then the first steady iteration's lifetimes repeated `copies` times (a request
 * freed in the next iteration overlaps that copy's start; persistent ones never end). */
static void check_unrolled(const stalloc_plan_t* plan, const stalloc_trace_t* t, size_t copies) {
  const stalloc_request_t* r;
  size_t n, np, ni;
  const stalloc_plan_entry_t *pro, *it;
  CHECK_OK(stalloc_trace_requests(t, &r, &n));
  CHECK_OK(stalloc_plan_entries(plan, 0, &pro, &np));
  CHECK_OK(stalloc_plan_entries(plan, 1, &it, &ni));
  CHECK(ni > 0 && np + ni <= n);
  live* v = malloc((np + copies * ni) * sizeof *v);
  size_t m = 0;
  for (size_t i = 0; i < np; i++) {
    if (pro[i].offset == UINT64_MAX) continue;
    uint64_t f = free_time(r, n, i);
    if (pro[i].cls == STALLOC_CLASS_PERSISTENT) f = UINT64_MAX;
    v[m++] = (live){i, f, pro[i].offset, pro[i].size};
  }
  for (size_t k = 0; k < copies; k++)
    for (size_t p = 0; p < ni; p++) {
      if (it[p].offset == UINT64_MAX) continue;
      uint64_t f = free_time(r, n, np + p);
      CHECK(f != UINT64_MAX);
      v[m++] = (live){np + k * ni + p, f + k * ni, it[p].offset, it[p].size};
    }
  check_disjoint(v, m, "3-iteration unrolled");
  free(v);
}

/* Dynamic Reusable Space: during each dynamic request's lifetime in the real trace, the ranges
 * of its window are free of every planned request. */
static void check_reuse(const stalloc_plan_t* plan, const stalloc_trace_t* t) {
  const stalloc_request_t* r;
  size_t n, np, ni, wn, rn;
  const stalloc_plan_entry_t *pro, *it;
  const stalloc_reuse_window_t* w;
  const stalloc_reuse_range_t* g;
  CHECK_OK(stalloc_trace_requests(t, &r, &n));
  CHECK_OK(stalloc_plan_entries(plan, 0, &pro, &np));
  CHECK_OK(stalloc_plan_entries(plan, 1, &it, &ni));
  CHECK_OK(stalloc_plan_reuse(plan, &w, &wn, &g, &rn));
  CHECK(wn > 0 && rn > 0);
  size_t dyn = 0;
  for (size_t i = np; i < n; i++) {
    const stalloc_plan_entry_t* d = entry_for(pro, np, it, ni, i);
    if (d->cls != STALLOC_CLASS_DYNAMIC || d->window == UINT32_MAX) continue;
    dyn++;
    CHECK(d->window < wn);
    uint64_t pos = (i - np) % ni;
    CHECK(w[d->window].begin <= pos && pos < w[d->window].end);
    uint64_t lo = r[i].alloc_event, hi = r[i].free_event;
    for (size_t j = 0; j < n; j++) {
      const stalloc_plan_entry_t* e = entry_for(pro, np, it, ni, j);
      if (e->offset == UINT64_MAX) continue;
      uint64_t a = r[j].alloc_event, b = r[j].free_event;
      if (e->cls == STALLOC_CLASS_PERSISTENT) b = UINT64_MAX;
      if (!(a < hi && lo < b)) continue;
      for (uint32_t k = 0; k < w[d->window].range_count; k++) {
        const stalloc_reuse_range_t* q = &g[w[d->window].first_range + k];
        CHECK(!(q->offset < e->offset + e->size && e->offset < q->offset + q->size));
      }
    }
  }
  CHECK(dyn > 0);
}

static stalloc_plan_t* plan_headroom(const stalloc_trace_t* t, int markers_used, double headroom) {
  stalloc_plan_params_t p;
  stalloc_plan_params_init(&p);
  CHECK(p.dynamic_headroom == 1.0);
  p.dynamic_headroom = headroom;
  p.time_limit = 0.2;
  p.use_step_markers = markers_used;
  stalloc_plan_t* plan;
  CHECK_OK(stalloc_plan_create(t, &p, &plan));
  return plan;
}

static stalloc_plan_t* plan_of(const stalloc_trace_t* t, int markers_used) {
  return plan_headroom(t, markers_used, 1.0);
}

static void info_of(const stalloc_plan_t* plan, stalloc_plan_info_t* info) {
  stalloc_plan_info_init(info);
  CHECK_OK(stalloc_plan_info(plan, info));
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_dense_with_markers(void) {
  stalloc_trace_t* t = make_training_trace(1, 0, 4);
  stalloc_plan_t* plan = plan_of(t, 1);
  stalloc_plan_info_t info;
  info_of(plan, &info);
  CHECK(info.uses_step_markers == 1);
  CHECK(info.steps_found == 4);
  /* each steady step: 6 layers x 4 allocs, the carried loss, 6 grads, the update */
  CHECK(info.iteration_count == 6 * 4 + 1 + 6 + 1);
  CHECK(info.prologue_count == 6 + info.iteration_count + 6);
  CHECK(info.persistent == 13); /* weights, optimizer state, step 1's carried loss */
  CHECK(info.tiny == 6 * 2);             /* the scalars, in step 1 and in the iteration */
  CHECK(info.dynamic == 0 && info.window_count == 0);
  CHECK(info.periodic == info.iteration_count - 6);
  CHECK(info.warmup == info.prologue_count - 13 - 6);
  CHECK(info.lower_bound > 0 && info.plan_peak >= info.lower_bound);
  CHECK(info.trace_lower_bound >= info.lower_bound);
  CHECK(info.pool_size >= info.plan_peak && info.pool_size % 512 == 0);
  CHECK(info.ratio >= 1.0 && info.ratio < 1.05);
  check_on_trace(plan, t);
  check_unrolled(plan, t, 3);
  CHECK_OK(stalloc_plan_check(plan, t));
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
}

static void test_dense_without_markers(void) {
  stalloc_trace_t* marked = make_training_trace(1, 0, 4);
  stalloc_trace_t* t = make_training_trace(0, 0, 4);
  stalloc_plan_info_t a, b;
  stalloc_plan_t* pa = plan_of(marked, 1);
  stalloc_plan_t* pb = plan_of(t, 1); /* no markers in the trace: the period is searched */
  stalloc_plan_t* pc = plan_of(marked, 0); /* markers there but switched off */
  info_of(pa, &a);
  info_of(pb, &b);
  CHECK(b.uses_step_markers == 0);
  CHECK(b.iteration_count == a.iteration_count);
  CHECK(b.steps_found >= 3);
  CHECK(b.dynamic == 0);
  check_on_trace(pb, t);
  check_unrolled(pb, t, 3);
  info_of(pc, &b);
  CHECK(b.uses_step_markers == 0 && b.iteration_count == a.iteration_count);
  check_on_trace(pc, marked);
  check_unrolled(pc, marked, 3);
  stalloc_plan_destroy(pa);
  stalloc_plan_destroy(pb);
  stalloc_plan_destroy(pc);
  stalloc_trace_destroy(marked);
  stalloc_trace_destroy(t);
}

/* The arenas, judged from the trace alone: for every window, the most live bytes (aligned) of
 * its dynamic requests in any steady iteration fit in one of the window's reuse ranges. */
static void check_arenas(const stalloc_plan_t* plan, const stalloc_trace_t* t) {
  const stalloc_request_t* r;
  size_t n, np, ni, wn, rn;
  const stalloc_plan_entry_t *pro, *it;
  const stalloc_reuse_window_t* w;
  const stalloc_reuse_range_t* g;
  CHECK_OK(stalloc_trace_requests(t, &r, &n));
  CHECK_OK(stalloc_plan_entries(plan, 0, &pro, &np));
  CHECK_OK(stalloc_plan_entries(plan, 1, &it, &ni));
  CHECK_OK(stalloc_plan_reuse(plan, &w, &wn, &g, &rn));
  for (size_t k = 0; k < wn; k++) {
    uint64_t largest = 0, need = 0;
    for (uint32_t j = 0; j < w[k].range_count; j++)
      if (g[w[k].first_range + j].size > largest) largest = g[w[k].first_range + j].size;
    /* live bytes at each alloc of the window's dynamic requests, by brute force */
    for (size_t i = np; i < n; i++) {
      if (it[(i - np) % ni].cls != STALLOC_CLASS_DYNAMIC || it[(i - np) % ni].window != k) continue;
      uint64_t live = 0;
      for (size_t j = np; j <= i; j++) {
        const stalloc_plan_entry_t* e = &it[(j - np) % ni];
        if (e->cls != STALLOC_CLASS_DYNAMIC || e->window != k) continue;
        if (r[j].free_event == UINT64_MAX || r[j].free_event > r[i].alloc_event)
          live += (r[j].size + 511) / 512 * 512;
      }
      if (live > need) need = live;
    }
    CHECK(need > 0 && largest >= need);
  }
}

static void test_moe(void) {
  for (int markers = 1; markers >= 0; markers--) {
    stalloc_trace_t* t = make_training_trace(markers, 1, 5);
    stalloc_plan_t* none = plan_headroom(t, 1, 0);
    stalloc_plan_t* plan = plan_headroom(t, 1, 1.0);
    stalloc_plan_info_t info, without;
    info_of(plan, &info);
    info_of(none, &without);
    CHECK(info.iteration_count == 6 * 4 + 1 + 6 + 1);
    CHECK(info.steps_found >= 4);
    CHECK(info.dynamic == 6); /* the expert inputs, whose sizes follow the "routing" */
    CHECK(info.window_count >= 1 && info.reusable_bytes > 0);
    CHECK(without.window_count == info.window_count && without.reusable_bytes > 0);
    CHECK(info.pool_size >= without.pool_size); /* the arenas take room */
    check_arenas(plan, t);
    for (int k = 0; k < 2; k++) {
      stalloc_plan_t* q = k ? plan : none;
      check_on_trace(q, t);
      check_unrolled(q, t, 3);
      check_reuse(q, t);
      CHECK_OK(stalloc_plan_check(q, t)); /* dynamic positions are masked */
    }
    stalloc_plan_destroy(plan);
    stalloc_plan_destroy(none);
    stalloc_trace_destroy(t);
  }
}

/* A position whose size repeats in the steady iterations but differs in the warm-up step is
 * dynamic when the iterations already show routing; a dense trace's warm-up step, shifted at
 * its end by the optimizer's state, marks nothing. */
static stalloc_trace_t* warm_trace(int routed) {
  tb b = {0};
  b.markers = 1;
  tb_step(&b, 0);
  tb_alloc(&b, 65536); /* weights */
  for (uint64_t step = 1; step <= 4; step++) {
    tb_step(&b, step);
    uint64_t a = tb_alloc(&b, 32768);
    uint64_t xs = step == 1 ? 9216 : 8192; /* repeats in steps 2-4 */
    uint64_t x = tb_alloc(&b, xs);
    uint64_t ys = routed ? 4096 + 512 * step : 4096;
    uint64_t y = tb_alloc(&b, ys);
    uint64_t g = tb_alloc(&b, 16384);
    tb_free(&b, g, 16384);
    tb_free(&b, y, ys);
    tb_free(&b, x, xs);
    tb_free(&b, a, 32768);
    if (step == 1) tb_alloc(&b, 131072); /* optimizer state */
    uint64_t u = tb_alloc(&b, 65536);
    tb_free(&b, u, 65536);
  }
  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_create(&t));
  CHECK_OK(stalloc_trace_append(t, b.ev, b.n));
  free(b.ev);
  return t;
}

static void test_warmup_step_shows_routing(void) {
  for (int routed = 0; routed <= 1; routed++) {
    stalloc_trace_t* t = warm_trace(routed);
    stalloc_plan_t* plan = plan_of(t, 1);
    stalloc_plan_info_t info;
    info_of(plan, &info);
    CHECK(info.iteration_count == 5 && info.steps_found == 3);
    const stalloc_plan_entry_t* it;
    size_t ni;
    CHECK_OK(stalloc_plan_entries(plan, 1, &it, &ni));
    CHECK(it[0].cls == STALLOC_CLASS_PERIODIC && it[3].cls == STALLOC_CLASS_PERIODIC);
    CHECK(it[4].cls == STALLOC_CLASS_PERIODIC); /* the update: after the warm-up step's shift */
    CHECK(it[1].cls == (routed ? STALLOC_CLASS_DYNAMIC : STALLOC_CLASS_PERIODIC));
    CHECK(it[2].cls == (routed ? STALLOC_CLASS_DYNAMIC : STALLOC_CLASS_PERIODIC));
    CHECK(info.dynamic == (routed ? 2u : 0u));
    check_on_trace(plan, t);
    check_unrolled(plan, t, 3);
    stalloc_plan_destroy(plan);
    stalloc_trace_destroy(t);
  }
}

static void test_static_and_switches(void) {
  stalloc_trace_t* t = make_training_trace(1, 0, 3);
  stalloc_plan_params_t p;
  stalloc_plan_params_init(&p);
  CHECK(p.struct_size == sizeof p && p.alignment == 512 && p.tiny_threshold == 512);
  p.detect_period = 0;
  p.classify = 0;
  p.time_limit = 0;
  stalloc_plan_t* plan;
  CHECK_OK(stalloc_plan_create(t, &p, &plan));
  stalloc_plan_info_t info;
  info_of(plan, &info);
  const stalloc_request_t* r;
  size_t n;
  CHECK_OK(stalloc_trace_requests(t, &r, &n));
  CHECK(info.iteration_count == 0 && info.prologue_count == n && info.steps_found == 0);
  CHECK(info.tiny == 0); /* classification off: the scalars are planned too */
  CHECK(info.lower_bound == info.trace_lower_bound);
  check_on_trace(plan, t);
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
}

static void test_mismatch_and_bad_input(void) {
  stalloc_trace_t* t = make_training_trace(1, 0, 3);
  stalloc_trace_t* other = make_training_trace(1, 1, 3);
  stalloc_trace_t* empty;
  CHECK_OK(stalloc_trace_create(&empty));
  stalloc_plan_t* plan = plan_of(t, 1);
  CHECK_STATUS(stalloc_plan_check(plan, other), STALLOC_ERR_PLAN_MISMATCH);
  CHECK_STATUS(stalloc_plan_check(plan, empty), STALLOC_ERR_PLAN_MISMATCH);
  CHECK(strstr(stalloc_last_error(), "allocs") != NULL);

  stalloc_plan_params_t p;
  stalloc_plan_params_init(&p);
  p.alignment = 384;
  stalloc_plan_t* bad = (stalloc_plan_t*)&p;
  CHECK_STATUS(stalloc_plan_create(t, &p, &bad), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(bad == NULL);
  stalloc_plan_params_init(&p);
  p.time_limit = -1;
  CHECK_STATUS(stalloc_plan_create(t, &p, &bad), STALLOC_ERR_INVALID_ARGUMENT);
  p.time_limit = 0;
  p.dynamic_headroom = 0.5; /* an arena smaller than what was seen */
  CHECK_STATUS(stalloc_plan_create(t, &p, &bad), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(stalloc_last_error(), "dynamic_headroom") != NULL);
  p.dynamic_headroom = 1.0 / 0.0;
  CHECK_STATUS(stalloc_plan_create(t, &p, &bad), STALLOC_ERR_INVALID_ARGUMENT);
  stalloc_plan_params_init(&p);
  p.time_limit = 0;
  p.struct_size = 0;
  CHECK_STATUS(stalloc_plan_create(t, &p, &bad), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_plan_create(NULL, NULL, &bad), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_plan_create(t, NULL, NULL), STALLOC_ERR_INVALID_ARGUMENT);

  /* an empty trace gives an empty, valid plan */
  CHECK_OK(stalloc_plan_create(empty, NULL, &bad));
  stalloc_plan_info_t info;
  info_of(bad, &info);
  CHECK(info.prologue_count == 0 && info.iteration_count == 0 && info.plan_peak == 0);
  stalloc_plan_destroy(bad);
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
  stalloc_trace_destroy(other);
  stalloc_trace_destroy(empty);
}

/* Requests near 2^64 bytes (found by fuzz_replay): the iteration phase, the planned lower
 * bound and the arenas summed sizes in signed 64 bits (undefined behaviour, caught by UBSan in
 * the sanitizer build); now they sum in 128 bits and saturate. */
static void test_huge_sizes(void) {
  for (int markers = 0; markers < 2; markers++) {
    stalloc_trace_t* t;
    CHECK_OK(stalloc_trace_create(&t));
    uint64_t id = 0;
    for (uint64_t step = 0; step < 4; step++) {
      stalloc_event_t e[7] = {{.id = step, .kind = STALLOC_EVENT_STEP},
                              {.id = id + 1, .size = 1ull << 62, .kind = STALLOC_EVENT_ALLOC},
                              {.id = id + 2, .size = 1ull << 62, .kind = STALLOC_EVENT_ALLOC},
                              {.id = id + 3, .size = (1ull << 62) + step, .kind = STALLOC_EVENT_ALLOC},
                              {.id = id + 1, .kind = STALLOC_EVENT_FREE},
                              {.id = id + 2, .kind = STALLOC_EVENT_FREE},
                              {.id = id + 3, .kind = STALLOC_EVENT_FREE}};
      id += 3;
      CHECK_OK(stalloc_trace_append(t, markers ? e : e + 1, markers ? 7 : 6));
    }
    stalloc_plan_params_t p;
    stalloc_plan_params_init(&p);
    p.time_limit = 0;
    stalloc_plan_t* plan = NULL;
    /* 3 * 2^62 + 3 live bytes fit 64 bits but not a signed 64-bit sum */
    CHECK_OK(stalloc_plan_create(t, &p, &plan));
    stalloc_plan_info_t info;
    info_of(plan, &info);
    CHECK(info.trace_lower_bound == 3 * (1ull << 62) + 3);
    CHECK(info.plan_peak >= 2 * (1ull << 62) && info.plan_peak <= info.pool_size);
    CHECK_OK(stalloc_plan_check(plan, t));
    stalloc_plan_destroy(plan);
    stalloc_trace_destroy(t);
  }
}

int main(void) {
  RUN(test_huge_sizes);
  RUN(test_dense_with_markers);
  RUN(test_dense_without_markers);
  RUN(test_moe);
  RUN(test_warmup_step_shows_routing);
  RUN(test_static_and_switches);
  RUN(test_mismatch_and_bad_input);
  return 0;
}
