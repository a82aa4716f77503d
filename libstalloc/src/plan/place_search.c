/* place_search.c - branch-and-bound over canonical placements (see place_search.h).
 *
 * Canonical form: take any valid placement and let every item fall as low as it can; sorted
 * by offset, each item then sits at 0 or on top of an overlapping item placed before it. So
 * the search only ever places an unplaced item at its "minimum offset" (the highest top
 * among its placed overlaps, aligned), in non-decreasing (offset, preorder) order.
 * Pruning, for every section s of the partition:
 *   max(floor[s], current offset) + (bytes of unplaced items live in s) <= capacity,
 * where floor[s] is the top of what is placed in s, raised to the lowest minimum offset of
 * the unplaced items in s. And dominance: an item whose offset would be at or above some
 * unplaced item's minimum offset + size leaves a gap that item could fill, so it is skipped.
 * These are the techniques MiniMalloc (ASPLOS 2023) published; the code is our own.
 *
 * Obstacles (blocks in use that a runtime layout goes around): an item's minimum offset is
 * also lifted past the obstacles live with it, so the canonical form still holds (every item
 * at the lowest offset that all the others and the obstacles allow). The bound subtracts the
 * obstacles live in each section, whose bytes between its floor and the capacity are space no
 * unplaced item can use (with too many obstacle runs in all, only those live in every section:
 * a weaker bound, still a valid one).
 *
 * With many sections (a training step's group of a few thousand items) a node would cost a
 * pass over every section and every member; there (`large`) the bound's totals live in a
 * segment tree, and a node checks only the sections whose floor or total it moved. Every
 * search keeps each section's unplaced members first, so raising a floor scans only those (the
 * same search, 3-9% more backtracks a second on MiniMalloc's J and D). Each node's ordering is
 * a list of item indices (4 bytes an entry: the lists of a descent sum to about items^2 / 2
 * entries). A lean search (st_search_input.lean) skips the floor raise on such partitions: a
 * weaker bound, far cheaper nodes; place.c runs one of each. */
#include "base/clock.h"
#include "plan/place_search.h"

#include <stdlib.h>
#include <string.h>

/* More sections than this: a search keeps more structure to spend less per node (`large`). */
#define LARGE_SECTIONS 2048

typedef struct undo_entry {
  uint32_t idx;
  uint64_t val;
} undo_entry;

typedef struct undo_stack {
  undo_entry* v;
  size_t len, cap;
} undo_stack;

struct st_search {
  uint32_t n, nsec;
  uint64_t align;
  const uint64_t* size;
  const uint32_t *slo, *shi;
  uint64_t* length;
  int heuristic;
  uint32_t* ov_start; /* CSR: items overlapping item i in time */
  uint32_t* ov;
  uint32_t* sm_start; /* CSR: items live in section s, the unplaced ones first */
  uint32_t* sm;
  uint32_t* unplaced; /* per section: how many of its members are unplaced */
  uint32_t* im_start; /* CSR by item: one entry per section it covers ... */
  uint32_t* slot;     /* ... its index in that section's members */
  uint64_t* total0;    /* bytes live per section */
  uint32_t* pre[ST_SEARCH_HEURISTICS]; /* preorder index -> item */
  /* search state */
  uint32_t* rank;       /* per item: its place in the preorder in use (a split's own in a split) */
  uint64_t *minoff, *off, *floor, *total;
  uint32_t* affected;  /* the sections whose floor the last placement may have raised */
  uint32_t naffected;
  /* the unplaced totals again, as a segment tree (add on a range, max of a range): the bound's
   * `offset + total <= capacity` for every section at once, in log time per node */
  __int128* seg_max;   /* per node: max of its range, with its own adds (not its ancestors') */
  __int128* seg_add;   /* per node: added to its whole range */
  uint32_t seg_size;   /* leaves: a power of two >= sections */
  bool large;          /* many sections: the tree (with few, scanning the totals costs less) */
  bool raise;          /* section floors rise to their unplaced members' lowest offset (all but
                          large lean searches) */
  int32_t* cover;      /* scratch difference array over sections (+1 guard) */
  uint32_t* witness;   /* per section: a member last seen unplaced at or below the floor */
  uint32_t* cuts0;     /* per section boundary q|q+1: items crossing it */
  uint32_t* cuts;      /* the same, counting unplaced items only */
  uint32_t* cutpoints; /* scratch stack of new zero cuts */
  size_t ncut, cut_cap;
  undo_stack umin, ufloor;
  uint32_t* arena;    /* each node's ordering of its unplaced items, by (minimum offset, rank); the
                         offset is read from minoff, which a child restores before it returns, so
                         an entry is the item alone (the arena grows with depth times items) */
  size_t arena_cap;
  uint32_t* obs_start; /* CSR by item: its obstacles, merged into disjoint [lo, hi) runs ... */
  uint64_t* obs;       /* ... by offset, lo and hi in turn */
  uint32_t* sec_start; /* CSR by section: the obstacles live in it, merged the same way (NULL: */
  uint64_t* sec_runs;  /* too many; the common ones below serve every section) ... */
  uint64_t* sec_before; /* ... and per run the bytes of the runs before it in its list */
  uint64_t* sec_cap;   /* per attempt and section: their bytes below the capacity */
  uint32_t ncommon;    /* the obstacles live in every section, merged: */
  uint64_t* common;    /* lo and hi in turn, by offset */
  uint64_t* common_before; /* per run: the bytes of the runs before it */
  uint64_t common_cap; /* per attempt: their bytes below the capacity */
  uint64_t* sort_off;  /* scratch: the offsets and ranks of the list a node is sorting */
  uint32_t* sort_rank;
  uint64_t cap, node_limit, nodes, backtracks;
  uint64_t siblings;   /* placements tried past a node's first entry (not large): for the clock */
  double deadline;
  const volatile int* cancel;
  const atomic_int* stop;
  uint64_t* out;
  bool nomem;
};

