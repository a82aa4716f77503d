/* realign.c - runs of a layout's sizes (see realign.h). Each distinct run gets a group, found
 * by open addressing over the run's hash; a group lists where its run ends, in order, so a
 * layout whose runs recur (a model's layers; a step of one size throughout) costs one slot
 * per distinct run to build and a binary search to look up. */
#include <stdlib.h>
#include <string.h>

#include "runtime/realign.h"

/* Candidates looked at on each side of the current shift, at most: past them a shift is far
 * from the step's own place, and a layout of one size throughout has a candidate everywhere. */
#define NEAREST 64

struct st_realign {
  const uint64_t* sizes;
  size_t count;
  uint32_t* slot;  /* group + 1 of a distinct run; 0: empty */
  size_t mask;
  uint32_t* first; /* by group: its first entry in `ends`; groups + 1 of them */
  uint32_t* ends;  /* where each run ends, grouped, each group in increasing order */
};

static uint64_t run_hash(const uint64_t* run) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < ST_REALIGN_RUN; k++) {
    h ^= run[k] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h ^ (h >> 31);
}

static bool same_run(const uint64_t* a, const uint64_t* b) { return memcmp(a, b, ST_REALIGN_RUN * sizeof *a) == 0; }

/* The group of `run`, or -1; *at: its slot, or the empty slot where it would go. */
static long group_of(const st_realign* r, const uint64_t* run, size_t* at) {
  size_t i = run_hash(run) & r->mask;
  for (; r->slot[i]; i = (i + 1) & r->mask) {
    uint32_t g = r->slot[i] - 1;
    size_t end = r->ends[r->first[g]]; /* during the build: the group's first end */
    if (same_run(r->sizes + end + 1 - ST_REALIGN_RUN, run)) break;
  }
  *at = i;
  return r->slot[i] ? (long)r->slot[i] - 1 : -1;
}

void st_realign_destroy(st_realign* r) {
  if (!r) return;
  free(r->slot);
  free(r->first);
  free(r->ends);
  free(r);
}

st_realign* st_realign_create(const uint64_t* sizes, size_t count) {
  if (count < ST_REALIGN_RUN || count >= UINT32_MAX / 2) return NULL;
  size_t runs = count - ST_REALIGN_RUN + 1, cap = 16;
  while (cap < 2 * runs) cap *= 2;
  st_realign* r = calloc(1, sizeof *r);
  uint32_t* group = malloc(runs * sizeof *group); /* by run: its group */
  if (r) {
    *r = (st_realign){sizes, count, calloc(cap, sizeof(uint32_t)), cap - 1, malloc((runs + 1) * sizeof(uint32_t)),
                      malloc(runs * sizeof(uint32_t))};
  }
  if (!r || !group || !r->slot || !r->first || !r->ends) {
    free(group);
    st_realign_destroy(r);
    return NULL;
  }
  /* first pass: groups, with first[g] pointing at an `ends` entry that holds the group's first end */
  uint32_t groups = 0;
  for (size_t j = 0; j < runs; j++) {
    size_t at;
    long g = group_of(r, sizes + j, &at);
    if (g < 0) {
      g = groups++;
      r->slot[at] = (uint32_t)g + 1;
      r->first[g] = (uint32_t)j;
      r->ends[j] = (uint32_t)(j + ST_REALIGN_RUN - 1);
    }
    group[j] = (uint32_t)g;
  }
  /* second pass: each group's ends together, in order (counts, then offsets) */
  memset(r->first, 0, (groups + 1) * sizeof *r->first);
  for (size_t j = 0; j < runs; j++) r->first[group[j] + 1]++;
  for (uint32_t g = 0; g < groups; g++) r->first[g + 1] += r->first[g];
  uint32_t* fill = malloc((groups ? groups : 1) * sizeof *fill);
  if (!fill) {
    free(group);
    st_realign_destroy(r);
    return NULL;
  }
  memcpy(fill, r->first, groups * sizeof *fill);
  for (size_t j = 0; j < runs; j++) r->ends[fill[group[j]]++] = (uint32_t)(j + ST_REALIGN_RUN - 1);
  free(fill);
  free(group);
  return r;
}

/* Whether the step's sizes at [from, to) are the layout's at [from + d, to + d). */
static bool holds(const st_realign* r, const uint64_t* step, size_t from, size_t to, ptrdiff_t d) {
  if ((ptrdiff_t)from + d < 0 || (ptrdiff_t)to + d > (ptrdiff_t)r->count) return false;
  return memcmp(r->sizes + from + d, step + from, (to - from) * sizeof *step) == 0;
}

bool st_realign_find(const st_realign* r, const uint64_t* step, size_t position, size_t since, ptrdiff_t shift,
                     ptrdiff_t* out) {
  if (position + 1 < ST_REALIGN_RUN) return false;
  size_t at;
  long g = group_of(r, step + position + 1 - ST_REALIGN_RUN, &at);
  if (g < 0) return false;
  const uint32_t *lo = r->ends + r->first[g], *hi = r->ends + r->first[g + 1];
  ptrdiff_t target = (ptrdiff_t)position + shift; /* where the current shift puts the run's end */
  const uint32_t *a = lo, *b = hi;
  while (a < b) { /* the first end at or past target */
    const uint32_t* m = a + (b - a) / 2;
    if ((ptrdiff_t)*m < target) a = m + 1;
    else b = m;
  }
  size_t before = since > ST_REALIGN_RUN ? since - ST_REALIGN_RUN : 0;
  const uint32_t *up = a, *down = a; /* the nearest first, the lower on a tie */
  for (int seen = 0; seen < 2 * NEAREST && (up < hi || down > lo); seen++) {
    bool take_down = down > lo && (up >= hi || target - (ptrdiff_t)down[-1] <= (ptrdiff_t)*up - target);
    ptrdiff_t d = (ptrdiff_t)(take_down ? *--down : *up++) - (ptrdiff_t)position;
    if (d != shift && !(since > before && holds(r, step, before, since, d))) {
      *out = d;
      return true;
    }
  }
  return false;
}
