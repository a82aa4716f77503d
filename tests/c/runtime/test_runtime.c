/* test_runtime.c - plan mode: hits on a run that follows its plan, resync after inserted,
 * dropped and resized requests and cut iterations, safety under plans the run breaks, reusable
 * space, stream events, bad plans. Plans are built by hand here (plan.h) with a trivial layout
 * (every position its own bytes), so these tests do not depend on the planner. */
#include <string.h>

#include "runtime/allocator.h"
#include "check.h"
#include "hand_plan.h"
#include "plan/plan.h"
#include "runtime/runtime.h"

#define PERSISTENT 10
#define M 60 /* allocs per iteration */

static uint64_t size_at(int i) {
  if (i % 5 == 0) return 64 + (uint64_t)i; /* tiny */
  return 512 * (1 + (uint64_t)(i * 37) % 23) + (uint64_t)(i % 3) * 100;
}

typedef struct gen {
  int iters;
  double p_insert, p_drop, p_resize;
  int cut_every, cut_len; /* every cut_every-th iteration loses its last cut_len allocs */
  bool steps;
  uint32_t seed;
} gen;

typedef struct pending_free {
  uint64_t id;
  int due; /* alloc count at which it is freed */
} pending_free;

static uint32_t rng_next(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}
static double rnd(uint32_t* s) { return (double)rng_next(s) / (double)(1u << 24); }

typedef struct builder {
  stalloc_trace_t* t;
  uint64_t next_id;
  int allocs;
  pending_free live[4096];
  int n;
} builder;

static void emit(builder* b, uint8_t kind, uint64_t id, uint64_t size) {
  stalloc_event_t e = {.id = id, .size = size, .kind = kind};
  CHECK_OK(stalloc_trace_append(b->t, &e, 1));
}

static void free_due(builder* b, bool all) {
  for (int i = 0; i < b->n;) {
    if (all || b->live[i].due <= b->allocs) {
      emit(b, STALLOC_EVENT_FREE, b->live[i].id, 0);
      b->live[i] = b->live[--b->n];
    } else {
      i++;
    }
  }
}

static void alloc_ev(builder* b, uint64_t size, int lifetime) {
  uint64_t id = b->next_id++;
  emit(b, STALLOC_EVENT_ALLOC, id, size);
  b->allocs++;
  if (lifetime >= 0) b->live[b->n++] = (pending_free){id, b->allocs + lifetime};
  free_due(b, false);
}

/* A synthetic training run; *unperturbed counts planned (non-tiny) iteration requests kept
 * exactly as the template has them. */
static stalloc_trace_t* make_trace(const gen* g, uint64_t* unperturbed) {
  builder b = {.next_id = 1};
  CHECK_OK(stalloc_trace_create(&b.t));
  uint32_t s = g->seed;
  uint64_t kept = 0;
  for (int i = 0; i < PERSISTENT; i++) alloc_ev(&b, 4096 * (uint64_t)(i + 1), -1);
  for (int it = 0; it < g->iters; it++) {
    if (g->steps) emit(&b, STALLOC_EVENT_STEP, (uint64_t)it, 0);
    int end = M;
    if (g->cut_every && it % g->cut_every == g->cut_every - 1) end = M - g->cut_len;
    for (int i = 0; i < end; i++) {
      if (g->p_insert && rnd(&s) < g->p_insert) alloc_ev(&b, 1000 + 512 * (rng_next(&s) % 40), 2);
      if (g->p_drop && rnd(&s) < g->p_drop) continue;
      uint64_t size = size_at(i);
      bool resized = g->p_resize && rnd(&s) < g->p_resize;
      if (resized) size += 3 * 512 + 8;
      if (!resized && size > ST_TINY_MAX) kept++;
      alloc_ev(&b, size, 1 + (i * 7) % 6);
    }
    free_due(&b, true);
  }
  if (unperturbed) *unperturbed = kept;
  return b.t;
}