static uint64_t round_up(uint64_t x, uint64_t a) {
  if (a <= 1) return x;
  uint64_t r = x % a;
  return r ? x + (a - r) : x;
}

/* Preordering keys, each descending (MiniMalloc's three defaults). T = the largest section
 * total the item lives in (how crowded its worst moment is), W = lifetime length,
 * A = size * lifetime length. */
typedef struct pre_key {
  uint64_t k[3];
  uint32_t item;
} pre_key;

static int cmp_pre_key(const void* a, const void* b) {
  const pre_key *x = a, *y = b;
  for (int i = 0; i < 3; i++)
    if (x->k[i] != y->k[i]) return x->k[i] > y->k[i] ? -1 : 1;
  return x->item < y->item ? -1 : x->item > y->item;
}

static const char heuristic_keys[ST_SEARCH_HEURISTICS][3] = {
    {'W', 'A', 'T'}, {'T', 'A', 'W'}, {'T', 'W', 'A'}, {'T', 'C', 'A'}, {'C', 'A', 'T'}, {'A', 'T', 'C'}};

/* The preordering key of item i under heuristic h; t: the largest section total in its
 * lifetime (T). */
static void fill_key(const st_search* s, int h, uint32_t i, uint64_t t, pre_key* key) {
  key->item = i;
  for (int c = 0; c < 3; c++) {
    uint64_t v = 0;
    switch (heuristic_keys[h][c]) {
      case 'T': v = t; break;
      case 'W': v = s->length[i]; break;
      case 'C': v = s->shi[i] - s->slo[i]; break;
      case 'A': {
        long double a = (long double)s->size[i] * (long double)s->length[i];
        v = a > 1.8e19L ? UINT64_MAX : (uint64_t)a;
        break;
      }
    }
    key->k[c] = v;
  }
}

typedef struct fixed_ref {
  uint64_t lo, hi;
  uint32_t slo, shi;
} fixed_ref;

static int cmp_fixed_ref(const void* a, const void* b) {
  const fixed_ref *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Appends [lo, hi) to the merged runs out[0 .. 2 * *k) (lo never below the last run's lo);
 * out NULL: counts only. */
static void merge_run(uint64_t* out, uint32_t* k, uint64_t* last_hi, uint64_t lo, uint64_t hi) {
  if (*k && lo <= *last_hi) {
    if (hi > *last_hi) {
      *last_hi = hi;
      if (out) out[2 * *k - 1] = hi;
    }
    return;
  }
  if (out) {
    out[2 * *k] = lo;
    out[2 * *k + 1] = hi;
  }
  (*k)++;
  *last_hi = hi;
}

/* before[k]: the bytes of runs r[0 .. k) (k < n). */
static void sum_runs(const uint64_t* r, uint64_t* before, uint32_t n) {
  uint64_t sum = 0;
  for (uint32_t k = 0; k < n; k++) {
    before[k] = sum;
    sum += r[2 * k + 1] - r[2 * k];
  }
}

/* Bytes of the runs r[0 .. n) (with their sums `before`) that lie below x. */
static uint64_t runs_below(const uint64_t* r, const uint64_t* before, uint32_t n, uint64_t x) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) { /* the runs that start below x */
    uint32_t mid = lo + (hi - lo) / 2;
    if (r[2 * mid] < x) lo = mid + 1; else hi = mid;
  }
  if (lo == 0) return 0;
  const uint64_t* last = r + 2 * (lo - 1);
  return before[lo - 1] + ((x < last[1] ? x : last[1]) - last[0]);
}

/* Section lists of obstacles above this many runs in all keep only the common list (the bound
 * is then weaker where obstacles come and go, never wrong). */
#define SECTION_RUNS_MAX (1u << 24)

/* The obstacles, by offset, merged into runs: each item's (those live with it), each
 * section's, and those live in every section, with the sums the bound reads. Two passes for
 * each CSR: count, then fill (the lists are short: blocks in use mostly touch one another). */
