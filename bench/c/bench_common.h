/* bench_common.h - what the C benchmarks share: a monotonic clock, a sort key for medians, a
 * seeded pseudo-random stream, and an exit on any stalloc error (a benchmark that failed has no
 * figure to print). */
#ifndef STALLOC_BENCH_COMMON_H
#define STALLOC_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stalloc/stalloc.h"

static inline double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

/* xorshift64: the same draws on every machine, from BENCH_SEED on (each benchmark its own). */
#define BENCH_SEED 88172645463325252ull
static uint64_t bench_rng = BENCH_SEED;

static inline uint64_t bench_next(void) {
  bench_rng ^= bench_rng << 13;
  bench_rng ^= bench_rng >> 7;
  bench_rng ^= bench_rng << 17;
  return bench_rng;
}

static inline int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static inline void die(stalloc_status_t s, const char* what) {
  if (s == STALLOC_OK) return;
  fprintf(stderr, "%s: %s (%s)\n", what, stalloc_status_string(s), stalloc_last_error());
  exit(1);
}

#endif
