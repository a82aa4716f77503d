/* place_granules.c - fewer whole granules at a placement's peak (see place_granules.h). */
#include "plan/place_granules.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

typedef struct compactor {
  const st_place_item* items;
  size_t n;
  uint64_t* off;
  uint64_t granule, alignment;
  size_t granules;    /* granules the items may touch: [0, granules) */
  uint32_t* touching; /* CSR by granule: the items touching it */
  uint32_t* first;    /* granules + 1 entries */
  uint32_t* count;    /* scratch: per granule */
  uint64_t (*span)[2]; /* scratch: lifetimes clipped to one item's, for the cover check */
  bool lost;           /* no host memory to index the granules again: stop (offsets stay valid) */
} compactor;

typedef struct event {
  uint64_t time;
  uint32_t item;
  int32_t delta; /* -1 (a free) sorts before +1 at the same time: its item is not live then */
} event;

static bool empty_item(const st_place_item* it) { return !it->size || it->upper <= it->lower; }

static uint64_t bytes_of(const compactor* c, size_t i) { return st_align_up(c->items[i].size, c->alignment); }

static uint64_t first_granule(const compactor* c, size_t i) { return c->off[i] / c->granule; }

static uint64_t last_granule(const compactor* c, size_t i) { return (c->off[i] + bytes_of(c, i) - 1) / c->granule; }

static bool live_at(const st_place_item* it, uint64_t t) { return it->lower <= t && t < it->upper; }

static bool overlap_in_time(const st_place_item* a, const st_place_item* b) {
  return a->lower < b->upper && b->lower < a->upper;
}

static int cmp_event(const void* a, const void* b) {
  const event *x = a, *y = b;
  if (x->time != y->time) return x->time < y->time ? -1 : 1;
  return (x->delta > y->delta) - (x->delta < y->delta);
}

/* Pairs by their first, then second value. */
static int cmp_span(const void* a, const void* b) {
  const uint64_t *x = a, *y = b;
  if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The most granules touched at one time, and the first time it is reached (*when). UINT64_MAX:
 * no host memory. */
static uint64_t granule_peak(const compactor* c, uint64_t* when) {
  size_t m = 0;
  event* ev = malloc((2 * c->n + 1) * sizeof *ev);
  uint32_t* touch = calloc(c->granules + 1, sizeof *touch);
  uint64_t best = UINT64_MAX;
  if (!ev || !touch) goto out;
  for (size_t i = 0; i < c->n; i++) {
    if (empty_item(&c->items[i])) continue;
    ev[m++] = (event){c->items[i].lower, (uint32_t)i, +1};
    ev[m++] = (event){c->items[i].upper, (uint32_t)i, -1};
  }
  qsort(ev, m, sizeof *ev, cmp_event);
  uint64_t now = 0;
  best = 0;
  *when = 0;
  for (size_t k = 0; k < m;) {
    uint64_t t = ev[k].time;
    for (; k < m && ev[k].time == t; k++)
      for (uint64_t g = first_granule(c, ev[k].item), e = last_granule(c, ev[k].item); g <= e; g++) {
        if (ev[k].delta > 0) now += touch[g]++ == 0;
        else now -= --touch[g] == 0;
      }
    if (now > best) {
      best = now;
      *when = t;
    }
  }
out:
  free(ev);
  free(touch);
  return best;
}

/* Lists, per granule, the items touching it. false: no host memory. */
static bool index_granules(compactor* c) {
  memset(c->count, 0, c->granules * sizeof *c->count);
  size_t total = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (empty_item(&c->items[i])) continue;
    for (uint64_t g = first_granule(c, i), e = last_granule(c, i); g <= e; g++) c->count[g]++;
    total += last_granule(c, i) - first_granule(c, i) + 1;
  }
  free(c->touching);
  c->touching = malloc((total ? total : 1) * sizeof *c->touching);
  if (!c->touching) return false;
  c->first[0] = 0;
  for (size_t g = 0; g < c->granules; g++) c->first[g + 1] = c->first[g] + c->count[g];
  memset(c->count, 0, c->granules * sizeof *c->count);
  for (size_t i = 0; i < c->n; i++) {
    if (empty_item(&c->items[i])) continue;
    for (uint64_t g = first_granule(c, i), e = last_granule(c, i); g <= e; g++)
      c->touching[c->first[g] + c->count[g]++] = (uint32_t)i;
  }
  return true;
}