static bool build_obstacles(st_search* s, const st_search_input* in) {
  uint32_t nf = in->nfixed, ns = s->nsec;
  fixed_ref* f = malloc(nf * sizeof *f);
  uint64_t* last_hi = malloc((ns ? ns : 1) * sizeof *last_hi);
  uint32_t* count = malloc((ns ? ns : 1) * sizeof *count);
  s->obs_start = malloc(((size_t)s->n + 1) * sizeof(uint32_t));
  s->common = malloc((nf ? nf : 1) * 2 * sizeof(uint64_t));
  s->common_before = malloc((nf ? nf : 1) * sizeof(uint64_t));
  bool ok = f && last_hi && count && s->obs_start && s->common && s->common_before;
  if (ok) {
    for (uint32_t k = 0; k < nf; k++)
      f[k] = (fixed_ref){in->fixed_offset[k], in->fixed_offset[k] + in->fixed_size[k], in->fixed_slo[k],
                         in->fixed_shi[k]};
    st_sort(f, nf, sizeof *f, cmp_fixed_ref);
  }
  /* each item's */
  for (int pass = 0; ok && pass < 2; pass++) {
    size_t total = 0;
    for (uint32_t i = 0; i < s->n && ok; i++) {
      uint64_t* out = pass ? s->obs + 2 * (size_t)s->obs_start[i] : NULL;
      uint32_t k = 0;
      uint64_t top = 0;
      for (uint32_t j = 0; j < nf; j++)
        if (f[j].slo < s->shi[i] && s->slo[i] < f[j].shi && f[j].hi > f[j].lo)
          merge_run(out, &k, &top, f[j].lo, f[j].hi);
      if (pass == 0) {
        s->obs_start[i] = (uint32_t)total;
        total += k;
        ok = total <= UINT32_MAX;
      }
    }
    if (ok && pass == 0) {
      s->obs_start[s->n] = (uint32_t)total;
      ok = (s->obs = malloc((total ? total : 1) * 2 * sizeof(uint64_t))) != NULL;
    }
  }
  /* those live in every section */
  uint32_t k = 0;
  uint64_t top = 0;
  for (uint32_t j = 0; ok && j < nf; j++)
    if (f[j].slo == 0 && f[j].shi >= ns && f[j].hi > f[j].lo) merge_run(s->common, &k, &top, f[j].lo, f[j].hi);
  s->ncommon = k;
  if (ok) sum_runs(s->common, s->common_before, k);
  /* each section's: every obstacle appended to the sections it lives in, by offset */
  size_t total = 0;
  for (int pass = 0; ok && pass < 2; pass++) {
    memset(count, 0, (ns ? ns : 1) * sizeof *count);
    for (uint32_t j = 0; j < nf; j++) {
      if (f[j].hi <= f[j].lo) continue;
      for (uint32_t q = f[j].slo; q < f[j].shi && q < ns; q++)
        merge_run(pass ? s->sec_runs + 2 * (size_t)s->sec_start[q] : NULL, &count[q], &last_hi[q], f[j].lo,
                  f[j].hi);
    }
    if (pass == 1) break;
    for (uint32_t q = 0; q < ns; q++) total += count[q];
    if (total > SECTION_RUNS_MAX) break; /* the common list alone */
    s->sec_start = malloc(((size_t)ns + 1) * sizeof(uint32_t));
    s->sec_runs = malloc((total ? total : 1) * 2 * sizeof(uint64_t));
    s->sec_before = malloc((total ? total : 1) * sizeof(uint64_t));
    s->sec_cap = malloc((ns ? ns : 1) * sizeof(uint64_t));
    ok = s->sec_start && s->sec_runs && s->sec_before && s->sec_cap;
    for (uint32_t q = 0, at = 0; ok && q <= ns; q++) {
      s->sec_start[q] = at;
      if (q < ns) at += count[q];
    }
  }
  if (ok && s->sec_start)
    for (uint32_t q = 0; q < ns; q++)
      sum_runs(s->sec_runs + 2 * (size_t)s->sec_start[q], s->sec_before + s->sec_start[q], count[q]);
  free(f);
  free(last_hi);
  free(count);
  return ok;
}

/* The lowest aligned offset at or above o where item i clears its obstacles; UINT64_MAX - 1
 * (above any capacity the search can be given with the item placed) if none. */
static uint64_t clear_obstacles(const st_search* s, uint32_t i, uint64_t o) {
  if (!s->obs_start) return o; /* no obstacles */
  const uint64_t* r = s->obs + 2 * (size_t)s->obs_start[i];
  uint32_t lo = 0, hi = s->obs_start[i + 1] - s->obs_start[i];
  while (lo < hi) { /* the first run that ends above o */
    uint32_t mid = lo + (hi - lo) / 2;
    if (r[2 * mid + 1] <= o) lo = mid + 1; else hi = mid;
  }
  uint64_t size = s->size[i];
  for (uint32_t k = lo; k < s->obs_start[i + 1] - s->obs_start[i]; k++) {
    if (o > UINT64_MAX - 2 - size) return UINT64_MAX - 1;
    if (r[2 * k] >= o + size) break; /* the gap below this run holds it */
    o = round_up(r[2 * k + 1], s->align);
    if (o < r[2 * k + 1]) return UINT64_MAX - 1; /* rounding wrapped */
  }
  return o > UINT64_MAX - 2 - size ? UINT64_MAX - 1 : o;
}

/* Bytes of section q's obstacles below x. */
static uint64_t section_below(const st_search* s, uint32_t q, uint64_t x) {
  uint32_t a = s->sec_start[q];
  return runs_below(s->sec_runs + 2 * (size_t)a, s->sec_before + a, s->sec_start[q + 1] - a, x);
}

/* Bytes between `level` and the capacity that the obstacles live in every section hold, so
 * that no unplaced item can use them in any section (level <= cap). */
static uint64_t blocked_above_all(const st_search* s, uint64_t level) {
  return s->ncommon ? s->common_cap - runs_below(s->common, s->common_before, s->ncommon, level) : 0;
}

/* The same for section q alone: what all of its own obstacles hold, where it keeps them. */
static uint64_t blocked_above(const st_search* s, uint32_t q, uint64_t level) {
  return s->sec_start ? s->sec_cap[q] - section_below(s, q, level) : blocked_above_all(s, level);
}