/* The template's plan: every position its own bytes (valid, not small). */
typedef struct hand_plan {
  stalloc_plan p;
  st_plan_entry pro[PERSISTENT], iter[M];
  st_reuse_window win[1];
  st_reuse_range ranges[2];
} hand_plan;

static void make_plan(hand_plan* h, bool steps) {
  memset(h, 0, sizeof *h);
  uint64_t off = 0;
  for (int i = 0; i < PERSISTENT; i++) {
    h->pro[i] = (st_plan_entry){4096 * (uint64_t)(i + 1), off, PLAN_CLASS_PERSISTENT, UINT32_MAX};
    off += 4096 * (uint64_t)(i + 1);
  }
  for (int i = 0; i < M; i++) {
    uint64_t size = size_at(i);
    if (size <= ST_TINY_MAX) {
      h->iter[i] = (st_plan_entry){size, PLAN_NO_OFFSET, PLAN_CLASS_TINY, UINT32_MAX};
      continue;
    }
    h->iter[i] = (st_plan_entry){size, off, PLAN_CLASS_PERIODIC, UINT32_MAX};
    off += st_align_up(size, 512);
  }
  h->p.alignment = 512;
  h->p.pool_size = off;
  h->p.plan_peak = off;
  h->p.uses_step_markers = steps;
  h->p.prologue = h->pro;
  h->p.prologue_count = PERSISTENT;
  h->p.iteration = h->iter;
  h->p.iteration_count = M;
  seal_plan(&h->p);
}

static uint64_t planned_per_iteration(void) {
  uint64_t n = 0;
  for (int i = 0; i < M; i++) n += size_at(i) > ST_TINY_MAX;
  return n;
}

static stalloc_replay_result_t replay(stalloc_trace_t* t, const stalloc_plan* p, stalloc_backend_kind_t backend) {
  stalloc_replay_options_t o;
  stalloc_replay_options_init(&o);
  o.backend = backend;
  o.check_data = backend == STALLOC_BACKEND_HOST;
  stalloc_replay_result_t r;
  stalloc_replay_result_init(&r);
  CHECK_OK(stalloc_replay(t, p, &o, &r));
  CHECK(r.checked_events == r.requests);
  return r;
}

static void test_follows_plan(void) {
  hand_plan h;
  make_plan(&h, true);
  gen g = {.iters = 50, .steps = true};
  stalloc_trace_t* t = make_trace(&g, NULL);
  for (int k = 0; k < 2; k++) {
    stalloc_replay_result_t r = replay(t, &h.p, k ? STALLOC_BACKEND_HOST : STALLOC_BACKEND_VIRTUAL);
    CHECK(r.hits == PERSISTENT + 50 * planned_per_iteration()); /* wraps 50 times */
    CHECK(r.misses == 0 && r.fallbacks == 0 && r.resyncs == 0 && r.dynamic == 0);
    CHECK(r.tiny == 50 * (M - planned_per_iteration()));
    /* the pool is address space of the growable pool: only the granules its blocks touch count */
    CHECK(r.pool_size >= h.p.pool_size && r.peak_reserved >= r.peak_allocated);
  }
  stalloc_trace_destroy(t);
}

static void test_perturbed(void) {
  hand_plan h;
  make_plan(&h, true);
  for (uint32_t seed = 1; seed <= 3; seed++) {
    gen g = {.iters = 40, .p_insert = 0.03, .p_drop = 0.03, .p_resize = 0.03, .steps = true, .seed = seed};
    uint64_t kept;
    stalloc_trace_t* t = make_trace(&g, &kept);
    stalloc_replay_result_t r = replay(t, &h.p, STALLOC_BACKEND_HOST); /* overlap + data checked */
    CHECK(r.hits >= 0.95 * (double)(kept + PERSISTENT));
    CHECK(r.resyncs > 0 && r.misses > 0);
    /* Same without step markers: resync by sizes alone. */
    stalloc_replay_options_t o;
    stalloc_replay_options_init(&o);
    o.use_steps = 0;
    stalloc_replay_result_init(&r);
    CHECK_OK(stalloc_replay(t, &h.p, &o, &r));
    CHECK(r.hits >= 0.95 * (double)(kept + PERSISTENT));
    stalloc_trace_destroy(t);
  }
}

