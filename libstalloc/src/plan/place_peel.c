/* place_peel.c - peeling for large partitions (place_peel.h).
 *
 * A whole training run is one partition: the weights, gradients and optimizer state live from
 * their allocation to the end and chain every step together, so neither the exact search nor
 * the partitioning can cut it. Let L be the items that live to the partition's end. Stacked
 * from offset 0 in order of allocation, L occupies exactly [0, live L bytes) at every time:
 * no waste. Without L, the other items R fall apart into independent groups (a step, a
 * micro-batch). Each group P lies above the L items that overlap it in time, whose tops are
 * at most c_P; so P is solved as its own problem on a floor c_P. A few long-lived items that
 * do not live to the end (an input batch kept from one step into the next) can still chain the
 * steps: with min_len, items at least that long join L too (first-fit among L, which may leave
 * gaps there). The floor enters the sub-problem as one extra item of size c_P spanning exactly
 * P's time span: an item that spans its group can always be moved to the bottom without
 * raising the peak (everything below it moves up by its size), so the sub-problem's optimum
 * is that of P on the floor, and its peak is what the group adds to the whole. All groups
 * together go to st_place, which partitions them, places them and spends the time limit on
 * the group that sets the peak. Where no L item starts inside a group, c_P is the L bytes live
 * there, and a group placed at its bound puts the whole at the lower bound. */
#include "plan/place_peel.h"

#include <stdlib.h>
#include <string.h>

#include "plan/place.h"

typedef struct by_lo {
  uint32_t lo;
  uint32_t i;
} by_lo;

static int cmp_by_lo(const void* a, const void* b) {
  const by_lo *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* In L: lives to the end, or (min_len > 0) at least min_len time points. */
static bool is_long(uint32_t lo, uint32_t hi, uint32_t end, uint32_t min_len) {
  return hi == end || (min_len && hi - lo >= min_len);
}

bool st_place_peel(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                   uint32_t min_len, uint64_t alignment, double time_limit,
                   const volatile int* cancel, uint64_t* off, uint64_t* peak) {
  if (m < 2) return false;
  uint32_t end = 0;
  for (size_t i = 0; i < m; i++) end = ST_MAX(end, hi[i]);
  by_lo* ord = malloc(m * sizeof *ord);
  uint32_t* lidx = malloc(m * sizeof(uint32_t)); /* the L items */
  size_t* group_of = malloc(m * sizeof(size_t));
  st_place_item* sub = malloc(2 * m * sizeof *sub);
  uint64_t* sub_off = malloc(2 * m * sizeof(uint64_t));
  size_t* floor_at = malloc(m * sizeof(size_t)); /* per group: its floor entry in sub */
  uint32_t* lset = NULL;
  bool ok = false;
  if (!ord || !lidx || !group_of || !sub || !sub_off || !floor_at) goto out;
  for (size_t i = 0; i < m; i++) ord[i] = (by_lo){lo[i], (uint32_t)i};
  st_sort(ord, m, sizeof *ord, cmp_by_lo);

  /* L, first-fit in order of allocation against the L items placed before that overlap in
   * time (when L is only what lives to the end, that is a stack with no gap). */
  size_t nl = 0;
  uint64_t ltop = 0;
  lset = malloc(m * sizeof(uint32_t)); /* L items, by offset */
  if (!lset) goto out;
  for (size_t k = 0; k < m; k++) {
    uint32_t i = ord[k].i;
    if (!is_long(lo[i], hi[i], end, min_len)) continue;
    /* Sizes near 2^64 (fuzzed input): a top that does not fit in 64 bits ends the try (the
     * caller keeps its placement) rather than wrapping to a small, "better" peak. */
    uint64_t cand = 0, top;
    if (__builtin_add_overflow(cand, size[i], &top)) goto out;
    for (size_t q = 0; q < nl; q++) {
      uint32_t j = lset[q];
      if (!(lo[j] < hi[i] && lo[i] < hi[j])) continue;
      if (off[j] >= top) break;
      cand = ST_MAX(cand, off[j] + size[j]); /* an L item's top: checked when it was placed */
      if (__builtin_add_overflow(cand, size[i], &top)) goto out;
    }
    off[i] = cand;
    ltop = ST_MAX(ltop, top);
    size_t at = nl;
    while (at > 0 && off[lset[at - 1]] > cand) at--;
    memmove(lset + at + 1, lset + at, (nl - at) * sizeof(uint32_t));
    lset[at] = i;
    lidx[nl++] = i;
  }
  free(lset);
  lset = NULL;
  if (nl == 0 || nl == m) goto out;
  /* Groups of R: split wherever no R lifetime crosses a time point. */
  size_t ns = 0, ngroups = 0, gstart = 0;
  uint32_t gmax = 0, glo = 0;
  for (size_t k = 0; k <= m; k++) {
    bool is_r = k < m && !is_long(lo[ord[k].i], hi[ord[k].i], end, min_len);
    if (k < m && !is_r) continue;
    if (ns > gstart && (k == m || lo[ord[k].i] >= gmax)) {
      /* close group [gstart, ns): its floor spans [glo, gmax) */
      uint64_t c = 0; /* the highest top of an L item overlapping the group's span */
      for (size_t q = 0; q < nl; q++) {
        uint32_t j = lidx[q];
        if (lo[j] < gmax && glo < hi[j]) c = ST_MAX(c, off[j] + size[j]);
      }
      floor_at[ngroups++] = ns;
      sub[ns++] = (st_place_item){glo, gmax, c, PLACE_FREE};
      gstart = ns;
    }
    if (k == m) break;
    uint32_t i = ord[k].i;
    if (ns == gstart) {
      glo = lo[i];
      gmax = 0;
    }
    group_of[i] = ns;
    sub[ns++] = (st_place_item){lo[i], hi[i], size[i], PLACE_FREE};
    gmax = ST_MAX(gmax, hi[i]);
  }
  if (ngroups < 2) goto out; /* nothing came apart: the caller's placement stands */

  st_place_params pp = {alignment, time_limit, cancel};
  st_place_result res;
  if (st_place(sub, ns, &pp, sub_off, &res) != STALLOC_OK) goto out;

  /* Each group's floor item goes to the bottom of its group: what was under it moves up by
   * its size (nothing of the group overlaps it, since it spans the group's time). */
  uint64_t pk = ltop;
  for (size_t g = 0, b = 0; g < ngroups; b = floor_at[g] + 1, g++) {
    size_t e = floor_at[g];
    uint64_t d = sub_off[e], c = sub[e].size;
    for (size_t k = b; k < e; k++) {
      uint64_t o = sub_off[k], t;
      if ((o < d && __builtin_add_overflow(o, c, &o)) || __builtin_add_overflow(o, sub[k].size, &t))
        goto out;
      sub_off[k] = o;
      pk = ST_MAX(pk, t);
    }
  }
  for (size_t i = 0; i < m; i++)
    if (!is_long(lo[i], hi[i], end, min_len)) off[i] = sub_off[group_of[i]];
  *peak = pk;
  ok = true;
out:
  free(lset);
  free(ord);
  free(lidx);
  free(group_of);
  free(sub);
  free(sub_off);
  free(floor_at);
  return ok;
}