stalloc_status_t st_search_create(const st_search_input* in, st_search** out) {
  *out = NULL;
  st_search* s = calloc(1, sizeof *s);
  if (!s) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement search: no memory");
  uint32_t n = in->n, ns = in->sections;
  s->n = n;
  s->nsec = ns;
  s->align = in->alignment ? in->alignment : 1;
  s->size = in->size;
  s->slo = in->slo;
  s->shi = in->shi;
  s->length = malloc((n ? n : 1) * sizeof(uint64_t));
  if (s->length) memcpy(s->length, in->length, n * sizeof(uint64_t));
  s->sm_start = calloc((size_t)ns + 1, sizeof(uint32_t));
  s->total0 = calloc(ns ? ns : 1, sizeof(uint64_t));
  s->ov_start = calloc((size_t)n + 1, sizeof(uint32_t));
  s->minoff = calloc(n ? n : 1, sizeof(uint64_t));
  s->off = calloc(n ? n : 1, sizeof(uint64_t));
  s->floor = calloc(ns ? ns : 1, sizeof(uint64_t));
  s->total = calloc(ns ? ns : 1, sizeof(uint64_t));
  s->affected = calloc(ns ? ns : 1, sizeof(uint32_t));
  s->sort_off = malloc((n ? n : 1) * sizeof(uint64_t));
  s->sort_rank = malloc((n ? n : 1) * sizeof(uint32_t));
  s->rank = malloc((n ? n : 1) * sizeof(uint32_t));
  s->large = ns > LARGE_SECTIONS;
  s->raise = !(s->large && in->lean);
  if (s->large) {
    for (s->seg_size = 1; s->seg_size < ns; s->seg_size *= 2) {}
    s->seg_max = malloc(2 * (size_t)s->seg_size * sizeof(__int128));
    s->seg_add = malloc(2 * (size_t)s->seg_size * sizeof(__int128));
  }
  s->cuts0 = calloc(ns ? ns : 1, sizeof(uint32_t));
  s->witness = calloc(ns ? ns : 1, sizeof(uint32_t));
  s->cover = calloc((size_t)ns + 1, sizeof(int32_t));
  s->cuts = calloc(ns ? ns : 1, sizeof(uint32_t));
  pre_key* keys = calloc(n ? n : 1, sizeof(pre_key));
  bool ok = s->length && s->sm_start && s->total0 && s->ov_start && s->minoff && s->off && s->floor &&
            s->total && s->affected && s->sort_off && s->sort_rank && s->rank &&
            (!s->large || (s->seg_max && s->seg_add)) && s->cuts0 && s->cuts && s->witness && s->cover &&
            keys;
  for (int h = 0; ok && h < ST_SEARCH_HEURISTICS; h++)
    ok = (s->pre[h] = calloc(n ? n : 1, sizeof(uint32_t))) != NULL;
  if (!ok) goto nomem;

  /* Section membership (CSR) and totals. */
  size_t members = 0;
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t k = in->slo[i]; k < in->shi[i]; k++) {
      s->sm_start[k + 1]++;
      s->total0[k] += in->size[i];
    }
    members += in->shi[i] - in->slo[i];
    for (uint32_t k = in->slo[i]; k + 1 < in->shi[i]; k++) s->cuts0[k]++;
  }
  for (uint32_t k = 0; k < ns; k++) s->sm_start[k + 1] += s->sm_start[k];
  s->sm = malloc((members ? members : 1) * sizeof(uint32_t));
  uint32_t* fill = calloc(ns ? ns : 1, sizeof(uint32_t));
  if (!s->sm || !fill) {
    free(fill);
    goto nomem;
  }
  s->unplaced = malloc((ns ? ns : 1) * sizeof(uint32_t));
  s->im_start = malloc(((size_t)n + 1) * sizeof(uint32_t));
  s->slot = malloc((members ? members : 1) * sizeof(uint32_t));
  if (!s->unplaced || !s->im_start || !s->slot) {
    free(fill);
    goto nomem;
  }
  s->im_start[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    s->im_start[i + 1] = s->im_start[i] + (in->shi[i] - in->slo[i]);
    for (uint32_t k = in->slo[i]; k < in->shi[i]; k++) {
      uint32_t m = s->sm_start[k] + fill[k]++;
      s->sm[m] = i;
      s->slot[s->im_start[i] + (k - in->slo[i])] = m;
    }
  }
  free(fill);
  for (uint32_t k = 0; k < ns; k++)
    if (s->sm_start[k] < s->sm_start[k + 1]) s->witness[k] = s->sm[s->sm_start[k]];

  /* Overlaps (CSR): two items overlap iff their section ranges intersect, that is iff one
   * is live in the other's first section. So i's overlaps are the members of its first
   * section and the items whose first section is inside i's range: output-sensitive, with
   * the items bucketed by first section. */
  uint32_t* st_start = calloc((size_t)ns + 1, sizeof(uint32_t));
  uint32_t* st_item = malloc((n ? n : 1) * sizeof(uint32_t));
  if (!st_start || !st_item) {
    free(st_start);
    free(st_item);
    goto nomem;
  }
  for (uint32_t i = 0; i < n; i++) st_start[in->slo[i] + 1]++;
  for (uint32_t k = 0; k < ns; k++) st_start[k + 1] += st_start[k];
  {
    uint32_t* pos = calloc(ns ? ns : 1, sizeof(uint32_t));
    if (!pos) {
      free(st_start);
      free(st_item);
      goto nomem;
    }
    for (uint32_t i = 0; i < n; i++) st_item[st_start[in->slo[i]] + pos[in->slo[i]]++] = i;
    free(pos);
  }
  size_t pairs = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t a = in->slo[i], b = in->shi[i];
    pairs += s->sm_start[a + 1] - s->sm_start[a] - 1 + (st_start[b] - st_start[a + 1]);
  }
  s->ov = pairs <= UINT32_MAX ? malloc((pairs ? pairs : 1) * sizeof(uint32_t)) : NULL;
  if (!s->ov) {
    free(st_start);
    free(st_item);
    goto nomem;
  }
  pairs = 0;
  for (uint32_t i = 0; i < n; i++) {
    s->ov_start[i] = (uint32_t)pairs;
    uint32_t a = in->slo[i], b = in->shi[i];
    for (uint32_t m = s->sm_start[a]; m < s->sm_start[a + 1]; m++)
      if (s->sm[m] != i) s->ov[pairs++] = s->sm[m];
    for (uint32_t m = st_start[a + 1]; m < st_start[b]; m++) s->ov[pairs++] = st_item[m];
  }
  s->ov_start[n] = (uint32_t)pairs;
  free(st_start);
  free(st_item);

  if (in->nfixed && !build_obstacles(s, in)) goto nomem;

  /* Preorderings. */
  for (int h = 0; h < ST_SEARCH_HEURISTICS; h++) {
    for (uint32_t i = 0; i < n; i++) {
      uint64_t t = 0;
      for (uint32_t k = s->slo[i]; k < s->shi[i]; k++) t = ST_MAX(t, s->total0[k]);
      fill_key(s, h, i, t, &keys[i]);
    }
    st_sort(keys, n, sizeof *keys, cmp_pre_key);
    for (uint32_t p = 0; p < n; p++) s->pre[h][p] = keys[p].item;
  }
  free(keys);
  *out = s;
  return STALLOC_OK;
