/* bench_hot_path.c - median nanoseconds of one alloc + free pair on the paths a training run
 * takes, beside glibc malloc/free of the same sizes in the same run.
 *
 *   planned       plan mode, each request at its planned position and size (the hot path)
 *   tiny (slab)   plan mode, requests <= 512 B that the plan leaves to the slab
 *   miss          plan mode, a size the plan does not have: resync search, then fallback pool
 *   fallback      no plan: the caching best-fit pool (what record mode and misses use)
 *   malloc/free   glibc, same size sequence
 *
 * Each row: BATCHES (default 101) batches of 4096 pairs, median of the per-pair batch averages.
 * Usage:
 *   cmake --build build --target bench_hot_path && build/bench/c/bench_hot_path [BATCHES] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "plan/planner.h"

#define N 16        /* distinct sizes, one iteration of the plan */
#define BATCH 4096
#define BATCHES_MAX 100001

static int batches = 101; /* argv[1]: more for a steadier median on a noisy machine */

static uint64_t sizes[N];

typedef void (*pair_fn)(void* ctx, int i);

static void pair_stalloc(void* ctx, int i) {
  stalloc_allocator_t* a = ctx;
  void* p;
  die(stalloc_allocator_alloc(a, (size_t)sizes[i % N], 0, 0, &p), "alloc");
  die(stalloc_allocator_free(a, p), "free");
}

static uint64_t odd_size(int i) { return sizes[i % N] + 8; }
static void pair_stalloc_miss(void* ctx, int i) {
  stalloc_allocator_t* a = ctx;
  void* p;
  die(stalloc_allocator_alloc(a, (size_t)odd_size(i), 0, 0, &p), "alloc");
  die(stalloc_allocator_free(a, p), "free");
}

static void pair_tiny(void* ctx, int i) {
  stalloc_allocator_t* a = ctx;
  void* p;
  die(stalloc_allocator_alloc(a, 8 + (size_t)(i % N) * 16, 0, 0, &p), "alloc");
  die(stalloc_allocator_free(a, p), "free");
}

static volatile uintptr_t sink;
static void pair_malloc(void* ctx, int i) {
  (void)ctx;
  void* p = malloc((size_t)sizes[i % N]);
  sink = (uintptr_t)p; /* keep the compiler from pairing them away */
  free(p);
}
static void pair_malloc_tiny(void* ctx, int i) {
  (void)ctx;
  void* p = malloc(8 + (size_t)(i % N) * 16);
  sink = (uintptr_t)p;
  free(p);
}

static pthread_mutex_t bench_lock = PTHREAD_MUTEX_INITIALIZER;
static void pair_lock(void* ctx, int i) {
  (void)ctx;
  (void)i;
  pthread_mutex_lock(&bench_lock);
  pthread_mutex_unlock(&bench_lock);
}

static double median_ns(pair_fn f, void* ctx, int* counter) {
  static double per[BATCHES_MAX];
  for (int i = 0; i < BATCH; i++) f(ctx, (*counter)++); /* warm up */
  for (int b = 0; b < batches; b++) {
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) f(ctx, (*counter)++);
    per[b] = (now_ns() - t0) / BATCH;
  }
  qsort(per, (size_t)batches, sizeof per[0], cmp_double);
  return per[batches / 2];
}

static stalloc_allocator_t* make(stalloc_backend_kind_t kind, const stalloc_plan* plan) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = kind;
  stalloc_allocator_t* a;
  die(stalloc_allocator_create(&o, &a), "create");
  if (plan) die(stalloc_allocator_load_plan(a, plan), "load_plan");
  return a;
}

/* Threads sharing one allocator: wall ns per pair over all threads (contention on the lock). */
typedef struct shared_run {
  stalloc_allocator_t* a;
  int pairs;
  pair_fn f;
} shared_run;

static void* shared_worker(void* arg) {
  shared_run* r = arg;
  for (int i = 0; i < r->pairs; i++) r->f(r->a, i);
  return NULL;
}

static double shared_ns(stalloc_allocator_t* a, pair_fn f, int threads) {
  enum { PAIRS = 200000 };
  double per[9];
  for (int rep = 0; rep < 9; rep++) {
    pthread_t t[16];
    shared_run r = {a, PAIRS / threads, f};
    double t0 = now_ns();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, shared_worker, &r);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    per[rep] = (now_ns() - t0) / (double)(r.pairs * threads);
  }
  qsort(per, 9, sizeof per[0], cmp_double);
  return per[4];
}