static void test_cut_iterations(void) {
  hand_plan h;
  make_plan(&h, true);
  uint64_t total = PERSISTENT, per = planned_per_iteration();
  gen g = {.iters = 40, .cut_every = 4, .cut_len = 25, .steps = true};
  uint64_t kept;
  stalloc_trace_t* t = make_trace(&g, &kept);
  total = kept + PERSISTENT;
  stalloc_replay_result_t r = replay(t, &h.p, STALLOC_BACKEND_VIRTUAL);
  CHECK(r.hits == total); /* the step marker puts the cursor back at the iteration start */
  CHECK(r.resyncs == 9); /* the 10th cut iteration is the last: no marker follows */
  /* Without markers a cut costs a few misses before the sizes lead back. */
  stalloc_replay_options_t o;
  stalloc_replay_options_init(&o);
  o.use_steps = 0;
  stalloc_replay_result_init(&r);
  CHECK_OK(stalloc_replay(t, &h.p, &o, &r));
  CHECK(r.hits >= total - 10 * 4);
  (void)per;
  stalloc_trace_destroy(t);
}

/* A broken plan (every iteration entry at offset 0): the run must never get shared bytes. */
static void test_broken_plan_is_safe(void) {
  hand_plan h;
  make_plan(&h, true);
  for (int i = 0; i < M; i++)
    if (h.iter[i].offset != PLAN_NO_OFFSET) h.iter[i].offset = 4096 * 55; /* after the persistent */
  h.p.pool_size = 4096 * 55 + 24 * 512;
  seal_plan(&h.p); /* consistent in itself: only the overlap is wrong, which no check sees */
  gen g = {.iters = 10, .steps = true};
  stalloc_trace_t* t = make_trace(&g, NULL);
  stalloc_replay_result_t r = replay(t, &h.p, STALLOC_BACKEND_HOST);
  CHECK(r.fallbacks > 0 && r.misses == r.fallbacks);
  CHECK(r.hits + r.fallbacks == PERSISTENT + 10 * planned_per_iteration());
  stalloc_trace_destroy(t);
}

/* A plan from another run (other sizes): everything misses, nothing breaks. */
static void test_foreign_plan(void) {
  hand_plan h;
  make_plan(&h, false);
  /* Every size 8 bytes smaller than the run's: no request fits its entry. */
  for (int i = 0; i < M; i++) h.iter[i].size -= 8;
  for (int i = 0; i < PERSISTENT; i++) h.pro[i].size -= 8;
  seal_plan(&h.p);
  gen g = {.iters = 10, .seed = 9};
  stalloc_trace_t* t = make_trace(&g, NULL);
  stalloc_replay_result_t r = replay(t, &h.p, STALLOC_BACKEND_HOST);
  CHECK(r.hits == 0 && r.fallbacks > 0);
  stalloc_trace_destroy(t);
}