nomem:
  free(keys);
  st_search_destroy(s);
  return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement search: no memory for %u items", n);
}

void st_search_destroy(st_search* s) {
  if (!s) return;
  free(s->length);
  free(s->sm_start);
  free(s->sm);
  free(s->unplaced);
  free(s->im_start);
  free(s->slot);
  free(s->total0);
  free(s->ov_start);
  free(s->ov);
  for (int h = 0; h < ST_SEARCH_HEURISTICS; h++) free(s->pre[h]);
  free(s->minoff);
  free(s->off);
  free(s->floor);
  free(s->total);
  free(s->affected);
  free(s->seg_max);
  free(s->seg_add);
  free(s->cuts0);
  free(s->witness);
  free(s->cover);
  free(s->cuts);
  free(s->cutpoints);
  free(s->umin.v);
  free(s->ufloor.v);
  free(s->arena);
  free(s->sort_off);
  free(s->sort_rank);
  free(s->rank);
  free(s->obs_start);
  free(s->obs);
  free(s->common);
  free(s->common_before);
  free(s->sec_start);
  free(s->sec_runs);
  free(s->sec_before);
  free(s->sec_cap);
  free(s);
}

static bool undo_push(st_search* s, undo_stack* u, uint32_t idx, uint64_t val) {
  if (u->len == u->cap) {
    size_t cap = u->cap ? u->cap * 2 : 1024;
    undo_entry* v = realloc(u->v, cap * sizeof *v);
    if (!v) {
      s->nomem = true;
      return false;
    }
    u->v = v;
    u->cap = cap;
  }
  u->v[u->len].idx = idx;
  u->v[u->len].val = val;
  u->len++;
  return true;
}

#define UNPLACED UINT64_MAX

/* Adds `delta` to sections [lo, hi) under node v, which covers [vlo, vhi). */
static void seg_update(st_search* s, uint32_t v, uint32_t vlo, uint32_t vhi, uint32_t lo, uint32_t hi,
                       __int128 delta) {
  if (hi <= vlo || vhi <= lo) return;
  if (lo <= vlo && vhi <= hi) {
    s->seg_add[v] += delta;
    s->seg_max[v] += delta;
    return;
  }
  uint32_t mid = vlo + (vhi - vlo) / 2;
  seg_update(s, 2 * v, vlo, mid, lo, hi, delta);
  seg_update(s, 2 * v + 1, mid, vhi, lo, hi, delta);
  s->seg_max[v] = ST_MAX(s->seg_max[2 * v], s->seg_max[2 * v + 1]) + s->seg_add[v];
}

/* The largest unplaced total among sections [lo, hi) under node v. */
static __int128 seg_query(const st_search* s, uint32_t v, uint32_t vlo, uint32_t vhi, uint32_t lo,
                          uint32_t hi) {
  if (hi <= vlo || vhi <= lo) return 0; /* totals are never below 0 */
  if (lo <= vlo && vhi <= hi) return s->seg_max[v];
  uint32_t mid = vlo + (vhi - vlo) / 2;
  __int128 a = seg_query(s, 2 * v, vlo, mid, lo, hi), b = seg_query(s, 2 * v + 1, mid, vhi, lo, hi);
  return ST_MAX(a, b) + s->seg_add[v];
}

static void seg_reset(st_search* s) {
  uint32_t L = s->seg_size;
  for (uint32_t k = 0; k < L; k++) {
    s->seg_max[L + k] = k < s->nsec ? s->total[k] : 0;
    s->seg_add[L + k] = 0;
  }
  for (uint32_t v = L; v-- > 1;) {
    s->seg_max[v] = ST_MAX(s->seg_max[2 * v], s->seg_max[2 * v + 1]);
    s->seg_add[v] = 0;
  }
}