int main(int argc, char** argv) {
  if (argc > 1) {
    char* end;
    long b = strtol(argv[1], &end, 10);
    if (*end || b < 1 || b > BATCHES_MAX) {
      fprintf(stderr, "usage: %s [BATCHES]  (1..%d batches of %d pairs per row, default 101)\n", argv[0],
              BATCHES_MAX, BATCH);
      return 2;
    }
    batches = (int)b;
  }
  /* 4 KiB .. 60 MiB: activation-like sizes. Each request is freed before the next, so the plan
   * may put them all at offset 0; tiny entries (<= 512 B) follow in a second plan. */
  for (int i = 0; i < N; i++) sizes[i] = 4096ull << (i % 14);
  st_plan_entry iter[N], tiny[N];
  for (int i = 0; i < N; i++) {
    iter[i] = (st_plan_entry){sizes[i], 0, PLAN_CLASS_PERIODIC, UINT32_MAX};
    tiny[i] = (st_plan_entry){8 + (uint64_t)i * 16, PLAN_NO_OFFSET, PLAN_CLASS_TINY, UINT32_MAX};
  }
  uint64_t pool = 0;
  for (int i = 0; i < N; i++) pool = sizes[i] > pool ? sizes[i] : pool;
  stalloc_plan plan = {.pool_size = pool, .alignment = 512, .iteration = iter, .iteration_count = N};
  stalloc_plan tiny_plan = {.pool_size = 0, .alignment = 512, .iteration = tiny, .iteration_count = N};
  /* What the plan's rules derive from the entries: the peak and the fingerprint. */
  plan.plan_peak = pool;
  plan.fingerprint = st_plan_fingerprint(&plan);
  tiny_plan.fingerprint = st_plan_fingerprint(&tiny_plan);

  printf("%-34s %12s %12s %10s\n", "path (alloc + free pair)", "stalloc ns", "malloc ns", "ratio");
  const struct { const char* name; stalloc_backend_kind_t kind; const stalloc_plan* plan; pair_fn f, ref; } rows[] = {
      {"planned hit (virtual)", STALLOC_BACKEND_VIRTUAL, &plan, pair_stalloc, pair_malloc},
      {"planned hit (host)", STALLOC_BACKEND_HOST, &plan, pair_stalloc, pair_malloc},
      {"tiny, slab (host)", STALLOC_BACKEND_HOST, &tiny_plan, pair_tiny, pair_malloc_tiny},
      {"miss: resync search + fallback", STALLOC_BACKEND_VIRTUAL, &plan, pair_stalloc_miss, pair_malloc},
      {"fallback pool, no plan (virtual)", STALLOC_BACKEND_VIRTUAL, NULL, pair_stalloc, pair_malloc},
  };
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    stalloc_allocator_t* a = make(rows[r].kind, rows[r].plan);
    int c1 = 0, c2 = 0;
    double ours = median_ns(rows[r].f, a, &c1);
    double ref = median_ns(rows[r].ref, NULL, &c2);
    stalloc_stats_t s;
    stalloc_stats_init(&s);
    die(stalloc_allocator_stats(a, &s), "stats");
    printf("%-34s %12.1f %12.1f %10.2f   (hits %llu, fallback %llu)\n", rows[r].name, ours, ref,
           ours / ref, (unsigned long long)s.plan_hits, (unsigned long long)s.fallback_allocs);
    die(stalloc_allocator_destroy(a), "destroy");
  }
  int c = 0;
  printf("%-34s %12.1f\n", "uncontended mutex lock+unlock", median_ns(pair_lock, NULL, &c));
  /* One plan-mode allocator shared by threads: interleaved threads break the plan's order, so
   * this measures the lock and the miss path under contention, not hits. */
  printf("\n%-34s %12s\n", "threads sharing one allocator", "wall ns/pair");
  for (int threads = 1; threads <= 8; threads *= 2) {
    stalloc_allocator_t* a = make(STALLOC_BACKEND_VIRTUAL, NULL);
    printf("%-34s %12.1f\n", threads == 1 ? "fallback pool, 1 thread" : threads == 2 ? "fallback pool, 2 threads" : threads == 4 ? "fallback pool, 4 threads" : "fallback pool, 8 threads",
           shared_ns(a, pair_stalloc, threads));
    die(stalloc_allocator_destroy(a), "destroy");
  }
  return 0;
}
