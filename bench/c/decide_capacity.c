/* decide_capacity.c - does a MiniMalloc CSV instance fit in RATIO x its lower bound? One run of
 * stalloc's exact search (libstalloc/src/plan/place_search.c) per preordering, each with no node
 * limit and SECONDS of wall time: a search that ends without a placement proves that none
 * exists at that capacity (nor below it); one cut by the clock proves nothing.
 *
 *   build/bench/c/decide_capacity INSTANCE.csv RATIO [SECONDS] [PREORDERINGS]
 *
 * Used for docs/placement.md (MiniMalloc's D and J: is 1.02 x the bound reachable?). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "plan/place_search.h"

typedef struct row {
  uint64_t lo, hi, size;
} row;

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static uint32_t rank_of(const uint64_t* pts, size_t n, uint64_t v) {
  const uint64_t* p = bsearch(&v, pts, n, sizeof *pts, cmp_u64);
  return (uint32_t)(p - pts);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s INSTANCE.csv RATIO [SECONDS=60] [PREORDERINGS=%d]\n", argv[0], ST_SEARCH_HEURISTICS);
    return 2;
  }
  double ratio = atof(argv[2]), seconds = argc > 3 ? atof(argv[3]) : 60.0;
  int heuristics = argc > 4 ? atoi(argv[4]) : ST_SEARCH_HEURISTICS;
  if (!(ratio > 0) || !(seconds > 0) || heuristics < 1 || heuristics > ST_SEARCH_HEURISTICS) {
    fprintf(stderr, "%s: RATIO and SECONDS must be positive, PREORDERINGS 1..%d\n", argv[0], ST_SEARCH_HEURISTICS);
    return 2;
  }
  FILE* f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  char line[512];
  size_t n = 0, cap = 0, lineno = 1;
  row* rows = NULL;
  if (!fgets(line, sizeof line, f)) line[0] = '\0'; /* the header */
  while (fgets(line, sizeof line, f)) {
    unsigned long long id, lo, hi, size;
    lineno++;
    if (sscanf(line, "%llu,%llu,%llu,%llu", &id, &lo, &hi, &size) != 4 || hi <= lo) {
      fprintf(stderr, "%s:%zu: expected id,lower,upper,size with upper > lower\n", argv[1], lineno);
      return 1;
    }
    if (n == cap && !(rows = realloc(rows, (cap = cap ? 2 * cap : 1024) * sizeof *rows))) return 1;
    rows[n++] = (row){lo, hi, size};
  }
  fclose(f);
  /* sections: the intervals between consecutive distinct endpoints */
  uint64_t* pts = malloc(2 * n * sizeof *pts);
  uint32_t *slo = malloc(n * sizeof *slo), *shi = malloc(n * sizeof *shi);
  uint64_t *size = malloc(n * sizeof *size), *len = malloc(n * sizeof *len), *off = malloc(n * sizeof *off);
  if (!pts || !slo || !shi || !size || !len || !off) return 1;
  for (size_t i = 0; i < n; i++) {
    pts[2 * i] = rows[i].lo;
    pts[2 * i + 1] = rows[i].hi;
  }
  qsort(pts, 2 * n, sizeof *pts, cmp_u64);
  size_t np = 0;
  for (size_t i = 0; i < 2 * n; i++)
    if (!np || pts[np - 1] != pts[i]) pts[np++] = pts[i];
  uint64_t* live = calloc(np + 1, sizeof *live);
  if (!live) return 1;
  for (size_t i = 0; i < n; i++) {
    slo[i] = rank_of(pts, np, rows[i].lo);
    shi[i] = rank_of(pts, np, rows[i].hi);
    size[i] = rows[i].size;
    len[i] = rows[i].hi - rows[i].lo;
    live[slo[i]] += size[i];
    live[shi[i]] -= size[i];
  }
  uint64_t lb = 0, sum = 0;
  for (size_t t = 0; t < np; t++) {
    sum += live[t];
    if (sum > lb) lb = sum;
  }
  uint64_t capacity = (uint64_t)(ratio * (double)lb);
  st_search_input in = {(uint32_t)n, (uint32_t)np, size, slo, shi, len, 1};
  st_search* s;
  if (st_search_create(&in, &s)) {
    fprintf(stderr, "%s: %s\n", argv[0], stalloc_last_error());
    return 1;
  }
  printf("%s: %zu items, lower bound %llu, capacity %llu (%.4f x), %.0f s per preordering\n", argv[1], n,
         (unsigned long long)lb, (unsigned long long)capacity, (double)capacity / (double)lb, seconds);
  printf("preordering  outcome                      seconds     backtracks\n");
  static const char* what[] = {"fits", "proven not to fit", "node limit", "stopped by the clock", "no memory"};
  int proven = 0;
  for (int h = 0; h < heuristics && !proven; h++) {
    uint64_t backtracks = 0;
    double t0 = st_now();
    st_search_outcome r = st_search_run(s, capacity, h, UINT64_MAX, t0 + seconds, NULL, NULL, off, &backtracks);
    printf("%11d  %-27s %8.1f %14llu\n", h, what[r], st_now() - t0, (unsigned long long)backtracks);
    proven = r == ST_SEARCH_FOUND || r == ST_SEARCH_NONE;
  }
  st_search_destroy(s);
  return 0;
}