/* Places item i at offset o and propagates; the caller undoes with the stack marks. */
static void place(st_search* s, uint32_t i, uint64_t o) {
  uint64_t top = o + s->size[i];
  uint64_t top_aligned = round_up(top, s->align);
  s->off[i] = o;
  s->minoff[i] = UINT64_MAX; /* placed: no longer a candidate (one load in the scans) */
  /* Overlapping unplaced items can now go no lower than this item's top; the sections
   * they live in are marked with a difference array (their ranges overlap a lot). */
  uint32_t span_lo = UINT32_MAX, span_hi = 0;
  for (uint32_t k = s->ov_start[i]; k < s->ov_start[i + 1]; k++) {
    uint32_t j = s->ov[k];
    if (s->minoff[j] >= top_aligned) continue; /* also true for placed items */
    if (!undo_push(s, &s->umin, j, s->minoff[j])) return;
    /* no call without obstacles: this loop is where the search spends its time */
    s->minoff[j] = s->obs_start ? clear_obstacles(s, j, top_aligned) : top_aligned;
    if (!s->raise) continue;
    s->cover[s->slo[j]]++;
    s->cover[s->shi[j]]--;
    span_lo = ST_MIN(span_lo, s->slo[j]);
    span_hi = ST_MAX(span_hi, s->shi[j]);
  }
  uint32_t naff = 0;
  if (s->large) seg_update(s, 1, 0, s->seg_size, s->slo[i], s->shi[i], -(__int128)s->size[i]);
  int32_t run = 0;
  for (uint32_t q = span_lo; q < span_hi; q++) {
    run += s->cover[q];
    s->cover[q] = 0;
    if (run > 0) s->affected[naff++] = q;
  }
  if (span_hi) s->cover[span_hi] = 0;
  /* The item's sections: the floor rises to its top, its bytes leave the unplaced total, and
   * it moves behind the section's unplaced members (unplace undoes that by the count alone:
   * undos come in reverse order, so it is still right there). */
  for (uint32_t q = s->slo[i]; q < s->shi[i]; q++) {
    if (!undo_push(s, &s->ufloor, q, s->floor[q])) return;
    s->floor[q] = top;
    s->total[q] -= s->size[i];
    uint32_t* mine = &s->slot[s->im_start[i] + (q - s->slo[i])];
    uint32_t last = s->sm_start[q] + --s->unplaced[q], other = s->sm[last];
    s->sm[*mine] = other;
    s->slot[s->im_start[other] + (q - s->slo[other])] = *mine;
    s->sm[last] = i;
    *mine = last;
  }
  /* Nothing unplaced in a section can go below the lowest minimum offset among them. */
  s->naffected = naff;
  for (uint32_t a = 0; a < naff; a++) {
    uint32_t q = s->affected[a];
    /* Most often some unplaced member still sits at or below the floor, and then nothing
     * changes: try the member that showed it last time first, and stop at the first one. */
    uint64_t fl = s->floor[q];
    if (s->minoff[s->witness[q]] <= fl) continue;
    uint64_t lo = UINT64_MAX;
    uint32_t lowest = 0, end = s->sm_start[q] + s->unplaced[q];
    for (uint32_t m = s->sm_start[q]; m < end; m++) {
      uint32_t j = s->sm[m];
      uint64_t v = s->minoff[j]; /* UINT64_MAX once placed */
      if (v <= fl) {
        s->witness[q] = j;
        lo = 0;
        break;
      }
      if (v < lo) {
        lo = v;
        lowest = j;
      }
    }
    if (lo != UINT64_MAX && s->floor[q] < lo) {
      if (!undo_push(s, &s->ufloor, q, s->floor[q])) return;
      s->floor[q] = lo;
      /* it sits at the new floor: the next visit stops at it rather than scanning them all */
      s->witness[q] = lowest;
    }
  }
}

static void unplace(st_search* s, uint32_t i, size_t mark_min, size_t mark_floor) {
  while (s->ufloor.len > mark_floor) {
    undo_entry* e = &s->ufloor.v[--s->ufloor.len];
    s->floor[e->idx] = e->val;
  }
  for (uint32_t q = s->slo[i]; q < s->shi[i]; q++) {
    s->total[q] += s->size[i];
    s->unplaced[q]++;
  }
  if (s->large) seg_update(s, 1, 0, s->seg_size, s->slo[i], s->shi[i], (__int128)s->size[i]);
  while (s->umin.len > mark_min) {
    undo_entry* e = &s->umin.v[--s->umin.len];
    s->minoff[e->idx] = e->val;
  }
  s->minoff[i] = s->off[i]; /* it was placed at its minimum offset */
  s->off[i] = UNPLACED;
}

/* Section q's unplaced bytes fit between `level` and the capacity. */
static bool fits_from(const st_search* s, uint32_t q, uint64_t level) {
  return level <= s->cap && s->total[q] <= s->cap - level - blocked_above(s, q, level);
}

/* sections_fit after item i was placed at `offset`, its parent having passed it: only the
 * sections whose floor or total moved are checked one by one; `offset + total` for all of
 * [rlo, rhi) with the tree's largest total. */
static bool fits_after(const st_search* s, uint32_t i, uint64_t offset, uint32_t rlo, uint32_t rhi) {
  for (uint32_t q = s->slo[i]; q < s->shi[i]; q++)
    if (!fits_from(s, q, s->floor[q])) return false;
  for (uint32_t a = 0; a < s->naffected; a++)
    if (!fits_from(s, s->affected[a], s->floor[s->affected[a]])) return false;
  if (offset > s->cap) return false;
  uint64_t room = s->cap - offset - blocked_above_all(s, offset);
  return seg_query(s, 1, 0, s->seg_size, rlo, rhi) <= (__int128)room;
}

static bool sections_fit(const st_search* s, uint64_t offset, uint32_t rlo, uint32_t rhi) {
  if (!s->obs_start) { /* the loop a search without obstacles runs at every node */
    for (uint32_t q = rlo; q < rhi; q++) {
      uint64_t level = ST_MAX(s->floor[q], offset);
      if (level > s->cap || s->total[q] > s->cap - level) return false;
    }
    return true;
  }
  for (uint32_t q = rlo; q < rhi; q++)
    if (!fits_from(s, q, ST_MAX(s->floor[q], offset))) return false;
  return true;
}

/* (offset, rank) a is below (offset, rank) b */
static bool entry_less(uint64_t a_off, uint32_t a, uint64_t b_off, uint32_t b) {
  return a_off < b_off || (a_off == b_off && a < b);
}

static bool ensure_arena(st_search* s, size_t need) {
  if (need <= s->arena_cap) return true;
  size_t cap = ST_MAX(s->arena_cap * 2, need + 1024);
  uint32_t* a = realloc(s->arena, cap * sizeof *a);
  if (!a) return false;
  s->arena = a;
  s->arena_cap = cap;
  return true;
}

static st_search_outcome dfs(st_search* s, size_t parent, uint32_t parent_len,
                             uint64_t last_off, uint32_t last_rank, uint32_t rlo, uint32_t rhi);

/* Dynamic decomposition: once no unplaced item crosses a section boundary, the two sides
 * are independent problems; solving them one after the other (instead of interleaved)
 * stops the search from re-trying one side's choices for every choice on the other. */
