/* bench_pool.c - median nanoseconds of one free + alloc pair in the growable pool (no plan: what
 * a run's first steps and a run whose plans are declined take), with 3000 blocks live at once,
 * freed and replaced at random, on the virtual backend (addresses only: what is timed is the
 * pool's own work, its free-block treaps and granule tables).
 *
 *   small share   the share of requests of 64 B - 256 KiB (log-uniform; the others 256 KiB -
 *                 64 MiB)
 *   online        the online lifecycle started (recording, layout hints on: the default path of
 *                 torch_backend.enable()), no step markers
 *
 * Each row: 31 batches of 20000 pairs, median of the per-pair batch averages. Usage:
 *   cmake --build build --target bench_pool && build/bench/c/bench_pool */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_common.h"

#define LIVE 3000
#define BATCH 20000
#define BATCHES 31

static double uniform(void) { return (double)(bench_next() >> 11) * (1.0 / 9007199254740992.0); }

static size_t draw(double small_share) {
  bool small = uniform() < small_share;
  double lo = small ? 6 : 18, hi = small ? 18 : 26;
  return (size_t)pow(2.0, lo + (hi - lo) * uniform());
}

static void row(double small_share, bool online) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  stalloc_allocator_t* a;
  die(stalloc_allocator_create(&o, &a), "create");
  if (online) {
    stalloc_online_params_t p;
    stalloc_online_params_init(&p);
    die(stalloc_allocator_online_start(a, &p), "online_start");
  }
  static void* live[LIVE];
  bench_rng = BENCH_SEED;
  for (int i = 0; i < LIVE; i++) die(stalloc_allocator_alloc(a, draw(small_share), 0, 0, &live[i]), "alloc");
  double t[BATCHES];
  for (int b = 0; b < BATCHES; b++) {
    double t0 = now_ns();
    for (int k = 0; k < BATCH; k++) {
      int i = (int)(bench_next() % LIVE);
      die(stalloc_allocator_free(a, live[i]), "free");
      die(stalloc_allocator_alloc(a, draw(small_share), 0, 0, &live[i]), "alloc");
    }
    t[b] = (now_ns() - t0) / BATCH;
  }
  qsort(t, BATCHES, sizeof *t, cmp_double);
  stalloc_stats_t s;
  stalloc_stats_init(&s);
  die(stalloc_allocator_stats(a, &s), "stats");
  printf("%11.0f%%  %-6s  %9.0f  %12.1f  %13.1f\n", 100 * small_share, online ? "yes" : "no", t[BATCHES / 2],
         (double)s.reserved_bytes / 1048576.0, (double)s.allocated_bytes / 1048576.0);
  for (int i = 0; i < LIVE; i++) die(stalloc_allocator_free(a, live[i]), "free");
  stalloc_allocator_destroy(a);
}

int main(void) {
  printf("growable pool, %d blocks live, free + alloc pairs (median of %d batches of %d)\n", LIVE, BATCHES, BATCH);
  printf("small share  online  ns/pair  reserved MiB  allocated MiB\n");
  const double shares[] = {0.0, 0.5, 1.0};
  for (int on = 0; on < 2; on++)
    for (int i = 0; i < 3; i++) row(shares[i], on);
  return 0;
}