static void test_allocs_before_plan(void) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  void* early;
  CHECK_OK(stalloc_allocator_alloc(a, 4096, 0, 0, &early));
  memset(early, 7, 4096);
  hand_plan h;
  make_plan(&h, false);
  h.pro[0].size = 4096; /* the early alloc took position 0; the plan continues after it */
  seal_plan(&h.p);
  CHECK_OK(stalloc_allocator_load_plan(a, &h.p));
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_INVALID_ARGUMENT);
  void* p;
  CHECK_OK(stalloc_allocator_alloc(a, 8192, 0, 0, &p)); /* position 1 */
  stalloc_stats_t s;
  stalloc_stats_init(&s);
  CHECK_OK(stalloc_allocator_stats(a, &s));
  CHECK(s.plan_hits == 1);
  CHECK(((unsigned char*)early)[4095] == 7);
  CHECK_OK(stalloc_allocator_free(a, early));
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_STATUS(stalloc_allocator_free(a, p), STALLOC_ERR_DOUBLE_FREE);
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_bad_plans(void) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  hand_plan h;
  make_plan(&h, false);
  CHECK_STATUS(stalloc_allocator_load_plan(a, NULL), STALLOC_ERR_INVALID_ARGUMENT);
  /* Valid for its own alignment (256), not for the allocator's (512). */
  h.p.alignment = 256;
  h.iter[1].offset += 256;
  seal_plan(&h.p);
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_PLAN_MISMATCH);
  CHECK(strstr(stalloc_last_error(), "iteration entry 1") != NULL);
  /* Broken in itself: the plan's rules (plan_validate.c) refuse it. */
  make_plan(&h, false);
  h.iter[1].offset += 8;
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_BAD_FORMAT);
  make_plan(&h, false);
  h.iter[1].offset = h.p.pool_size;
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_BAD_FORMAT);
  CHECK(strstr(stalloc_last_error(), "iteration entry 1") != NULL);
  make_plan(&h, false);
  h.iter[2].cls = 99;
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_BAD_FORMAT);
  make_plan(&h, false);
  h.p.iteration = NULL;
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_BAD_FORMAT);
  CHECK_OK(stalloc_allocator_destroy(a));
  stalloc_options_init(&o);
  o.memory_limit = 4096;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  make_plan(&h, false);
  CHECK_STATUS(stalloc_allocator_load_plan(a, &h.p), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK_OK(stalloc_allocator_destroy(a));
}

/* ---- runtime-level tests over a host backend with fake stream events ---- */

typedef struct fake_event {
  bool done;
} fake_event;
static fake_event events[256];
static int event_count;

static stalloc_status_t ev_record(void* state, uint64_t stream, void** ev) {
  (void)state;
  (void)stream;
  if (event_count == 256) return STALLOC_ERR_BACKEND;
  events[event_count].done = false;
  *ev = &events[event_count++];
  return STALLOC_OK;
}
static bool ev_done(void* state, void* ev) { return ((fake_event*)ev)->done; }
static void ev_destroy(void* state, void* ev) {}

/* A host backend, with the fake events above when `events`. */
static void* host_backend(backend_ops* ops, bool events, backend_caps* caps) {
  *ops = st_backend_host;
  if (events) {
    ops->event_record = ev_record;
    ops->event_done = ev_done;
    ops->event_destroy = ev_destroy;
  }
  stalloc_options_t o;
  stalloc_options_init(&o);
  void* backend;
  CHECK_OK(ops->create(&o, &backend, caps));
  return backend;
}