static st_search_outcome split(st_search* s, size_t base, uint32_t len, size_t cut_mark,
                               uint32_t rlo, uint32_t rhi) {
  /* cutpoints[cut_mark..ncut) are new boundaries inside (rlo, rhi); sort them (few). */
  size_t nc = s->ncut - cut_mark;
  uint32_t* c = malloc((nc ? nc : 1) * sizeof(uint32_t)); /* nested searches may move cutpoints */
  if (!c) return ST_SEARCH_NOMEM;
  memcpy(c, s->cutpoints + cut_mark, nc * sizeof(uint32_t));
  for (size_t a = 1; a < nc; a++) {
    uint32_t v = c[a];
    size_t b = a;
    while (b > 0 && c[b - 1] > v) { c[b] = c[b - 1]; b--; }
    c[b] = v;
  }
  size_t sub = base + len;
  for (size_t k = 0; k <= nc; k++) {
    uint32_t lo = k == 0 ? rlo : c[k - 1], hi = k == nc ? rhi : c[k];
    if (!ensure_arena(s, sub + 2 * (size_t)len + 2)) {
      free(c);
      return ST_SEARCH_NOMEM;
    }
    uint32_t m = 0;
    for (uint32_t j = 0; j < len; j++) {
      uint32_t i = s->arena[base + j];
      if (s->off[i] == UNPLACED && s->slo[i] < hi && lo < s->shi[i]) s->arena[sub + m++] = i;
    }
    if (m == 0) continue;
    /* A fresh preorder for the subproblem, from the totals still unplaced in its sections
     * (what is crowded has changed since the start). */
    pre_key* keys = malloc(m * sizeof *keys);
    uint32_t* saved = malloc(m * sizeof *saved); /* the items' ranks outside the split */
    if (!keys || !saved) {
      free(keys);
      free(saved);
      free(c);
      return ST_SEARCH_NOMEM;
    }
    for (uint32_t j = 0; j < m; j++) {
      uint32_t i = s->arena[sub + j];
      /* the largest total still unplaced in its lifetime within the subproblem */
      uint32_t a0 = ST_MAX(s->slo[i], lo), a1 = ST_MIN(s->shi[i], hi);
      uint64_t t = 0;
      if (s->large) t = (uint64_t)seg_query(s, 1, 0, s->seg_size, a0, a1);
      else
        for (uint32_t k = a0; k < a1; k++) t = ST_MAX(t, s->total[k]);
      fill_key(s, s->heuristic, i, t, &keys[j]);
    }
    st_sort(keys, m, sizeof *keys, cmp_pre_key);
    for (uint32_t j = 0; j < m; j++) {
      uint32_t i = keys[j].item;
      saved[j] = s->rank[i];
      s->rank[i] = j;
      s->arena[sub + j] = i; /* sorted by offset by the child, as any node's list */
    }
    free(keys);
    st_search_outcome r = dfs(s, sub, m, 0, 0, lo, hi);
    for (uint32_t j = 0; j < m; j++) s->rank[s->arena[sub + j]] = saved[j]; /* children write above */
    free(saved);
    if (r != ST_SEARCH_FOUND) {
      free(c);
      return r;
    }
  }
  free(c);
  /* the sub-searches wrote their own items; this path's placed items are written here
   * (a leaf may never be reached when the split leaves nothing unplaced) */
  for (uint32_t i = 0; i < s->n; i++)
    if (s->off[i] != UNPLACED) s->out[i] = s->off[i];
  return ST_SEARCH_FOUND;
}

/* Cancelled, stopped by the other thread, or past the deadline. */
static bool must_stop(const st_search* s) {
  return st_cancel_requested(s->cancel) || (s->stop && atomic_load_explicit(s->stop, memory_order_relaxed)) ||
         st_now() > s->deadline;
}