/* Whether items other than b touch granule h at every time of b's life. */
static bool covered(compactor* c, size_t h, size_t b) {
  const st_place_item* it = &c->items[b];
  size_t m = 0;
  for (uint32_t k = c->first[h]; k < c->first[h + 1]; k++) {
    const st_place_item* o = &c->items[c->touching[k]];
    if (c->touching[k] == b || !overlap_in_time(o, it)) continue;
    c->span[m][0] = ST_MAX(o->lower, it->lower);
    c->span[m][1] = ST_MIN(o->upper, it->upper);
    m++;
  }
  qsort(c->span, m, sizeof *c->span, cmp_span);
  uint64_t reached = it->lower;
  for (size_t k = 0; k < m && c->span[k][0] <= reached; k++) reached = ST_MAX(reached, c->span[k][1]);
  return reached >= it->upper;
}

/* In granule h, the aligned start of the smallest gap that holds b while b lives, and its
 * length (*gap); UINT64_MAX: none. */
static uint64_t gap_in(compactor* c, size_t h, size_t b, uint64_t* gap) {
  const st_place_item* it = &c->items[b];
  uint64_t lo = h * c->granule, hi = lo + c->granule, need = bytes_of(c, b);
  size_t m = 0;
  for (uint32_t k = c->first[h]; k < c->first[h + 1]; k++) {
    size_t o = c->touching[k];
    if (o == b || !overlap_in_time(&c->items[o], it)) continue;
    c->span[m][0] = c->off[o];
    c->span[m][1] = c->off[o] + bytes_of(c, o);
    m++;
  }
  qsort(c->span, m, sizeof *c->span, cmp_span);
  uint64_t best = UINT64_MAX, from = lo;
  *gap = UINT64_MAX;
  for (size_t k = 0; k <= m; k++) {
    uint64_t to = k < m ? ST_MIN(c->span[k][0], hi) : hi;
    uint64_t at = st_align_up(from, c->alignment);
    if (to > at && to - at >= need && to - from < *gap) {
      best = at;
      *gap = to - from;
    }
    if (k < m) from = ST_MAX(from, c->span[k][1]);
    if (from >= hi) break;
  }
  return best;
}

/* Moves b into the smallest gap of a granule other than `away` that stays touched while b lives
 * (not one b touches now: that would empty nothing). false: there is none. */
static bool move_off(compactor* c, size_t b, size_t away) {
  uint64_t best = UINT64_MAX, best_gap = UINT64_MAX;
  for (size_t h = 0; h < c->granules; h++) {
    if (h == away || (h >= first_granule(c, b) && h <= last_granule(c, b))) continue;
    if (c->first[h] == c->first[h + 1] || !covered(c, h, b)) continue;
    uint64_t gap, at = gap_in(c, h, b, &gap);
    if (at != UINT64_MAX && gap < best_gap) {
      best = at;
      best_gap = gap;
    }
  }
  if (best == UINT64_MAX) return false;
  c->off[b] = best;
  return true;
}

/* Empties granule g at time t of the free items that touch it then (none larger than a
 * granule), each moved off. Returns how many moved; 0: some could not be, and offsets are as
 * they were. */
static size_t empty_granule(compactor* c, size_t g, uint64_t t) {
  enum { MOST = 16 }; /* a granule touched by more blocks than this is not emptied */
  size_t m = 0, moved = 0;
  uint32_t who[MOST];
  uint64_t was[MOST];
  for (uint32_t k = c->first[g]; k < c->first[g + 1]; k++) {
    size_t i = c->touching[k];
    const st_place_item* it = &c->items[i];
    if (!live_at(it, t)) continue;
    if (it->fixed_offset != PLACE_FREE || bytes_of(c, i) > c->granule || m == MOST) return 0;
    who[m++] = (uint32_t)i;
  }
  bool ok = m > 0;
  for (size_t k = 0; ok && k < m; k++) {
    was[k] = c->off[who[k]];
    ok = move_off(c, who[k], g);
    moved += ok;
    /* each move alone keeps the placement valid and no granule count higher */
    if (ok && !index_granules(c)) c->lost = true;
    if (c->lost) return moved;
  }
  if (ok) return moved;
  for (size_t k = 0; k < moved; k++) c->off[who[k]] = was[k];
  if (moved && !index_granules(c)) c->lost = true;
  return 0;
}

