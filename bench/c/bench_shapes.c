/* bench_shapes.c - median microseconds the shape rules take to learn from a kind's first step
 * (runtime/shapes.c, st_shapes_learn), which runs at a step boundary under the allocator's
 * lock. A first step that teaches nothing from the step before searches itself for
 * micro-batches that repeat one another (learn_within); this times that search on three kinds
 * of step:
 *
 *   micro-batches  two micro-batches' input ids first, then the first micro-batch's requests
 *                  and the second's, each scaled by its own length, then the optimizer's (the
 *                  search finds them)
 *   no structure   sizes drawn at random (a training step without accumulation: nothing found)
 *   halves         the first half of the step one size and the second half twice it: most
 *                  shifts pass the search's first probe and are weighed in full, up to its
 *                  bound of 256 (and the step is taken for two micro-batches)
 *
 * Each row: 31 runs, each a fresh set of rules and one first step. Usage:
 *   cmake --build build --target bench_shapes && build/bench/c/bench_shapes */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "runtime/shapes.h"

#define RUNS 31

static void micro_batches(uint64_t* w, size_t n) {
  const uint64_t first = 384, second = 448; /* the two micro-batches' lengths, in tokens */
  w[0] = first * 8;
  w[1] = second * 8;
  size_t d = (n - 2) * 3 / 8; /* each micro-batch's stretch; the rest is the optimizer's */
  for (size_t j = 0; j < d; j++) {
    uint64_t base = 512 * (1 + bench_next() % 64);
    bool scales = bench_next() % 4 != 0; /* activations scale, a weight's gradient does not */
    w[2 + j] = scales ? base * first : base;
    w[2 + d + j] = scales ? base * second : base;
  }
  for (size_t j = 2 + 2 * d; j < n; j++) w[j] = 512 * (1 + bench_next() % 4096);
}

static void no_structure(uint64_t* w, size_t n) {
  for (size_t j = 0; j < n; j++) w[j] = 512 * (1 + bench_next() % 4096);
}

static void halves(uint64_t* w, size_t n) {
  for (size_t j = 0; j < n; j++) w[j] = j < n / 2 ? 4096 : 8192;
  w[0] = 4096;
  w[1] = 8192;
}

static double median_us(void (*make)(uint64_t*, size_t), size_t n, bool* learned) {
  uint64_t* w = malloc(n * sizeof *w);
  if (!w) die(STALLOC_ERR_OUT_OF_MEMORY, "malloc");
  double t[RUNS];
  for (int r = 0; r < RUNS; r++) {
    make(w, n);
    st_shapes* s = st_shapes_create();
    if (!s) die(STALLOC_ERR_OUT_OF_MEMORY, "st_shapes_create");
    double t0 = now_ns();
    st_shapes_learn(s, w, n);
    t[r] = (now_ns() - t0) / 1e3;
    *learned = st_shapes_key_position(s, n) != ST_SHAPE_NONE;
    st_shapes_destroy(s);
  }
  free(w);
  qsort(t, RUNS, sizeof *t, cmp_double);
  return t[RUNS / 2];
}

int main(void) {
  struct {
    const char* name;
    void (*make)(uint64_t*, size_t);
  } kinds[] = {{"micro-batches", micro_batches}, {"no structure", no_structure}, {"halves", halves}};
  const size_t sizes[] = {1024, 4096, 16384, 65536};
  printf("%-14s %8s %12s %8s\n", "step", "allocs", "median us", "learned");
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      bool learned = false;
      double us = median_us(kinds[k].make, sizes[i], &learned);
      printf("%-14s %8zu %12.1f %8s\n", kinds[k].name, sizes[i], us, learned ? "yes" : "no");
    }
  return 0;
}