static st_search_outcome dfs(st_search* s, size_t parent, uint32_t parent_len,
                             uint64_t last_off, uint32_t last_rank, uint32_t rlo, uint32_t rhi) {
  if (s->nodes >= s->node_limit) return ST_SEARCH_ABORTED;
  s->nodes++;
  /* The clock every 256 nodes, and at every node of a long list: a node sorts and scans its
   * parent's unplaced items, and with thousands of them (a step of a whole run, after peeling)
   * 256 nodes took seconds past the deadline. */
  if (((s->nodes & 255) == 0 || parent_len >= 256) && must_stop(s)) return ST_SEARCH_STOPPED;

  /* This node's ordering: the parent's minus placed items, re-sorted by current minimum
   * offset (they only grow, so an insertion sort on the nearly sorted list is cheap). */
  size_t base = parent + parent_len;
  if (!ensure_arena(s, base + 2 * (size_t)parent_len + 2)) return ST_SEARCH_NOMEM;
  uint32_t* ord = s->arena + base;
  const uint32_t* par = s->arena + parent;
  uint32_t len = 0;
  uint64_t min_height = UINT64_MAX;
  for (uint32_t k = 0; k < parent_len; k++) {
    uint32_t i = par[k];
    if (s->off[i] != UNPLACED) continue;
    uint64_t e_off = s->minoff[i], *so = s->sort_off;
    uint32_t e_rank = s->rank[i], *sr = s->sort_rank;
    uint32_t p = len++;
    while (p > 0 && entry_less(e_off, e_rank, so[p - 1], sr[p - 1])) {
      ord[p] = ord[p - 1];
      so[p] = so[p - 1];
      sr[p] = sr[p - 1];
      p--;
    }
    ord[p] = i;
    so[p] = e_off;
    sr[p] = e_rank;
    if (e_off <= UINT64_MAX - s->size[i] && e_off + s->size[i] < min_height) min_height = e_off + s->size[i];
  }
  if (len == 0) {
    for (uint32_t i = 0; i < s->n; i++)
      if (s->off[i] != UNPLACED) s->out[i] = s->off[i];
    return ST_SEARCH_FOUND;
  }
  for (uint32_t k = 0; k < len; k++) {
    uint32_t i = s->arena[base + k];    /* re-read: a child may have moved the arena */
    uint64_t e_off = s->minoff[i];      /* as when sorted: children restore it */
    if (e_off >= min_height) break;     /* dominance: it would leave a fillable gap */
    uint32_t e_rank = s->rank[i];
    if (e_off < last_off || (e_off == last_off && e_rank < last_rank)) continue; /* canonical */
    if (e_off > s->cap || s->size[i] > s->cap - e_off) continue;
    /* In a large search a placement tried past the list's first entry costs what a node does
     * (a pass over the sections it moves), so it counts as one: else a node limit bounds
     * nothing where sibling after sibling fails the bound (3,880 nodes of a 1,940-item step
     * of a held-out T5 run took over 10 s, where another preordering placed it in 0.1 s). */
    if (s->large && k > 0) {
      if (s->nodes++ >= s->node_limit) return ST_SEARCH_ABORTED;
      if ((s->nodes & 255) == 0 && must_stop(s)) return ST_SEARCH_STOPPED;
    } else if (k > 0 && (++s->siblings & 255) == 0 && must_stop(s)) {
      /* elsewhere siblings are not nodes (MiniMalloc's J needs its attempts' length), but
       * they watch the clock: a held-out convnet's group placed around 1,000 fixed items ran
       * 0.15 s past its deadline */
      return ST_SEARCH_STOPPED;
    }
    size_t mark_min = s->umin.len, mark_floor = s->ufloor.len, cut_mark = s->ncut;
    place(s, i, e_off);
    /* boundaries this item crossed: any now crossed by no unplaced item splits the range */
    for (uint32_t q = s->slo[i]; q + 1 < s->shi[i] && !s->nomem; q++)
      if (--s->cuts[q] == 0 && q + 1 > rlo && q + 1 < rhi) {
        if (s->ncut == s->cut_cap) {
          size_t cap = s->cut_cap ? s->cut_cap * 2 : 256;
          uint32_t* v = realloc(s->cutpoints, cap * sizeof *v);
          if (!v) { s->nomem = true; break; }
          s->cutpoints = v;
          s->cut_cap = cap;
        }
        s->cutpoints[s->ncut++] = q + 1;
      }
    st_search_outcome r = ST_SEARCH_NONE;
    if (s->nomem)
      r = ST_SEARCH_NOMEM;
    else if (s->large ? fits_after(s, i, e_off, rlo, rhi) : sections_fit(s, e_off, rlo, rhi))
      r = s->ncut > cut_mark ? split(s, base, len, cut_mark, rlo, rhi)
                             : dfs(s, base, len, e_off, e_rank, rlo, rhi);
    for (uint32_t q = s->slo[i]; q + 1 < s->shi[i]; q++) s->cuts[q]++;
    s->ncut = cut_mark;
    unplace(s, i, mark_min, mark_floor);
    if (r != ST_SEARCH_NONE) return r;
  }
  s->backtracks++;
  return ST_SEARCH_NONE;
}

st_search_outcome st_search_run(st_search* s, uint64_t capacity, int heuristic,
                                uint64_t node_limit, double deadline,
                                const volatile int* cancel, const atomic_int* stop,
                                uint64_t* offsets, uint64_t* backtracks) {
  s->cap = capacity;
  s->node_limit = node_limit;
  s->nodes = 0;
  s->backtracks = 0;
  s->deadline = deadline;
  s->cancel = cancel;
  s->stop = stop;
  s->out = offsets;
  s->nomem = false;
  s->heuristic = heuristic % ST_SEARCH_HEURISTICS;
  for (uint32_t p = 0; p < s->n; p++) s->rank[s->pre[s->heuristic][p]] = p;
  s->umin.len = s->ufloor.len = 0;
  s->common_cap = s->ncommon ? runs_below(s->common, s->common_before, s->ncommon, capacity) : 0;
  for (uint32_t q = 0; s->sec_start && q < s->nsec; q++) s->sec_cap[q] = section_below(s, q, capacity);
  for (uint32_t i = 0; i < s->n; i++) {
    s->off[i] = UNPLACED;
    s->minoff[i] = clear_obstacles(s, i, 0);
  }
  for (uint32_t q = 0; q < s->nsec; q++) {
    s->unplaced[q] = s->sm_start[q + 1] - s->sm_start[q];
    s->floor[q] = 0;
    s->total[q] = s->total0[q];
    s->cuts[q] = s->cuts0[q];
  }
  if (s->large) seg_reset(s);
  s->ncut = 0;
  st_search_outcome r;
  if (!sections_fit(s, 0, 0, s->nsec)) {
    r = ST_SEARCH_NONE;
  } else {
    /* The root's "parent" ordering: every item in preorder, at arena position 0. */
    if (s->arena_cap < 2 * (size_t)s->n + 1024) {
      size_t cap = 2 * (size_t)s->n + 1024;
      uint32_t* a = realloc(s->arena, cap * sizeof *a);
      if (!a) return ST_SEARCH_NOMEM;
      s->arena = a;
      s->arena_cap = cap;
    }
    for (uint32_t p = 0; p < s->n; p++) s->arena[p] = s->pre[s->heuristic][p];
    for (uint32_t i = 0; i < s->n; i++) offsets[i] = UNPLACED;
    r = dfs(s, 0, s->n, 0, 0, 0, s->nsec);
  }
  if (backtracks) *backtracks += s->backtracks;
  return r;
}