/* The granules touched at time t only by free items of at most a granule, fewest bytes first:
 * the likeliest to empty. Returns how many (in *out, to free). */
static size_t candidates(const compactor* c, uint64_t t, uint32_t** out) {
  uint32_t* g_of = malloc((c->granules ? c->granules : 1) * sizeof *g_of);
  uint64_t (*key)[2] = malloc((c->granules ? c->granules : 1) * sizeof *key);
  size_t m = 0;
  if (!g_of || !key) { /* no host memory: nothing to try */
    free(g_of);
    free(key);
    *out = NULL;
    return 0;
  }
  for (size_t g = 0; g < c->granules; g++) {
    uint64_t bytes = 0;
    bool movable = true, touched = false;
    for (uint32_t k = c->first[g]; k < c->first[g + 1] && movable; k++) {
      size_t i = c->touching[k];
      if (!live_at(&c->items[i], t)) continue;
      touched = true;
      movable = c->items[i].fixed_offset == PLACE_FREE && bytes_of(c, i) <= c->granule;
      bytes += bytes_of(c, i);
    }
    if (touched && movable) {
      key[m][0] = bytes;
      key[m][1] = g;
      m++;
    }
  }
  qsort(key, m, sizeof *key, cmp_span);
  for (size_t k = 0; k < m; k++) g_of[k] = (uint32_t)key[k][1];
  free(key);
  *out = g_of;
  return m;
}

/* The items at their offsets, with the granules they touch counted (no scratch allocated yet). */
static compactor compactor_of(const st_place_item* items, size_t n, uint64_t* offsets, uint64_t granule,
                              uint64_t alignment) {
  compactor c = {.items = items, .n = n, .off = offsets, .granule = granule, .alignment = alignment ? alignment : 1};
  uint64_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (!empty_item(&items[i])) top = ST_MAX(top, offsets[i] + bytes_of(&c, i));
  c.granules = (size_t)(top / granule + 1);
  return c;
}

/* Granules tried to empty, in all: a bound on the work that does not depend on the machine, so a
 * layout made with the same blocks is the same everywhere (the most any recorded step took was
 * 81, about 15 ms on the 2-core VM; docs/online.md, "Fewer granules at the layout's peak"). */
#define MOST_TRIES 256

size_t st_place_fewer_granules(const st_place_item* items, size_t n, uint64_t* offsets, uint64_t granule,
                               uint64_t alignment, double seconds) {
  compactor c = compactor_of(items, n, offsets, granule, alignment);
  c.first = malloc((c.granules + 1) * sizeof *c.first);
  c.count = malloc(c.granules * sizeof *c.count);
  c.span = malloc((n ? n : 1) * sizeof *c.span);
  size_t moves = 0, tries = 0;
  double deadline = st_now() + seconds;
  if (!c.first || !c.count || !c.span || !index_granules(&c)) goto out;
  /* Each emptied granule lowers the count at one time and raises none: this ends. */
  for (size_t moved = 1; moved && !c.lost && tries < MOST_TRIES && st_now() < deadline;) {
    moved = 0;
    uint64_t t;
    if (granule_peak(&c, &t) == UINT64_MAX) break;
    uint32_t* g = NULL;
    size_t m = candidates(&c, t, &g);
    for (size_t k = 0; k < m && !moved && !c.lost && tries < MOST_TRIES && st_now() < deadline; k++, tries++)
      moved = empty_granule(&c, g[k], t);
    free(g);
    moves += moved;
  }
out:
  free(c.first);
  free(c.count);
  free(c.span);
  free(c.touching);
  return moves;
}

uint64_t st_place_granule_peak(const st_place_item* items, size_t n, const uint64_t* offsets, uint64_t granule) {
  compactor c = compactor_of(items, n, (uint64_t*)offsets, granule, 1); /* read only */
  uint64_t t;
  return granule_peak(&c, &t);
}
