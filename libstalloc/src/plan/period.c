/* period.c - iteration detection: where the steady state begins and how many allocs one
 * iteration has. Step markers are used when the trace has them; otherwise the alloc-size
 * sequence is searched for the period that covers the longest suffix. Dense training repeats
 * sizes exactly, found in linear time with a Z-function over the reversed sequence; MoE steps
 * repeat in count and position but not every size, found by a tolerant search that allows
 * mismatches at a minority of positions. */
#include <stdlib.h>
#include <string.h>

#include "plan/period.h"

/* A window of a steady state may differ from its neighbour at fewer than this share of
 * positions (MoE expert inputs follow the routing; everything else repeats). */
#define MISMATCH_NUM 1
#define MISMATCH_DEN 3

static bool few_mismatches(const uint64_t* a, const uint64_t* b, size_t len) {
  size_t bad = 0, limit = len * MISMATCH_NUM / MISMATCH_DEN;
  for (size_t i = 0; i < len; i++)
    if (a[i] != b[i] && ++bad > limit) return false;
  return true;
}

/* Step markers: allocs are grouped by the number of markers before them; the steady state is
 * the longest run of trailing groups with the last group's count and few size mismatches (any
 * number, when sizes are tolerated). */
static bool from_markers(const stalloc_trace_t* t, const uint64_t* sizes, size_t n,
                         bool tolerate_sizes, st_period* out) {
  if (t->steps == 0 || n == 0) return false;
  size_t groups = (size_t)t->steps + 1;
  size_t* first = calloc(groups + 1, sizeof *first);
  if (!first) return false;
  /* requests are in alloc order and their step numbers never decrease */
  for (size_t g = 0, i = 0; g <= groups; g++) {
    while (i < n && t->requests[i].step < g) i++;
    first[g] = i;
  }
  bool found = false;
  /* the last group may be a step cut short: then the group before it, if that one starts a
   * longer run, is the reference */
  for (size_t back = 1; back <= 2 && back <= groups; back++) {
    size_t ref = groups - back;
    size_t len = first[ref + 1] - first[ref];
    if (len == 0) continue;
    size_t g = ref;
    while (g > 0 && first[g] - first[g - 1] == len &&
           (tolerate_sizes || few_mismatches(sizes + first[g - 1], sizes + first[ref], len)))
      g--;
    size_t count = ref - g + 1;
    if (found && count < 2) break; /* keep the last group's answer */
    out->start = first[g];
    out->period = len;
    out->iterations = count;
    out->from_markers = true;
    found = true;
    if (count >= 2) break;
  }
  free(first);
  return found;
}

/* z[i] = length of the longest common prefix of r and r + i (z[0] = len). */
static void z_function(const uint64_t* r, size_t len, uint32_t* z) {
  if (!len) return;
  z[0] = (uint32_t)len;
  size_t l = 0, rr = 0;
  for (size_t i = 1; i < len; i++) {
    size_t k = 0;
    if (i < rr) k = ST_MIN(rr - i, (size_t)z[i - l]);
    while (i + k < len && r[k] == r[i + k]) k++;
    z[i] = (uint32_t)k;
    if (i + k > rr) l = i, rr = i + k;
  }
}

/* How far back from the end windows of `p` keep matching their successor (few mismatches). */
static size_t tolerant_coverage(const uint64_t* s, size_t n, size_t p) {
  size_t cover = p; /* the last window */
  while (cover + p <= n && few_mismatches(s + n - cover - p, s + n - cover, p)) cover += p;
  return cover;
}

static bool from_sizes(const uint64_t* s, size_t n, st_period* out) {
  if (n < 2) return false;
  size_t best_p = 0, best_cover = 0;
  /* exact: a suffix with period p has length z[p] + p over the reversed sequence */
  uint64_t* r = malloc(n * sizeof *r);
  uint32_t* z = malloc(n * sizeof *z);
  if (!r || !z) {
    free(r);
    free(z);
    return false;
  }
  for (size_t i = 0; i < n; i++) r[i] = s[n - 1 - i];
  z_function(r, n, z);
  for (size_t p = 1; p <= n / 2; p++) {
    size_t cover = (size_t)z[p] + p;
    if (z[p] >= p && cover > best_cover) best_cover = cover, best_p = p;
  }
  free(r);
  free(z);
  /* tolerant, when exact repetition covers less than half the trace: a few probes of the last
   * two windows reject most candidate periods at once; survivors get a full coverage count */
  if (best_cover * 2 < n) {
    size_t tried = 0;
    for (size_t p = 2; p <= n / 2 && tried < 64; p++) {
      size_t probes = ST_MIN(p, (size_t)64), bad = 0;
      for (size_t k = 0; k < probes && bad * MISMATCH_DEN <= probes * MISMATCH_NUM; k++) {
        size_t i = n - 2 * p + k * p / probes;
        bad += s[i] != s[i + p];
      }
      if (bad * MISMATCH_DEN > probes * MISMATCH_NUM) continue;
      tried++;
      size_t cover = tolerant_coverage(s, n, p);
      if (cover >= 2 * p && cover > best_cover) best_cover = cover, best_p = p;
    }
  }
  if (!best_p) return false;
  out->period = best_p;
  out->start = n - best_cover;
  out->iterations = best_cover / best_p;
  out->from_markers = false;
  return true;
}

void st_period_find(const stalloc_trace_t* trace, const uint64_t* sizes, size_t n,
                    bool use_markers, bool tolerate_sizes, st_period* out) {
  memset(out, 0, sizeof *out);
  out->start = n;
  if (use_markers && from_markers(trace, sizes, n, tolerate_sizes, out)) return;
  if (!from_sizes(sizes, n, out)) {
    out->start = n;
    out->period = 0;
    out->iterations = 0;
  }
}