static void test_streams_and_dynamic(void) {
  backend_ops ops;
  backend_caps caps;
  void* backend = host_backend(&ops, true, &caps);
  st_budget budget = {0};
  /* Iteration: A (planned 0..4096), D (dynamic in window 0: range 8192..16384), B (planned). */
  st_plan_entry iter[3] = {{4096, 0, PLAN_CLASS_PERIODIC, UINT32_MAX},
                           {3000, PLAN_NO_OFFSET, PLAN_CLASS_DYNAMIC, 0},
                           {4096, 4096, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  st_reuse_window win = {0, 3, 0, 1};
  st_reuse_range range = {8192, 8192};
  stalloc_plan p = {.pool_size = 16384, .alignment = 512, .iteration = iter, .iteration_count = 3,
                    .windows = &win, .window_count = 1, .ranges = &range, .range_count = 1};
  seal_plan(&p);
  st_runtime* rt;
  CHECK_OK(st_runtime_create(&ops, backend, &caps, &budget, NULL, 512, &p, 0, false, NULL, &rt));
  CHECK(budget.reserved == 16384);
  st_rt_outcome out;
  void *a, *d1, *d2, *d3, *b, *x;
  st_range_node *na, *nd1, *nd2, *nd3, *nb, *nx;
  CHECK_OK(st_runtime_alloc(rt, 4096, 1, &out, &a, &na));
  CHECK(out == RT_HIT);
  uint8_t* base = a;
  CHECK_OK(st_runtime_alloc(rt, 5000, 1, &out, &d1, &nd1)); /* any size at a dynamic position */
  CHECK(out == RT_DYNAMIC && (uint8_t*)d1 >= base + 8192 && (uint8_t*)d1 + 5000 <= base + 16384);
  CHECK_OK(st_runtime_alloc(rt, 4096, 1, &out, &b, &nb));
  CHECK(out == RT_HIT && b == base + 4096);
  /* Freed on stream 1 with work pending: stream 2 must not get A's bytes, stream 1 may. */
  st_runtime_free(rt, na, 1);
  CHECK_OK(st_runtime_alloc(rt, 4096, 2, &out, &x, &nx));
  CHECK(out == RT_FALLBACK);
  st_runtime_free(rt, nb, 1);
  /* The iteration wraps: cursor at position 1 (the dynamic one). Best fit: 2000 B fits in the
   * 3 KiB left beside d1 (a miss inside the window also goes to reusable space). */
  CHECK_OK(st_runtime_alloc(rt, 2000, 1, &out, &d2, &nd2));
  CHECK(out == RT_DYNAMIC && (uint8_t*)d2 >= base + 8192 + 5120);
  CHECK_OK(st_runtime_alloc(rt, 20000, 1, &out, &d3, &nd3)); /* an extra request, no room left */
  CHECK(out == RT_FALLBACK);
  events[0].done = true; /* A's stream-1 work is done; B's is not */
  CHECK_OK(st_runtime_alloc(rt, 4096, 2, &out, &x, &nx));
  CHECK(out == RT_FALLBACK); /* position 2 is B, whose event is not done */
  events[1].done = true;
  CHECK_OK(st_runtime_alloc(rt, 4096, 2, &out, &x, &nx));
  CHECK(out == RT_HIT && x == base); /* next iteration's A on stream 2, after its event */
  st_runtime_free(rt, nx, 2);
  st_runtime_free(rt, nd1, 1);
  st_runtime_free(rt, nd2, 1);
  const st_runtime_counters* c = st_runtime_counters_of(rt);
  CHECK(c->hits == 3 && c->dynamic == 2);
  st_runtime_destroy(rt);
  CHECK(budget.reserved == 0);
  ops.destroy(backend);
}

/* Each tiny request gets a slot of its size rounded up to a power of two, at least the tiny
 * alignment, aligned to the slot's size; slots never overlap. */
static void test_slab_slot_sizes(void) {
  backend_ops ops;
  backend_caps caps;
  void* backend = host_backend(&ops, false, &caps);
  const uint64_t tiny_aligns[] = {16, 64, 512};
  uint64_t reserved[3];
  for (int k = 0; k < 3; k++) {
    st_budget budget = {0};
    st_slab* slab;
    CHECK_OK(st_slab_create(&ops, backend, &caps, &budget, NULL, tiny_aligns[k], &slab));
    enum { N = 512 };
    uintptr_t start[N], end[N];
    st_slot* slots[N];
    for (int i = 0; i < N; i++) {
      uint64_t size = 1 + (uint64_t)i, slot = tiny_aligns[k];
      while (slot < size) slot *= 2;
      void* p;
      CHECK_OK(st_slab_alloc(slab, size, 0, &p, &slots[i]));
      CHECK((uintptr_t)p % slot == 0);
      start[i] = (uintptr_t)p;
      end[i] = (uintptr_t)p + size;
      memset(p, i & 0xFF, size);
    }
    for (int i = 0; i < N; i++)
      for (int j = i + 1; j < N; j++) CHECK(end[i] <= start[j] || end[j] <= start[i]);
    for (int i = 0; i < N; i++) st_slab_free(slab, slots[i], 0);
    st_slab_destroy(slab);
    CHECK(budget.reserved == 0);
    CHECK_OK(st_slab_create(&ops, backend, &caps, &budget, NULL, tiny_aligns[k], &slab));
    for (int i = 0; i < 1000; i++) {
      void* p;
      st_slot* unused;
      CHECK_OK(st_slab_alloc(slab, 4, 0, &p, &unused));
    }
    reserved[k] = budget.reserved;
    st_slab_destroy(slab);
    CHECK(budget.reserved == 0);
  }
  /* A thousand 4-byte scalars (a training step's loss and norms): 16-B slots hold a small
   * fraction of what 512-B slots hold. */
  CHECK(reserved[0] < reserved[2] / 10);
  ops.destroy(backend);
}

/* An arena at the pool's start (offset 0 is a valid place), a planned request that grew inside
 * the window served there as a miss, and an overflow that no longer fits going to the caller's
 * fallback pool; every block served from the pool is disjoint from the others. */
static void test_arena_grown_and_overflow(void) {
  backend_ops ops;
  backend_caps caps;
  void* backend = host_backend(&ops, false, &caps);
  st_budget budget = {0};
  /* Iteration: D (dynamic, window 0), A (planned at 8192), E (planned at 12288); the window's
   * reusable range is the arena [0, 8192). */
  st_plan_entry iter[3] = {{3000, PLAN_NO_OFFSET, PLAN_CLASS_DYNAMIC, 0},
                           {4096, 8192, PLAN_CLASS_PERIODIC, UINT32_MAX},
                           {4096, 12288, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  st_reuse_window win = {0, 3, 0, 1};
  st_reuse_range range = {0, 8192};
  stalloc_plan p = {.pool_size = 16384, .alignment = 512, .iteration = iter, .iteration_count = 3,
                    .windows = &win, .window_count = 1, .ranges = &range, .range_count = 1};
  seal_plan(&p);
  st_runtime* rt;
  CHECK_OK(st_runtime_create(&ops, backend, &caps, &budget, NULL, 512, &p, 0, false, NULL, &rt));
  st_rt_outcome out;
  void *d, *a, *e, *d2;
  st_range_node *nd, *na, *ne, *nd2;
  CHECK_OK(st_runtime_alloc(rt, 3000, 1, &out, &d, &nd));
  CHECK(out == RT_DYNAMIC);
  CHECK_OK(st_runtime_alloc(rt, 4096, 1, &out, &a, &na));
  CHECK(out == RT_HIT);
  uint8_t* base = (uint8_t*)a - 8192;
  CHECK((uint8_t*)d == base); /* best fit at the arena's start: offset 0 */
  CHECK_OK(st_runtime_alloc(rt, 5000, 1, &out, &e, &ne)); /* E grew: taken for E, a miss */
  CHECK(out == RT_DYNAMIC && (uint8_t*)e == base + 3072); /* in what the arena has left */
  CHECK(st_runtime_counters_of(rt)->misses == 1);
  CHECK_OK(st_runtime_alloc(rt, 9000, 1, &out, &d2, &nd2)); /* next D: the arena is full */
  CHECK(out == RT_FALLBACK);
  st_runtime_free(rt, nd, 1);
  CHECK_OK(st_runtime_alloc(rt, 4096, 1, &out, &a, &nd2)); /* A again: its bytes are held */
  CHECK(out == RT_FALLBACK);
  st_runtime_free(rt, na, 1);
  st_runtime_free(rt, ne, 1);
  const st_runtime_counters* c = st_runtime_counters_of(rt);
  CHECK(c->hits == 1 && c->dynamic == 2 && c->misses == 2);
  st_runtime_destroy(rt);
  ops.destroy(backend);
}

/* The slab's stream rule, over the same fake events. */
static void test_slab_streams(void) {
  backend_ops ops;
  backend_caps caps;
  void* backend = host_backend(&ops, true, &caps);
  st_budget budget = {0};
  st_slab* slab;
  CHECK_OK(st_slab_create(&ops, backend, &caps, &budget, NULL, 512, &slab));
  void *p, *q, *r;
  st_slot *sp, *sq, *sr;
  CHECK_OK(st_slab_alloc(slab, 100, 1, &p, &sp));
  CHECK((uintptr_t)p % 512 == 0);
  int before = event_count;
  st_slab_free(slab, sp, 1);
  CHECK(event_count == before + 1);
  CHECK_OK(st_slab_alloc(slab, 200, 2, &q, &sq));
  CHECK(q != p); /* stream 2 waits for stream 1's work */
  CHECK_OK(st_slab_alloc(slab, 300, 1, &r, &sr));
  CHECK(r == p); /* stream 1 reuses at once */
  st_slab_free(slab, sr, 1);
  events[event_count - 1].done = true;
  CHECK_OK(st_slab_alloc(slab, 64, 2, &r, &sr));
  CHECK(r == p); /* done: stream 2 may take it */
  CHECK(budget.reserved > 0 && budget.reserved <= 64 * 1024);
  st_slab_free(slab, sq, 2);
  st_slab_free(slab, sr, 2);
  st_slab_destroy(slab);
  CHECK(budget.reserved == 0);
  ops.destroy(backend);
}

/* A growable backend: the pool is one reservation, mapped once, released at the end. */
static int reserves, maps, unmaps, releases;
static stalloc_status_t fake_reserve(void* state, uint64_t size, void** base) {
  reserves++;
  return posix_memalign(base, 4096, size) ? STALLOC_ERR_OUT_OF_MEMORY : STALLOC_OK;
}
static stalloc_status_t fake_release(void* state, void* base, uint64_t size) {
  releases++;
  free(base);
  return STALLOC_OK;
}
static stalloc_status_t fake_map(void* state, void* at, uint64_t size) {
  maps++;
  return STALLOC_OK;
}
static stalloc_status_t fake_unmap(void* state, void* at, uint64_t size) {
  unmaps++;
  return STALLOC_OK;
}

static void test_growable_pool(void) {
  backend_ops ops;
  backend_caps caps;
  void* backend = host_backend(&ops, false, &caps);
  ops.reserve = fake_reserve;
  ops.release = fake_release;
  ops.map = fake_map;
  ops.unmap = fake_unmap;
  caps.can_grow = true;
  st_budget budget = {0};
  hand_plan h;
  make_plan(&h, false);
  st_runtime* rt;
  CHECK_OK(st_runtime_create(&ops, backend, &caps, &budget, NULL, 512, &h.p, 0, false, NULL, &rt));
  CHECK(reserves == 1 && maps == 1 && budget.reserved >= h.p.pool_size);
  st_rt_outcome out;
  void* p;
  st_range_node* n;
  CHECK_OK(st_runtime_alloc(rt, 4096, 0, &out, &p, &n));
  CHECK(out == RT_HIT);
  st_runtime_free(rt, n, 0);
  st_runtime_destroy(rt);
  CHECK(unmaps == 1 && releases == 1 && budget.reserved == 0);
  ops.destroy(backend);
}

int main(void) {
  RUN(test_follows_plan);
  RUN(test_perturbed);
  RUN(test_cut_iterations);
  RUN(test_broken_plan_is_safe);
  RUN(test_foreign_plan);
  RUN(test_allocs_before_plan);
  RUN(test_bad_plans);
  RUN(test_streams_and_dynamic);
  RUN(test_arena_grown_and_overflow);
  RUN(test_slab_streams);
  RUN(test_slab_slot_sizes);
  RUN(test_growable_pool);
  return 0;
}
