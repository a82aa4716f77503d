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
 * there, and a group placed at its bound puts the whole at the lower bound. Where one does
 * (optimizer state made after the warm-up's peak) and the floor is well over what the group and
 * its L items have live at once, the group goes around those L items instead, fixed at their
 * offsets (close_group). */
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

/* In L: lives to the end, or (min_len > 0) at least min_len time points, or (cuts != NULL)
 * crosses a thin cut: cuts[t] counts the cut points in [1, t], and [lo, hi) crosses the points
 * lo < t < hi. */
static bool is_long(uint32_t lo, uint32_t hi, uint32_t end, uint32_t min_len, const uint32_t* cuts) {
  return hi == end || (min_len && hi - lo >= min_len) || (cuts && hi - lo >= 2 && cuts[hi - 1] > cuts[lo]);
}

/* Thin cuts: the time points t that fewer than cut_bytes (and more than 0) bytes of the items
 * not living to the end cross (lo < t < hi): between two training steps, where only a loss
 * scalar or a step counter lives on. Returns the running count of cut points (end + 1 entries),
 * NULL without memory. */
static uint32_t* thin_cuts(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                           uint32_t end, uint64_t cut_bytes) {
  uint64_t* x = calloc((size_t)end + 2, sizeof *x);
  uint32_t* cuts = malloc(((size_t)end + 1) * sizeof *cuts);
  if (!x || !cuts) {
    free(x);
    free(cuts);
    return NULL;
  }
  /* wrapping sums are fine: every added size is subtracted again further on */
  for (size_t i = 0; i < m; i++) {
    if (hi[i] == end || hi[i] - lo[i] < 2) continue;
    x[lo[i] + 1] += size[i];
    x[hi[i]] -= size[i];
  }
  uint64_t crossing = 0;
  cuts[0] = 0;
  for (uint32_t t = 1; t <= end; t++) {
    crossing += x[t];
    cuts[t] = cuts[t - 1] + (t < end && crossing > 0 && crossing <= cut_bytes);
  }
  free(x);
  return cuts;
}

/* The most bytes live at once among the sub-problem's items (wrapping sums are harmless:
 * the bound only decides whether a try is worth making). */
static uint64_t sub_bound(const st_place_item* it, size_t n, uint32_t end) {
  uint64_t* x = calloc((size_t)end + 1, sizeof *x);
  if (!x) return 0;
  for (size_t i = 0; i < n; i++) {
    x[it[i].lower] += it[i].size;
    x[it[i].upper] -= it[i].size;
  }
  uint64_t live = 0, most = 0;
  for (uint32_t t = 0; t < end; t++) {
    live += x[t];
    most = ST_MAX(most, live);
  }
  free(x);
  return most;
}

/* One split: L placed (off[] of its items), the groups of R as one sub-problem (each group's
 * items, then its floor entry or its L items; close_group). */
typedef struct split {
  uint32_t end;
  uint32_t* cuts;     /* thin cuts' running count, or NULL */
  uint32_t min_len;
  size_t* group_of;   /* item -> its entry in sub */
  st_place_item* sub;
  size_t sub_cap;
  size_t* r_end;      /* per group: the end of its items' entries (its first entry is the end of
                         the group before's); then its floor entry, or its L items, fixed */
  size_t* g_end;      /* per group: the end of all its entries */
  size_t ns, ngroups, largest; /* sub entries, groups, items in the largest group */
  uint64_t ltop, bound;        /* L's top; the most the split can reach */
  uint64_t floors;             /* the most the groups placed around their L items reach on
                                  floors instead (0: none is) */
} split;

static void split_free(split* sp) {
  free(sp->cuts);
  free(sp->group_of);
  free(sp->sub);
  free(sp->r_end);
  free(sp->g_end);
}

/* Appends an entry to sp->sub; false without memory. */
static bool push_sub(split* sp, st_place_item x) {
  if (sp->ns == sp->sub_cap) {
    size_t cap = sp->sub_cap * 2;
    st_place_item* grown = realloc(sp->sub, cap * sizeof *grown);
    if (!grown) return false;
    sp->sub = grown;
    sp->sub_cap = cap;
  }
  sp->sub[sp->ns++] = x;
  return true;
}

/* Group [gstart, sp->ns) over [glo, ghi): *own, the most bytes its items have live at once,
 * and *around, the most bytes they and the L items live with them have live at once (what the
 * group around its L items can reach at best). false without memory (wrapping sums are
 * harmless, as in sub_bound). */
static bool group_bounds(const split* sp, size_t gstart, uint32_t glo, uint32_t ghi, const uint32_t* lo,
                         const uint32_t* hi, const uint64_t* size, const uint32_t* lidx, size_t nl,
                         uint64_t* own, uint64_t* around) {
  size_t span = (size_t)(ghi - glo);
  uint64_t* r = calloc(span + 1, sizeof *r);
  uint64_t* l = calloc(span + 1, sizeof *l);
  if (!r || !l) {
    free(r);
    free(l);
    return false;
  }
  for (size_t i = gstart; i < sp->ns; i++) {
    r[sp->sub[i].lower - glo] += sp->sub[i].size;
    r[sp->sub[i].upper - glo] -= sp->sub[i].size;
  }
  for (size_t q = 0; q < nl; q++) {
    uint32_t j = lidx[q];
    if (!(lo[j] < ghi && glo < hi[j])) continue;
    l[ST_MAX(lo[j], glo) - glo] += size[j];
    l[ST_MIN(hi[j], ghi) - glo] -= size[j];
  }
  uint64_t rs = 0, ls = 0;
  *own = *around = 0;
  for (size_t t = 0; t < span; t++) {
    rs += r[t];
    ls += l[t];
    *own = ST_MAX(*own, rs);
    *around = ST_MAX(*around, rs + ls);
  }
  free(r);
  free(l);
  return true;
}

/* Closes group g, whose items are sub[gstart, sp->ns) and whose span is [glo, ghi): on a floor,
 * the highest top of the L items live in the span, as one entry spanning it. But where an L
 * item starts inside the span (the optimizer state a first training step makes), the floor
 * counts it over the whole span, also where the group's peak comes before it is made (a
 * held-out T5 run with dynamic padding: its warm-up's longest batch, before AdamW made 40 MB of
 * state; every split 3.7% over the lower bound `lb`): where placing the group around its L
 * items instead (clipped to its span and fixed at their offsets) lowers what the split can
 * reach by more than lb / 1024, it takes them. Only there: fixed items keep a group from being
 * peeled again, their search is slower, and the L items' offsets can hold a group above a bound
 * that its floor, a few hundred bytes higher, lets it reach (held-out T5 steps, each 832 bytes
 * over on its floor: 1.0002 -> 1.011 around their L items). lb UINT64_MAX: every group on its
 * floor. */
static bool close_group(split* sp, const uint32_t* lo, const uint32_t* hi, const uint64_t* size,
                        const uint64_t* off, const uint32_t* lidx, size_t nl, size_t gstart,
                        uint32_t glo, uint32_t ghi, uint64_t lb) {
  uint64_t c = 0;
  bool inside = false;
  for (size_t q = 0; q < nl; q++) {
    uint32_t j = lidx[q];
    if (lo[j] < ghi && glo < hi[j]) {
      c = ST_MAX(c, off[j] + size[j]);
      inside = inside || lo[j] > glo;
    }
  }
  uint64_t own = 0, around = 0, floored = 0;
  inside = inside && lb != UINT64_MAX && group_bounds(sp, gstart, glo, ghi, lo, hi, size, lidx, nl, &own, &around) &&
           !__builtin_add_overflow(c, own, &floored) && floored > ST_MAX(around, lb) &&
           floored - ST_MAX(around, lb) > lb / 1024;
  if (inside) sp->floors = ST_MAX(sp->floors, floored);
  size_t g = sp->ngroups++;
  sp->largest = ST_MAX(sp->largest, sp->ns - gstart);
  sp->r_end[g] = sp->ns;
  if (!inside) {
    if (!push_sub(sp, (st_place_item){glo, ghi, c, PLACE_FREE})) return false;
  } else {
    for (size_t q = 0; q < nl; q++) {
      uint32_t j = lidx[q];
      if (lo[j] < ghi && glo < hi[j] &&
          !push_sub(sp, (st_place_item){ST_MAX(lo[j], glo), ST_MIN(hi[j], ghi), size[j], off[j]}))
        return false;
    }
  }
  sp->g_end[g] = sp->ns;
  return true;
}

/* Places L in off[] and builds the groups; false without memory, when nothing comes apart
 * (the caller's placement stands) or when a top does not fit in 64 bits. */
static bool make_split(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                       uint32_t min_len, uint64_t cut_bytes, uint64_t* off, split* sp) {
  memset(sp, 0, sizeof *sp);
  if (m < 2) return false;
  for (size_t i = 0; i < m; i++) sp->end = ST_MAX(sp->end, hi[i]);
  uint32_t end = sp->end;
  sp->min_len = min_len;
  if (cut_bytes && (!(sp->cuts = thin_cuts(lo, hi, size, m, end, cut_bytes)) || sp->cuts[end] == 0))
    return false; /* no memory, or nothing to cut */
  const uint32_t* cuts = sp->cuts;
  by_lo* ord = malloc(m * sizeof *ord);
  uint32_t* lidx = malloc(m * sizeof(uint32_t)); /* the L items */
  uint32_t* lset = malloc(m * sizeof(uint32_t)); /* L items, by offset */
  sp->group_of = malloc(m * sizeof(size_t));
  sp->sub_cap = 2 * m;
  sp->sub = malloc(sp->sub_cap * sizeof *sp->sub);
  sp->r_end = malloc(m * sizeof(size_t));
  sp->g_end = malloc(m * sizeof(size_t));
  bool ok = false;
  if (!ord || !lidx || !lset || !sp->group_of || !sp->sub || !sp->r_end || !sp->g_end) goto out;
  for (size_t i = 0; i < m; i++) ord[i] = (by_lo){lo[i], (uint32_t)i};
  st_sort(ord, m, sizeof *ord, cmp_by_lo);

  /* L, first-fit in order of allocation against the L items placed before that overlap in
   * time (when L is only what lives to the end, that is a stack with no gap). */
  size_t nl = 0;
  for (size_t k = 0; k < m; k++) {
    uint32_t i = ord[k].i;
    if (!is_long(lo[i], hi[i], end, min_len, cuts)) continue;
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
    sp->ltop = ST_MAX(sp->ltop, top);
    size_t at = nl;
    while (at > 0 && off[lset[at - 1]] > cand) at--;
    memmove(lset + at + 1, lset + at, (nl - at) * sizeof(uint32_t));
    lset[at] = i;
    lidx[nl++] = i;
  }
  if (nl == 0 || nl == m) goto out;
  /* The partition's lower bound, for close_group (sub[] as scratch: the groups overwrite it);
   * without memory for it, every group on its floor. */
  for (size_t i = 0; i < m; i++) sp->sub[i] = (st_place_item){lo[i], hi[i], size[i], PLACE_FREE};
  uint64_t lb = sub_bound(sp->sub, m, end);
  if (!lb) lb = UINT64_MAX;
  /* Groups of R: split wherever no R lifetime crosses a time point. */
  size_t gstart = 0;
  uint32_t gmax = 0, glo = 0;
  for (size_t k = 0; k <= m; k++) {
    bool is_r = k < m && !is_long(lo[ord[k].i], hi[ord[k].i], end, min_len, cuts);
    if (k < m && !is_r) continue;
    if (sp->ns > gstart && (k == m || lo[ord[k].i] >= gmax)) {
      if (!close_group(sp, lo, hi, size, off, lidx, nl, gstart, glo, gmax, lb)) goto out;
      gstart = sp->ns;
    }
    if (k == m) break;
    uint32_t i = ord[k].i;
    if (sp->ns == gstart) {
      glo = lo[i];
      gmax = 0;
    }
    sp->group_of[i] = sp->ns;
    if (!push_sub(sp, (st_place_item){lo[i], hi[i], size[i], PLACE_FREE})) goto out;
    gmax = ST_MAX(gmax, hi[i]);
  }
  /* The most this split can reach: L's top, or a group's bytes live at once on its floor. */
  sp->bound = ST_MAX(sp->ltop, sub_bound(sp->sub, sp->ns, end));
  ok = sp->ngroups >= 2; /* else nothing came apart */
out:
  free(ord);
  free(lidx);
  free(lset);
  if (!ok) split_free(sp);
  return ok;
}

bool st_place_peel_probe(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                         uint32_t min_len, uint64_t cut_bytes, st_peel_probe* probe) {
  uint64_t* off = malloc((m ? m : 1) * sizeof(uint64_t));
  split sp;
  bool ok = off && make_split(lo, hi, size, m, min_len, cut_bytes, off, &sp);
  free(off);
  if (!ok) return false;
  *probe = (st_peel_probe){sp.bound, ST_MAX(sp.bound, sp.floors), sp.ngroups, sp.largest};
  split_free(&sp);
  return true;
}

bool st_place_peel(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                   uint32_t min_len, uint64_t cut_bytes, uint64_t beat, uint64_t alignment,
                   double time_limit, const volatile int* cancel, uint64_t* off, uint64_t* peak) {
  split sp;
  if (!make_split(lo, hi, size, m, min_len, cut_bytes, off, &sp)) return false;
  bool ok = false;
  uint64_t* sub_off = malloc(sp.ns * sizeof(uint64_t));
  if (!sub_off || sp.bound >= beat) goto out; /* a split that cannot beat `beat` is not tried */
  st_place_params pp = {alignment, time_limit, cancel, false};
  st_place_result res;
  if (st_place(sp.sub, sp.ns, &pp, sub_off, &res) != STALLOC_OK) goto out;

  /* Each group's floor item goes to the bottom of its group: what was under it moves up by
   * its size (nothing of the group overlaps it, since it spans the group's time). A group
   * around its L items, fixed, is placed where it lies. */
  uint64_t pk = sp.ltop;
  for (size_t g = 0, b = 0; g < sp.ngroups; b = sp.g_end[g], g++) {
    size_t e = sp.r_end[g];
    bool floored = sp.sub[e].fixed_offset == PLACE_FREE; /* one entry past the items: the floor */
    uint64_t d = floored ? sub_off[e] : 0, c = floored ? sp.sub[e].size : 0;
    for (size_t k = b; k < e; k++) {
      uint64_t o = sub_off[k], t;
      if ((o < d && __builtin_add_overflow(o, c, &o)) || __builtin_add_overflow(o, sp.sub[k].size, &t))
        goto out;
      sub_off[k] = o;
      pk = ST_MAX(pk, t);
    }
  }
  for (size_t i = 0; i < m; i++)
    if (!is_long(lo[i], hi[i], sp.end, sp.min_len, sp.cuts)) off[i] = sub_off[sp.group_of[i]];
  *peak = pk;
  ok = true;
out:
  free(sub_off);
  split_free(&sp);
  return ok;
}
