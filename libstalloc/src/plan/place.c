/* place.c - static placement (place.h): checks the input, finds the lower bound and the
 * independent partitions with one sweep, places every partition with fast constructive
 * heuristics, then spends the time limit on branch-and-bound (place_search.c) for the
 * partition that sets the peak, keeping the best placement found.
 *
 * Partitions: sorted by start, the items split wherever no lifetime crosses a time point;
 * such groups share no time, so each can be placed alone and the peak is the largest of
 * theirs. Small partitions get several greedy orderings; large ones (a whole training
 * iteration) get one sweep in time order with best-fit over the free address gaps, which is
 * O(n * live) and so scales to millions of items. */
#include "base/struct_size.h"
#include "base/clock.h"
#include "plan/place.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include "plan/place_peel.h"
#include "plan/place_search.h"

/* Partitions up to this many items get every greedy ordering (quadratic each). */
#define GREEDY_MAX 4096
/* Larger partitions up to this many items also get greedy orderings when a time limit is
 * given, as many as fit before the deadline (each is quadratic). */
#define GREEDY_BIG 32768
/* Partitions up to this many items get the exact search ... */
#define SEARCH_MAX 8000
/* ... where their fixed items times their free ones (the pairs the search's obstacle lists are
 * built from) are at most this many. */
#define OBSTACLE_PAIRS (1ull << 25)
/* Partitions up to this many items get peeling (place_peel.c): its first-fit of the long
 * items and its group floors are quadratic in the worst case and do not watch the clock. */
#define PEEL_MAX 200000

static uint64_t round_up(uint64_t x, uint64_t a) {
  if (a <= 1) return x;
  uint64_t r = x % a;
  return r ? x + (a - r) : x;
}

/* One active item (size > 0, non-empty lifetime) in compressed time. */
typedef struct pitem {
  uint32_t lo, hi;   /* compressed lifetime [lo, hi) */
  uint64_t size;     /* aligned */
  uint64_t fixed;    /* PLACE_FREE or the offset to keep */
  uint64_t length;   /* original lifetime length */
  uint32_t orig;     /* index into the caller's arrays */
} pitem;

typedef struct placer {
  pitem* it;          /* active items, sorted by lo */
  size_t n;
  uint64_t align;
  uint64_t* off;      /* per active item: the best offsets found */
  uint64_t* tmp;      /* scratch offsets */
  uint32_t* order;    /* scratch */
  uint64_t* key;      /* scratch sort keys */
  uint32_t* plist;    /* scratch: placed items sorted by offset */
  double deadline;
  const volatile int* cancel;
  st_place_result* res;
  int heuristics;     /* the search cycles through the first this many preorderings */
  atomic_int* stop;   /* set when one thread of the portfolio has proven its peak optimal */
  atomic_uchar* solved; /* with two threads, per partition: one of them has it at its goal (or
                           proven), so the other leaves it; the better of the two is kept */
  int turn;           /* with two threads: the partitions (part.turn) this one searches first */
  bool lean;          /* the second thread: large partitions' searches run lean (place_search.h) */
  bool every_ordering; /* st_place_params.every_ordering */
  uint32_t* kin;      /* partition indices by item count (find_kin): the partitions whose
                         placements another of the same count may borrow (borrow_kin) */
  struct kin_board* board; /* the best placements of partitions with kin, both threads' */
} placer;

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static int cmp_pitem_lo(const void* a, const void* b) {
  const pitem *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->orig < y->orig ? -1 : x->orig > y->orig;
}

/* ---- greedy over one partition [b, e) of p->it ------------------------------------ */

typedef struct keyed {
  uint64_t k1, k2;
  uint32_t i;
} keyed;

static int cmp_keyed(const void* a, const void* b) {
  const keyed *x = a, *y = b;
  if (x->k1 != y->k1) return x->k1 > y->k1 ? -1 : 1;
  if (x->k2 != y->k2) return x->k2 > y->k2 ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

enum { ORD_SIZE, ORD_LENGTH, ORD_AREA, ORD_START, ORD_TOTAL, ORD_COUNT };
enum { ORD_GIVEN = ORD_COUNT }; /* not a greedy ordering: by the caller's keys, then start */

/* Fills order[0..m) with partition items in the given ordering (fixed items first); sec_max
 * holds ORD_TOTAL's keys or ORD_GIVEN's, one per item. */
static bool make_order(placer* p, size_t b, size_t e, int how, const uint64_t* sec_max) {
  size_t m = e - b;
  keyed* k = malloc((m ? m : 1) * sizeof *k);
  if (!k) return false;
  for (size_t j = 0; j < m; j++) {
    const pitem* x = &p->it[b + j];
    uint64_t fixed_first = x->fixed != PLACE_FREE ? 1 : 0;
    uint64_t v = 0, w = x->size;
    switch (how) {
      case ORD_SIZE: v = x->size; w = x->length; break;
      case ORD_LENGTH: v = x->length; break;
      case ORD_AREA: {
        long double a = (long double)x->size * (long double)x->length;
        v = a > 1.8e19L ? UINT64_MAX : (uint64_t)a;
        break;
      }
      case ORD_START: v = UINT64_MAX - x->lo; break;
      case ORD_TOTAL: v = sec_max[j]; break;
      case ORD_GIVEN: v = sec_max[j]; w = 0; break;
    }
    /* fixed items go first whatever the ordering: the others must avoid them */
    k[j].k1 = fixed_first ? UINT64_MAX : ST_MIN(v, UINT64_MAX - 1);
    k[j].k2 = fixed_first ? UINT64_MAX - x->lo : w;
    k[j].i = (uint32_t)(b + j);
  }
  st_sort(k, m, sizeof *k, cmp_keyed);
  for (size_t j = 0; j < m; j++) p->order[j] = k[j].i;
  free(k);
  return true;
}

/* Places the partition's items in p->order at the lowest (best_fit: the tightest) gap left
 * by already-placed items that overlap in time. Writes p->tmp; returns the peak, or UINT64_MAX
 * once past `deadline` (0: none): on a partition of 30,000 items one pass takes half a second. */
static uint64_t greedy(placer* p, size_t m, bool best_fit, double deadline) {
  size_t np = 0; /* p->plist[0..np): placed items sorted by offset */
  uint64_t peak = 0;
  for (size_t j = 0; j < m; j++) {
    if (deadline > 0 && (j & 1023) == 1023 && st_now() > deadline) return UINT64_MAX;
    uint32_t i = p->order[j];
    const pitem* x = &p->it[i];
    uint64_t o;
    if (x->fixed != PLACE_FREE) {
      o = x->fixed;
    } else {
      uint64_t cand = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
      for (size_t q = 0; q < np; q++) {
        const pitem* y = &p->it[p->plist[q]];
        if (!(y->lo < x->hi && x->lo < y->hi)) continue;
        uint64_t yo = p->tmp[p->plist[q]];
        if (yo >= cand && yo - cand >= x->size) {
          if (!best_fit) break;
          if (yo - cand < best_gap) {
            best_gap = yo - cand;
            best = cand;
          }
        }
        cand = ST_MAX(cand, round_up(yo + y->size, p->align));
      }
      o = (best_fit && best != UINT64_MAX) ? best : cand;
    }
    p->tmp[i] = o;
    /* insert into plist by offset */
    size_t lo = 0, hi = np;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (p->tmp[p->plist[mid]] <= o) lo = mid + 1; else hi = mid;
    }
    memmove(p->plist + lo + 1, p->plist + lo, (np - lo) * sizeof(uint32_t));
    p->plist[lo] = i;
    np++;
    peak = ST_MAX(peak, o + x->size);
  }
  return peak;
}

/* ---- sweep in time order with best-fit (large partitions) ------------------------- */

typedef struct heap_ent {
  uint32_t hi;
  uint32_t i;
} heap_ent;

static void heap_push(heap_ent* h, size_t* n, heap_ent v) {
  size_t c = (*n)++;
  while (c > 0) {
    size_t par = (c - 1) / 2;
    if (h[par].hi <= v.hi) break;
    h[c] = h[par];
    c = par;
  }
  h[c] = v;
}

static heap_ent heap_pop(heap_ent* h, size_t* n) {
  heap_ent top = h[0], v = h[--(*n)];
  size_t c = 0;
  for (;;) {
    size_t l = 2 * c + 1;
    if (l >= *n) break;
    if (l + 1 < *n && h[l + 1].hi < h[l].hi) l++;
    if (h[l].hi >= v.hi) break;
    h[c] = h[l];
    c = l;
  }
  if (*n) h[c] = v;
  return top;
}

/* Items are already sorted by start. Live placed items are kept sorted by offset; expired
 * ones leave through a min-heap on end time. Fixed items are obstacles for their whole
 * lifetime, so the free items check the fixed ones overlapping them in time as well. */
static stalloc_status_t sweep_place(placer* p, size_t b, size_t e, uint64_t* peak_out) {
  size_t m = e - b, nlive = 0, nheap = 0, nfix = 0;
  uint32_t* live = malloc((m ? m : 1) * sizeof(uint32_t));
  heap_ent* heap = malloc((m ? m : 1) * sizeof(heap_ent));
  uint32_t* fix = malloc((m ? m : 1) * sizeof(uint32_t));
  uint32_t* obst = malloc((m ? m : 1) * sizeof(uint32_t));
  if (!live || !heap || !fix || !obst) {
    free(live); free(heap); free(fix); free(obst);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement: no memory for %zu items", m);
  }
  for (size_t i = b; i < e; i++)
    if (p->it[i].fixed != PLACE_FREE) {
      fix[nfix++] = (uint32_t)i;
      p->tmp[i] = p->it[i].fixed;
    }
  uint64_t peak = 0;
  for (size_t i = b; i < e; i++) {
    pitem* x = &p->it[i];
    while (nheap && heap[0].hi <= x->lo) {
      heap_ent d = heap_pop(heap, &nheap);
      uint64_t o = p->tmp[d.i];
      size_t lo = 0, hi = nlive;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->tmp[live[mid]] < o) lo = mid + 1; else hi = mid;
      }
      while (lo < nlive && live[lo] != d.i) lo++;
      if (lo < nlive) {
        memmove(live + lo, live + lo + 1, (nlive - lo - 1) * sizeof(uint32_t));
        nlive--;
      }
    }
    uint64_t o;
    if (x->fixed != PLACE_FREE) {
      o = x->fixed;
    } else {
      const uint32_t* list = live;
      size_t nl = nlive;
      if (nfix) { /* merge live and time-overlapping fixed items by offset */
        size_t a = 0, c = 0, k = 0, nf = 0;
        /* fixed items not yet reached in the sweep but overlapping x in time; those already
         * reached are in live. Fixed items are few in practice, so a linear filter. */
        for (size_t q = 0; q < nfix; q++) {
          const pitem* y = &p->it[fix[q]];
          if (fix[q] > i && y->lo < x->hi) obst[m - 1 - nf++] = fix[q];
        }
        /* obst tail holds nf future fixed items; sort them by offset (insertion) */
        uint32_t* ft = obst + m - nf;
        for (size_t q = 1; q < nf; q++) {
          uint32_t v = ft[q];
          size_t r = q;
          while (r > 0 && p->tmp[ft[r - 1]] > p->tmp[v]) { ft[r] = ft[r - 1]; r--; }
          ft[r] = v;
        }
        if (nf) {
          /* live items plus nf tail entries never exceed m, so the head has room */
          while (a < nlive || c < nf) {
            if (c >= nf || (a < nlive && p->tmp[live[a]] <= p->tmp[ft[c]]))
              obst[k++] = live[a++];
            else
              obst[k++] = ft[c++];
          }
          list = obst;
          nl = k;
        }
      }
      uint64_t cand = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
      for (size_t q = 0; q < nl; q++) {
        const pitem* y = &p->it[list[q]];
        uint64_t yo = p->tmp[list[q]];
        if (yo >= cand && yo - cand >= x->size && yo - cand < best_gap) {
          best_gap = yo - cand;
          best = cand;
        }
        cand = ST_MAX(cand, round_up(yo + y->size, p->align));
      }
      o = best != UINT64_MAX ? best : cand;
      p->tmp[i] = o;
    }
    /* insert into live by offset */
    size_t lo = 0, hi = nlive;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (p->tmp[live[mid]] <= o) lo = mid + 1; else hi = mid;
    }
    memmove(live + lo + 1, live + lo, (nlive - lo) * sizeof(uint32_t));
    live[lo] = (uint32_t)i;
    nlive++;
    heap_push(heap, &nheap, (heap_ent){x->hi, (uint32_t)i});
    peak = ST_MAX(peak, o + x->size);
  }
  free(live); free(heap); free(fix); free(obst);
  *peak_out = peak;
  return STALLOC_OK;
}

/* ---- partitions and the search loop ------------------------------------------------- */

typedef struct part {
  size_t b, e;        /* items p->it[b..e) */
  uint32_t tlo, thi;  /* compressed time span */
  uint64_t peak, lb;  /* best peak found, live-bytes bound of this partition */
  uint64_t proven;    /* no placement with a peak below this exists */
  size_t nfixed;      /* fixed items among them */
  int64_t twin;       /* an earlier partition that is the same problem (find_twins), or -1 */
  st_search* search;  /* created on first use */
  uint64_t* sol;
  uint64_t node_limit;
  uint32_t attempt;
  uint32_t step_shift; /* improving attempts aim (gap >> step_shift) below the best */
  bool exhausted;     /* the search cannot help any more */
  int turn;           /* which thread of the portfolio searches it first (-1: either) */
  uint32_t *slo_keep, *shi_keep; /* the search's input arrays, freed with it */
  uint64_t* size_keep;
  uint32_t* free_keep; /* the search's items: partition positions of the free items */
  uint64_t* free_sol;  /* the search's offsets for them */
  uint32_t nfree;
  uint32_t peels_run; /* bit a: peel_list[a] was tried on it */
  uint32_t kin_at, kin_count; /* its group in p->kin (kin_count 0: none) */
  uint64_t borrowed_at; /* the board's stamp + 1 when this thread last borrowed (0: never) */
} part;

/* Each item's largest section total over its lifetime, from a sparse table of range maxima:
 * O(ns log ns) to build, O(1) an item, where a scan of every lifetime costs the sum of their
 * lengths (a whole run's weights live across all its sections). false: no memory. */
static bool range_maxima(const placer* p, const part* q, const uint64_t* tot, uint32_t ns,
                         uint64_t* item_max) {
  uint32_t levels = 1;
  while (levels < 32 && ((uint64_t)1 << levels) <= ns) levels++;
  uint64_t* t = malloc((size_t)levels * ns * sizeof *t);
  if (!t) return false;
  memcpy(t, tot, ns * sizeof *t);
  for (uint32_t k = 1; k < levels; k++) {
    const uint64_t* below = t + (size_t)(k - 1) * ns;
    uint64_t* row = t + (size_t)k * ns;
    uint32_t half = 1u << (k - 1);
    for (uint32_t i = 0; i + (1u << k) <= ns; i++) row[i] = ST_MAX(below[i], below[i + half]);
  }
  for (size_t i = q->b; i < q->e; i++) {
    uint32_t a = p->it[i].lo - q->tlo, len = p->it[i].hi - p->it[i].lo, k = 0;
    while (k + 1 < levels && (2u << k) <= len) k++;
    const uint64_t* row = t + (size_t)k * ns;
    item_max[i - q->b] = ST_MAX(row[a], row[a + len - (1u << k)]);
  }
  free(t);
  return true;
}

/* Largest live bytes of each item's lifetime within the partition (the ORD_TOTAL key) and
 * the partition's bound. Sums run in 128 bits: 0 when done, 1 when memory ran out, 2 when more
 * than 2^64 - 1 bytes are live at once (no placement has offsets that big). */
static int section_totals(placer* p, part* q, uint64_t* item_max) {
  uint32_t ns = q->thi - q->tlo;
  unsigned __int128* tot = calloc((size_t)ns + 1, sizeof *tot);
  if (!tot) return 1;
  for (size_t i = q->b; i < q->e; i++) {
    tot[p->it[i].lo - q->tlo] += p->it[i].size;
    tot[p->it[i].hi - q->tlo] -= p->it[i].size;
  }
  uint64_t* sums = item_max ? malloc(((size_t)ns + 1) * sizeof *sums) : NULL;
  if (item_max && !sums) {
    free(tot);
    return 1;
  }
  unsigned __int128 run = 0;
  q->lb = 0;
  for (uint32_t k = 0; k < ns; k++) {
    run += tot[k];
    if (run > UINT64_MAX) {
      free(tot);
      free(sums);
      return 2;
    }
    if (sums) sums[k] = (uint64_t)run;
    q->lb = ST_MAX(q->lb, (uint64_t)run);
  }
  free(tot);
  bool ok = !item_max || range_maxima(p, q, sums, ns, item_max);
  free(sums);
  return ok ? 0 : 1;
}

/* Past the placer's deadline, with a placement of the partition in hand. */
static bool late(const placer* p, const part* q) {
  return q->peak != UINT64_MAX && p->deadline > 0 && st_now() > p->deadline;
}

static stalloc_status_t construct(placer* p, part* q) {
  size_t m = q->e - q->b;
  int rc = 0;
  if (m > GREEDY_MAX) {
    if ((rc = section_totals(p, q, NULL))) goto failed;
    stalloc_status_t st = sweep_place(p, q->b, q->e, &q->peak);
    if (st) return st;
    memcpy(p->off + q->b, p->tmp + q->b, m * sizeof(uint64_t));
    p->res->orderings_tried++;
    return STALLOC_OK;
  }
  uint64_t* item_max = malloc(m * sizeof(uint64_t));
  if (!item_max || (rc = section_totals(p, q, item_max))) {
    free(item_max);
    goto failed;
  }
  q->peak = UINT64_MAX;
  /* Past the deadline, the first ordering only: a peeled split's groups (place_peel.c), each
   * of up to GREEDY_MAX items, took their ten quadratic passes with no time left, and the call
   * ran 0.5 s past a 0.1 s share (the held-out foreach t5_accumvar: 5.4 s for a 5 s limit). */
  for (int how = 0; how < ORD_COUNT && !late(p, q); how++) {
    if (!make_order(p, q->b, q->e, how, item_max)) {
      free(item_max);
      goto nomem;
    }
    for (int bf = 0; bf < 2 && !late(p, q); bf++) {
      uint64_t pk = greedy(p, m, bf, 0);
      p->res->orderings_tried++;
      if (pk < q->peak) {
        q->peak = pk;
        memcpy(p->off + q->b, p->tmp + q->b, m * sizeof(uint64_t));
      }
    }
  }
  free(item_max);
  return STALLOC_OK;
failed:
  if (rc == 2)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                   "placement: more than 2^64 - 1 bytes are live at once; no placement fits");
nomem:
  return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement: no memory for a partition of %zu items", m);
}

/* Peeling tries (place_peel.c): what lives to the partition's end; then also what crosses a
 * thin cut (a point in time that at most lb >> cut_shift bytes of the rest cross: between two
 * steps chained only by a loss scalar); then what lives at least span / divisor time points
 * (items chaining the steps: an input batch, a pipeline's stashed activations). Each try
 * splits the rest into other groups. The first PEEL_FIRST go before the search. */
typedef struct peel_try {
  uint32_t divisor;
  uint32_t cut_shift;
} peel_try;
static const peel_try peel_list[] = {{0, 0},  {0, 10}, {8, 0},  {4, 0},  {16, 0}, {2, 0}, {0, 6},
                                     {32, 0}, {3, 0},  {64, 0}, {6, 0},  {12, 0}, {0, 14}};
enum { PEEL_TRIES = sizeof peel_list / sizeof peel_list[0], PEEL_FIRST = 3 };

typedef struct peel_arrays {
  uint32_t *lo, *hi;
  uint64_t *size, *off;
} peel_arrays;

/* Peeling tries [from, to) while the bound is not met and time is left before `until`; where
 * none of them can reach the partition's bound, also a later try, not run yet, that can (the
 * full-size mixtral_1f1b_recompute's is the fourth: run last, it had 2 s for its groups'
 * searches and stopped at 1.0036). A try is not run twice on a partition. Each
 * try is probed first (its split, without placing): one whose bound cannot beat the peak
 * (with `around`, its own bound; else the one with every group on its floor), or splits
 * as an earlier one did, is dropped; the rest go lowest bound first (rank_before), and on a
 * tie the one whose largest group is smallest (the groups' searches are what take time). The first gets
 * most of the time, the others equal shares of what is left. `phase` (0..1] is the part of the
 * time to `until` the tries may take; a first try whose split can reach the partition's bound
 * (its groups on their floors are no higher) takes nine tenths of all of it instead: it is the
 * one most likely to find the optimum, and its groups' searches need the time. */
typedef struct peel_rank {
  int index; /* in peel_list */
  uint32_t min_len;
  uint64_t cut_bytes;
  st_peel_probe probe;
} peel_rank;

/* Lowest bound with every group on its floor first (a split whose groups go around their L
 * items reaches its own bound less easily: st_peel_probe); but among bounds within the same
 * 1/4096 of the partition's bound lb, a split whose groups the search can each take before one
 * whose largest group must be split again (a held-out T5 curriculum run: what lives to the
 * end, 768 bytes over the bound, left one group of 21,373 items that took 1.5 s to split again
 * as the thin cuts split it at once, 1,088 bytes over, which then had 1 s for the search its
 * 1,940-item steps need). */
static bool rank_before(const peel_rank* x, const peel_rank* y, uint64_t lb) {
  uint64_t slice = ST_MAX(lb >> 12, 1), fx = x->probe.floor_bound, fy = y->probe.floor_bound;
  /* a bound below lb (wrapped sums of fuzzed sizes) counts as lb's slice */
  uint64_t bx = fx > lb ? (fx - lb) / slice : 0;
  uint64_t by = fy > lb ? (fy - lb) / slice : 0;
  bool sx = x->probe.largest <= SEARCH_MAX, sy = y->probe.largest <= SEARCH_MAX;
  if (bx != by) return bx < by;
  if (sx != sy) return sx;
  return fx < fy || (fx == fy && x->probe.largest < y->probe.largest);
}

/* Try a's parameters on partition q. */
static peel_rank peel_params(const part* q, int a) {
  uint32_t span = q->thi - q->tlo, d = peel_list[a].divisor;
  return (peel_rank){.index = a, .min_len = d ? (span / d ? span / d : 1) : 0,
                     .cut_bytes = peel_list[a].cut_shift ? ST_MAX(q->lb >> peel_list[a].cut_shift, 1) : 0};
}

static void peel_tries(placer* p, part* q, const peel_arrays* pa, int from, int to, double until,
                       double phase, bool around) {
  size_t m = q->e - q->b;
  peel_rank r[PEEL_TRIES];
  int n = 0, nran = 0;
  /* The splits of the tries run before: a try that splits as one of them did is not run (on a
   * held-out Mixtral accumvar run, keeping what lives a quarter of the span split as keeping
   * what lives to the end did, and took 1.5 s of 5 again) */
  st_peel_probe ran[PEEL_TRIES];
  for (int a = 0; a < PEEL_TRIES && q->peels_run; a++) {
    if (!(q->peels_run >> a & 1)) continue;
    if (st_now() >= until || st_cancel_requested(p->cancel)) return;
    peel_rank t = peel_params(q, a);
    nran += st_place_peel_probe(pa->lo, pa->hi, pa->size, m, t.min_len, t.cut_bytes, &ran[nran]);
  }
  for (int a = from; a < PEEL_TRIES; a++) {
    if (st_now() >= until || st_cancel_requested(p->cancel)) return;
    /* past `to`, only while none so far can reach the bound, and only one that can */
    bool later = a >= to;
    if ((later && n && r[0].probe.floor_bound <= q->lb) || (q->peels_run >> a & 1)) continue;
    peel_rank t = peel_params(q, a);
    if (!st_place_peel_probe(pa->lo, pa->hi, pa->size, m, t.min_len, t.cut_bytes, &t.probe) ||
        (around ? t.probe.bound : t.probe.floor_bound) >= q->peak || (later && t.probe.floor_bound > q->lb))
      continue;
    bool seen = false;
    for (int k = 0; k < n + nran && !seen; k++) {
      const st_peel_probe* o = k < n ? &r[k].probe : &ran[k - n];
      seen = o->bound == t.probe.bound && o->floor_bound == t.probe.floor_bound && o->groups == t.probe.groups &&
             o->largest == t.probe.largest;
    }
    if (seen) continue;
    int k = n++;
    for (; k > 0 && rank_before(&t, &r[k - 1], q->lb); k--) r[k] = r[k - 1];
    r[k] = t;
  }
  bool promising = n && r[0].probe.floor_bound <= q->lb;
  double end = promising ? until : st_now() + (until - st_now()) * phase;
  for (int k = 0; k < n && q->peak > q->lb; k++) {
    double left = end - st_now();
    if (left <= 0 || st_cancel_requested(p->cancel)) return;
    double share = k == 0 && n > 1 ? left * (promising ? 0.9 : 0.6) : left / (double)(n - k);
    q->peels_run |= 1u << r[k].index;
    uint64_t pk = 0;
    bool found = st_place_peel(pa->lo, pa->hi, pa->size, m, r[k].min_len, r[k].cut_bytes, q->peak,
                               p->align, share, p->cancel, pa->off, &pk);
    p->res->orderings_tried++;
    if (found && pk < q->peak) {
      q->peak = pk;
      memcpy(p->off + q->b, pa->off, m * sizeof(uint64_t));
    }
  }
}

static bool peel_setup(placer* p, const part* q, peel_arrays* pa) {
  size_t m = q->e - q->b;
  pa->lo = malloc(m * sizeof(uint32_t));
  pa->hi = malloc(m * sizeof(uint32_t));
  pa->size = malloc(m * sizeof(uint64_t));
  pa->off = malloc(m * sizeof(uint64_t));
  if (!pa->lo || !pa->hi || !pa->size || !pa->off) return false;
  for (size_t j = 0; j < m; j++) {
    pa->lo[j] = p->it[q->b + j].lo - q->tlo;
    pa->hi[j] = p->it[q->b + j].hi - q->tlo;
    pa->size[j] = p->it[q->b + j].size;
  }
  return true;
}

static void peel_free(peel_arrays* pa) {
  free(pa->lo);
  free(pa->hi);
  free(pa->size);
  free(pa->off);
}

static bool peelable(const part* q) {
  return !q->nfixed && q->peak > q->lb && q->e - q->b > GREEDY_MAX && q->e - q->b <= PEEL_MAX;
}

/* A large partition (over GREEDY_MAX items) with time to spare until `until`, while it is
 * above its bound: the first half goes to peeling (the first PEEL_FIRST tries); then, up to
 * GREEDY_BIG items, greedy orderings, by section total first (MiniMalloc's strongest key: on
 * the steps of a full-size MoE pipeline run, 4,700 items each after peeling, 0.2-0.3% above
 * their bound where the other orderings are 1-4%; a time limit only), each only if the last
 * one's duration still fits before `until`. The other peeling tries come last (peel_more),
 * once the search has had its turn. */
static stalloc_status_t improve_big(placer* p, part* q, double until) {
  size_t m = q->e - q->b;
  if (peelable(q) && !p->every_ordering) { /* peeling watches the clock */
    peel_arrays pa = {0};
    bool ok = peel_setup(p, q, &pa);
    if (ok) peel_tries(p, q, &pa, 0, PEEL_FIRST, until, 0.5, false);
    peel_free(&pa);
    if (!ok) goto nomem;
  }
  if (m > GREEDY_BIG) return STALLOC_OK;
  /* Not for the layout hints' every_ordering: there the section total made the full-size
   * Mixtral pipeline steps' layouts map fewer granules at new addresses but cost 10 MiB more
   * (bench_online.py at 32x, tools/make_traces.py --seed 67: mixtral_1f1b 26.17 -> 32.17). */
  uint64_t* item_max = p->every_ordering ? NULL : malloc(m * sizeof *item_max);
  if (item_max && section_totals(p, q, item_max)) { /* its sums fit (construct ran them): no memory */
    free(item_max);
    item_max = NULL;
  }
  /* With a time limit, the first three passes only: over 78 whole runs (the held-out foreach
   * `--small` set and the full-size seed-67 one, 5 s each) the others lowered a large
   * partition's peak once, by 16 bytes, and each took 0.1-0.6 s that the searches of peeled
   * groups need. */
  static const struct {
    int how;
    bool best_fit;
  } passes[] = {{ORD_TOTAL, false},  {ORD_TOTAL, true}, {ORD_SIZE, false}, {ORD_SIZE, true},
                {ORD_LENGTH, false}, {ORD_LENGTH, true}, {ORD_AREA, false}, {ORD_AREA, true},
                {ORD_START, false},  {ORD_START, true}};
  int first = item_max ? 0 : 2; /* without memory for the section-total key, the others */
  int end = p->every_ordering ? (int)(sizeof passes / sizeof passes[0]) : 3;
  double last = 0;
  for (int k = first; k < end; k++) {
    double t = st_now();
    if ((!p->every_ordering && t + last >= until) || q->peak <= q->lb || st_cancel_requested(p->cancel))
      break;
    if ((k == first || passes[k].how != passes[k - 1].how) && !make_order(p, q->b, q->e, passes[k].how, item_max)) {
      free(item_max);
      goto nomem;
    }
    uint64_t pk = greedy(p, m, passes[k].best_fit, p->every_ordering ? 0 : until);
    last = st_now() - t;
    p->res->orderings_tried++;
    if (pk < q->peak) {
      q->peak = pk;
      memcpy(p->off + q->b, p->tmp + q->b, m * sizeof(uint64_t));
    }
  }
  free(item_max);
  return STALLOC_OK;
nomem:
  return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement: no memory for a partition of %zu items", m);
}

/* The partition with the highest peak (the first on a tie), or NULL for none. */
static part* worst_part(part* parts, size_t np) {
  part* worst = NULL;
  for (size_t k = 0; k < np; k++)
    if (!worst || parts[k].peak > worst->peak) worst = &parts[k];
  return worst;
}

/* The exact search can work on it: not too many items, not given up on, and not so many
 * fixed items live with the free ones that listing each one's obstacles would cost more than
 * the search gains. */
static bool searchable(const part* q) {
  size_t m = q->e - q->b;
  return m <= SEARCH_MAX && !q->exhausted && (uint64_t)q->nfixed * (m - q->nfixed) <= OBSTACLE_PAIRS;
}

/* Time left after the search: the large partition that sets the peak gets the other peeling
 * tries (other splits into groups) until the deadline, and those of the first ones that beat
 * the peak only with groups around their L items (place_peel.c, close_group). Before the
 * greedy passes and the search such a split could cost their time for nothing: the shipped
 * llama_plain spent 2.4 s in one that looked able to reach the bound and stayed 256 bytes
 * over, and the greedy pass after it placed the run at its bound. */
static stalloc_status_t peel_more(placer* p, part* parts, size_t np) {
  part* worst = worst_part(parts, np);
  if (!worst || !peelable(worst) || st_now() >= p->deadline) return STALLOC_OK;
  peel_arrays pa = {0};
  bool ok = peel_setup(p, worst, &pa);
  if (ok) peel_tries(p, worst, &pa, 0, PEEL_TRIES, p->deadline, 1.0, true);
  peel_free(&pa);
  return ok ? STALLOC_OK
            : st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement: no memory for a partition of %zu items",
                      worst->e - worst->b);
}

static stalloc_status_t search_setup(placer* p, part* q) {
  size_t m = q->e - q->b;
  uint32_t* slo = malloc(m * sizeof(uint32_t));
  uint32_t* shi = malloc(m * sizeof(uint32_t));
  uint64_t* size = malloc(m * sizeof(uint64_t));
  uint64_t* len = malloc(m * sizeof(uint64_t));
  /* the fixed items, for the search's obstacles (copied by it) */
  uint32_t* fslo = malloc(m * sizeof(uint32_t));
  uint32_t* fshi = malloc(m * sizeof(uint32_t));
  uint64_t* foff = malloc(m * sizeof(uint64_t));
  uint64_t* fsize = malloc(m * sizeof(uint64_t));
  q->sol = malloc(m * sizeof(uint64_t));
  q->free_keep = malloc(m * sizeof(uint32_t));
  q->free_sol = malloc(m * sizeof(uint64_t));
  stalloc_status_t st = STALLOC_OK;
  if (!slo || !shi || !size || !len || !fslo || !fshi || !foff || !fsize || !q->sol || !q->free_keep ||
      !q->free_sol) {
    st = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement: no memory for the search");
  } else {
    uint32_t nf = 0, nx = 0;
    for (size_t j = 0; j < m; j++) {
      const pitem* x = &p->it[q->b + j];
      q->sol[j] = x->fixed; /* the search fills in the others */
      if (x->fixed != PLACE_FREE) {
        fslo[nx] = x->lo - q->tlo;
        fshi[nx] = x->hi - q->tlo;
        foff[nx] = x->fixed;
        fsize[nx++] = x->size;
        continue;
      }
      q->free_keep[nf] = (uint32_t)j;
      slo[nf] = x->lo - q->tlo;
      shi[nf] = x->hi - q->tlo;
      size[nf] = x->size;
      len[nf++] = x->length;
    }
    q->nfree = nf;
    st_search_input in = {nf, q->thi - q->tlo, size, slo, shi, len, p->align, p->lean,
                          nx, foff, fsize, fslo, fshi};
    st = st_search_create(&in, &q->search);
    /* the search keeps pointers to the free items' arrays: they live as long as it */
  }
  free(fslo); free(fshi); free(foff); free(fsize);
  if (st) {
    free(slo); free(shi); free(size); free(len);
    free(q->sol);
    free(q->free_keep);
    free(q->free_sol);
    q->sol = NULL;
    q->free_keep = NULL;
    q->free_sol = NULL;
    return st;
  }
  q->node_limit = 2 * (uint64_t)m;
  q->attempt = 0;
  q->step_shift = 1;
  free(len); /* only read at creation (preorder keys) */
  /* slo, shi and size stay referenced by the search */
  q->slo_keep = slo;
  q->shi_keep = shi;
  q->size_keep = size;
  return STALLOC_OK;
}

static void part_free(part* q) {
  st_search_destroy(q->search);
  free(q->sol);
  free(q->free_keep);
  free(q->free_sol);
  free(q->slo_keep);
  free(q->shi_keep);
  free(q->size_keep);
}

/* ---- the kin board: partitions' best placements, shared by the portfolio's threads ----- */

/* Each thread keeps its own placements; partitions with kin (find_kin) also post each new best
 * here, so that a partition one thread settled lends its order to the kin the other thread
 * searches (the held-out T5 curriculum run: the main thread placed one 1,940-item step at its
 * bound in 0.3 s while the other thread searched its alike steps for 2 s more, 28 KB over). */
typedef struct kin_board {
  pthread_mutex_t lock;
  uint64_t* off;           /* per active item: the best offsets posted for its partition */
  uint64_t* peak;          /* per partition: the best peak posted */
  uint64_t* at;            /* per partition: the stamp of its last post (0: its construction's) */
  _Atomic uint64_t stamp;  /* posts so far: borrow_kin's clock */
} kin_board;

static void board_free(kin_board* b) {
  if (!b) return;
  pthread_mutex_destroy(&b->lock);
  free(b->off);
  free(b->peak);
  free(b->at);
  free(b);
}

/* The board for the partitions' placements so far; NULL without memory or without kin. */
static kin_board* board_create(const placer* p, const part* parts, size_t np) {
  bool any = false;
  for (size_t k = 0; k < np && !any; k++) any = parts[k].kin_count > 0;
  kin_board* b = any ? calloc(1, sizeof *b) : NULL;
  if (!b) return NULL;
  b->off = malloc((p->n ? p->n : 1) * sizeof *b->off);
  b->peak = malloc((np ? np : 1) * sizeof *b->peak);
  b->at = calloc(np ? np : 1, sizeof *b->at);
  if (!b->off || !b->peak || !b->at || pthread_mutex_init(&b->lock, NULL) != 0) {
    free(b->off);
    free(b->peak);
    free(b->at);
    free(b);
    return NULL;
  }
  memcpy(b->off, p->off, p->n * sizeof *b->off);
  for (size_t k = 0; k < np; k++) b->peak[k] = parts[k].peak;
  atomic_init(&b->stamp, 0);
  return b;
}

/* q's placement in p->off is a new best of this thread's: posted if it beats the board's. */
static void board_post(placer* p, const part* parts, const part* q) {
  kin_board* b = p->board;
  size_t k = (size_t)(q - parts);
  if (!b || !q->kin_count) return;
  pthread_mutex_lock(&b->lock);
  if (q->peak < b->peak[k]) {
    memcpy(b->off + q->b, p->off + q->b, (q->e - q->b) * sizeof *b->off);
    b->peak[k] = q->peak;
    b->at[k] = atomic_fetch_add(&b->stamp, 1) + 1;
  }
  pthread_mutex_unlock(&b->lock);
}

/* One search attempt on the partition that sets the peak. Attempts alternate between the
 * lowest capacity not yet ruled out and the midpoint towards the best found (so the peak
 * improves even when the bound is out of reach), cycling through the preorderings; each
 * full cycle doubles the node limit, as MiniMalloc's round robin does. */
static stalloc_status_t search_step(placer* p, const part* parts, part* q, uint64_t goal, bool* stop) {
  if (!q->search) {
    stalloc_status_t st = search_setup(p, q);
    if (st) return st;
  }
  uint64_t lo = ST_MAX(goal, q->proven);
  if (q->peak <= lo) {
    q->exhausted = true;
    return STALLOC_OK;
  }
  int h = (int)(q->attempt / 2 % (uint32_t)p->heuristics);
  bool mid = q->attempt % 2 == 1;
  /* improving attempts aim half the gap below the best, then closer after each failure */
  uint64_t gap = q->peak - 1 - lo;
  uint64_t target = mid ? q->peak - 1 - (q->step_shift < 64 ? gap >> q->step_shift : 0) : lo;
  if (++q->attempt % (2 * (uint32_t)p->heuristics) == 0) q->node_limit *= 2;
  size_t m = q->e - q->b;
  p->res->orderings_tried++;
  st_search_outcome r = st_search_run(q->search, target, h, q->node_limit, p->deadline,
                                      p->cancel, p->stop, q->free_sol, &p->res->backtracks);
  switch (r) {
    case ST_SEARCH_FOUND: {
      for (uint32_t k = 0; k < q->nfree; k++) q->sol[q->free_keep[k]] = q->free_sol[k];
      uint64_t pk = 0;
      for (size_t j = 0; j < m; j++) pk = ST_MAX(pk, q->sol[j] + p->it[q->b + j].size);
      if (pk < q->peak) {
        q->peak = pk;
        memcpy(p->off + q->b, q->sol, m * sizeof(uint64_t));
        board_post(p, parts, q);
      }
      q->step_shift = 1;
      /* a new best is a new problem: start its attempts small again */
      q->node_limit = ST_MAX(2 * (uint64_t)m, q->node_limit / 4);
      break;
    }
    case ST_SEARCH_NONE: /* a complete search: nothing fits in target */
      if (target + 1 > q->proven) q->proven = target + 1;
      q->step_shift = 1;
      break;
    case ST_SEARCH_ABORTED:
      if (mid) q->step_shift++;
      break;
    case ST_SEARCH_STOPPED: *stop = true; break;
    case ST_SEARCH_NOMEM: q->exhausted = true; break; /* keep what we have */
  }
  return STALLOC_OK;
}

typedef struct twin_key {
  uint64_t hash;
  size_t part;
} twin_key;

static int cmp_twin_key(const void* a, const void* b) {
  const twin_key *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return (x->part > y->part) - (x->part < y->part);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* Partitions a and b are the same problem shifted in time (items sorted by start, then by the
 * caller's order, so the steps of a dense run line up item for item). */
static bool same_problem(const placer* p, const part* a, const part* b) {
  if (a->e - a->b != b->e - b->b || a->thi - a->tlo != b->thi - b->tlo) return false;
  for (size_t j = 0; j < a->e - a->b; j++) {
    const pitem *x = &p->it[a->b + j], *y = &p->it[b->b + j];
    if (x->lo - a->tlo != y->lo - b->tlo || x->hi - a->tlo != y->hi - b->tlo || x->size != y->size ||
        x->fixed != y->fixed)
      return false;
  }
  return true;
}

/* The partitions the search would work on that repeat an earlier one (the steps of a dense run,
 * apart after peeling): each is marked with the first, is not searched, and takes its placement
 * after (take_twins). false: no memory (then no partition is a twin). */
static bool find_twins(placer* p, part* parts, size_t np, uint64_t goal) {
  twin_key* k = malloc((np ? np : 1) * sizeof *k);
  if (!k) return false;
  size_t nk = 0;
  for (size_t q = 0; q < np; q++) {
    part* c = &parts[q];
    if (c->peak <= goal || !searchable(c)) continue;
    uint64_t h = mix(c->e - c->b, c->thi - c->tlo);
    for (size_t i = c->b; i < c->e; i++) {
      const pitem* x = &p->it[i];
      h = mix(mix(mix(mix(h, x->lo - c->tlo), x->hi - c->tlo), x->size), x->fixed);
    }
    k[nk++] = (twin_key){h, q};
  }
  st_sort(k, nk, sizeof *k, cmp_twin_key);
  for (size_t a = 0; a < nk;) {
    size_t end = a + 1;
    while (end < nk && k[end].hash == k[a].hash) end++;
    for (size_t i = a + 1; i < end; i++) /* the first earlier one of the run that matches */
      for (size_t j = a; j < i; j++)
        if (parts[k[j].part].twin < 0 && same_problem(p, &parts[k[j].part], &parts[k[i].part])) {
          parts[k[i].part].twin = (int64_t)k[j].part;
          break;
        }
    a = end;
  }
  free(k);
  return true;
}

/* Each twin takes its first's placement where that is lower (the partitions share no time). */
static void take_twins(placer* p, part* parts, size_t np) {
  for (size_t q = 0; q < np; q++) {
    part *c = &parts[q], *first = c->twin >= 0 ? &parts[c->twin] : NULL;
    if (!first) continue;
    if (first->peak < c->peak) {
      memcpy(p->off + c->b, p->off + first->b, (c->e - c->b) * sizeof(uint64_t));
      c->peak = first->peak;
    }
    c->proven = ST_MAX(c->proven, first->proven);
  }
}

/* ---- kin: partitions of the same size that lend each other their placements ---------- */

/* Partitions with this many items or more (and searchable ones: at most SEARCH_MAX) have kin;
 * smaller ones the search settles in a few nodes. */
#define KIN_MIN 64
/* A partition borrows from at most this many kin at a time. */
#define KIN_TRIES 4

typedef struct kin_key {
  size_t items, nfixed;
  uint32_t part;
} kin_key;

static int cmp_kin_key(const void* a, const void* b) {
  const kin_key *x = a, *y = b;
  if (x->items != y->items) return x->items < y->items ? -1 : 1;
  if (x->nfixed != y->nfixed) return x->nfixed < y->nfixed ? -1 : 1;
  return (x->part > y->part) - (x->part < y->part);
}

/* Groups the partitions with as many items and fixed items as another (the steps of a run,
 * apart after peeling) in p->kin. false: no memory (then none has kin). */
static bool find_kin(placer* p, part* parts, size_t np) {
  kin_key* k = malloc((np ? np : 1) * sizeof *k);
  p->kin = malloc((np ? np : 1) * sizeof *p->kin);
  if (!k || !p->kin) {
    free(k);
    free(p->kin);
    p->kin = NULL;
    return false;
  }
  size_t nk = 0;
  for (size_t q = 0; q < np; q++) {
    size_t m = parts[q].e - parts[q].b;
    if (m >= KIN_MIN && m <= SEARCH_MAX) k[nk++] = (kin_key){m, parts[q].nfixed, (uint32_t)q};
  }
  st_sort(k, nk, sizeof *k, cmp_kin_key);
  for (size_t a = 0, end; a < nk; a = end) {
    for (end = a + 1; end < nk && k[end].items == k[a].items && k[end].nfixed == k[a].nfixed; end++) {}
    for (size_t i = a; i < end; i++) {
      p->kin[i] = k[i].part;
      parts[k[i].part].kin_at = (uint32_t)a;
      parts[k[i].part].kin_count = end - a > 1 ? (uint32_t)(end - a) : 0;
    }
  }
  free(k);
  return true;
}

/* q takes, where lower, the placement that first fit gives its items in the order of a kin's
 * offsets (q's item j where the kin's item j went; both sorted by start). The steps of a run
 * that repeats can differ only in when some blocks are freed (a first step that runs longer)
 * or in a floor a few bytes higher after peeling: other problems to the search, which reached
 * one step's bound in 0.4 s and not the next one's in 20 s (the held-out T5 runs, 1,940 items),
 * where the first step's order places the next at its bound. Kin lent from (their best on the
 * board, either thread's): those nearer their own bound than q is to its own whose peak fell
 * since this thread last borrowed for q, the nearest KIN_TRIES. */
static void borrow_kin(placer* p, const part* parts, part* q) {
  kin_board* b = p->board;
  size_t m = q->e - q->b;
  uint32_t from[KIN_TRIES];
  uint64_t gaps[KIN_TRIES];
  int nf = 0;
  pthread_mutex_lock(&b->lock);
  uint64_t now = atomic_load(&b->stamp);
  for (uint32_t a = q->kin_at; a < q->kin_at + q->kin_count; a++) {
    uint32_t s = p->kin[a];
    uint64_t gap = b->peak[s] - parts[s].lb;
    if (&parts[s] == q || gap >= q->peak - q->lb || b->at[s] < q->borrowed_at ||
        (nf == KIN_TRIES && gap >= gaps[nf - 1]))
      continue;
    int k = nf < KIN_TRIES ? nf++ : KIN_TRIES - 1; /* from[] stays nearest first */
    for (; k > 0 && gaps[k - 1] > gap; k--) {
      from[k] = from[k - 1];
      gaps[k] = gaps[k - 1];
    }
    from[k] = s;
    gaps[k] = gap;
  }
  pthread_mutex_unlock(&b->lock);
  /* posts from now on are new to q (its own included: the next borrow finds nothing new) */
  q->borrowed_at = now + 1;
  uint64_t* key = nf ? malloc(m * sizeof *key) : NULL; /* descending: the lowest offset first */
  for (int f = 0; key && f < nf && q->peak > q->lb; f++) {
    pthread_mutex_lock(&b->lock); /* the other thread may post a better one meanwhile */
    const uint64_t* o = b->off + parts[from[f]].b;
    for (size_t j = 0; j < m; j++) key[j] = UINT64_MAX - 1 - ST_MIN(o[j], UINT64_MAX - 1);
    pthread_mutex_unlock(&b->lock);
    if (!make_order(p, q->b, q->e, ORD_GIVEN, key)) break; /* no memory: q keeps its placement */
    uint64_t pk = greedy(p, m, false, p->deadline);
    p->res->orderings_tried++;
    if (pk < q->peak) {
      q->peak = pk;
      memcpy(p->off + q->b, p->tmp + q->b, m * sizeof(uint64_t));
      board_post(p, parts, q);
    }
  }
  free(key); /* without memory, q keeps its placement */
}

/* Partition k is done: at its goal or proven, here or (p->solved) by the other thread, or it
 * takes its twin's placement. */
static bool part_done(const placer* p, const part* parts, size_t k, uint64_t goal) {
  return parts[k].twin >= 0 || parts[k].peak <= ST_MAX(goal, parts[k].proven) ||
         (p->solved && atomic_load_explicit(&p->solved[k], memory_order_relaxed));
}

static stalloc_status_t improve(placer* p, part* parts, size_t np, uint64_t goal, bool* optimal) {
  *optimal = false;
  for (;;) {
    bool other_done = p->stop && atomic_load_explicit(p->stop, memory_order_relaxed);
    if (st_cancel_requested(p->cancel) || other_done || st_now() >= p->deadline)
      return STALLOC_OK;
    part* worst = NULL; /* the highest peak among the partitions not done */
    for (size_t k = 0; k < np; k++)
      if (!part_done(p, parts, k, goal) && (!worst || parts[k].peak > worst->peak)) worst = &parts[k];
    if (!worst) {
      *optimal = true;
      if (p->stop) atomic_store(p->stop, 1); /* the other thread cannot do better */
      return STALLOC_OK;
    }
    if (!searchable(worst)) return STALLOC_OK;
    /* Several partitions above the goal (the steps of a whole run): each thread takes its own
     * first, so the two search different ones; then it helps with the other's. */
    part* q = worst;
    for (size_t k = 0; k < np && p->turn >= 0; k++) {
      part* c = &parts[k];
      if (c->turn == p->turn && !part_done(p, parts, k, goal) && searchable(c) &&
          (q == worst || c->peak > q->peak))
        q = c;
    }
    if (p->board && q->kin_count && q->borrowed_at != atomic_load(&p->board->stamp) + 1) {
      borrow_kin(p, parts, q);
      if (q->peak <= goal) {
        if (p->solved) atomic_store_explicit(&p->solved[q - parts], 1, memory_order_relaxed);
        continue;
      }
    }
    bool stop = false;
    stalloc_status_t st = search_step(p, parts, q, goal, &stop);
    if (p->solved && q->peak <= ST_MAX(goal, q->proven))
      atomic_store_explicit(&p->solved[q - parts], 1, memory_order_relaxed);
    if (st || stop) return st;
  }
}

/* The search's progress is erratic: which preordering finds the next improvement varies from
 * instance to instance. A second thread runs the same loop with only MiniMalloc's three
 * preorderings, and each partition keeps the better of the two placements. */
typedef struct portfolio_arg {
  placer p;
  st_place_result res;
  part* parts;
  size_t np;
  uint64_t goal;
  bool optimal;
  stalloc_status_t st;
} portfolio_arg;

static void* portfolio_main(void* a) {
  portfolio_arg* w = a;
  w->st = improve(&w->p, w->parts, w->np, w->goal, &w->optimal);
  return NULL;
}

static stalloc_status_t improve_portfolio(placer* p, part* parts, size_t np, uint64_t goal,
                                          bool* optimal) {
  /* Worth a thread only if the partition that sets the peak can be searched. */
  part* worst = worst_part(parts, np);
  portfolio_arg* w = worst && searchable(worst) && worst->peak > goal ? calloc(1, sizeof *w) : NULL;
  atomic_int stop = 0;
  atomic_uchar* solved = w ? calloc(np ? np : 1, sizeof *solved) : NULL;
  if (w && solved) {
    for (size_t k = 0; k < np; k++) atomic_init(&solved[k], 0);
    p->solved = solved;
  }
  if (w) {
    /* turns by rank of peak among the partitions the search can lower: 0, 1, 0, 1, ... */
    for (size_t k = 0; k < np; k++) parts[k].turn = -1;
    for (int rank = 0;; rank++) {
      part* next = NULL;
      for (size_t k = 0; k < np; k++) {
        part* c = &parts[k];
        if (c->turn < 0 && c->twin < 0 && c->peak > goal && searchable(c) && (!next || c->peak > next->peak))
          next = c;
      }
      if (!next) break;
      next->turn = rank % 2;
    }
    p->stop = &stop;
    p->turn = 0;
    w->p = *p;
    w->p.heuristics = 3;
    w->p.turn = 1;
    w->p.lean = true;
    w->p.res = &w->res;
    w->p.off = malloc((p->n ? p->n : 1) * sizeof(uint64_t));
    /* scratch of its own for borrow_kin's first fit */
    w->p.tmp = malloc((p->n ? p->n : 1) * sizeof(uint64_t));
    w->p.order = malloc((ST_MIN(p->n, GREEDY_BIG) + 1) * sizeof(uint32_t));
    w->p.plist = malloc((ST_MIN(p->n, GREEDY_BIG) + 1) * sizeof(uint32_t));
    w->parts = malloc((np ? np : 1) * sizeof(part));
    w->np = np;
    w->goal = goal;
    if (w->p.off && w->p.tmp && w->p.order && w->p.plist && w->parts) {
      memcpy(w->p.off, p->off, p->n * sizeof(uint64_t));
      memcpy(w->parts, parts, np * sizeof(part));
    }
  }
  pthread_t tid;
  bool threaded = w && w->p.off && w->p.tmp && w->p.order && w->p.plist && w->parts &&
                  pthread_create(&tid, NULL, portfolio_main, w) == 0;
  stalloc_status_t st = improve(p, parts, np, goal, optimal);
  if (threaded) {
    pthread_join(tid, NULL);
    if (!st && !w->st) {
      for (size_t k = 0; k < np; k++) {
        part *a = &parts[k], *b = &w->parts[k];
        if (b->peak < a->peak) {
          a->peak = b->peak;
          memcpy(p->off + a->b, w->p.off + a->b, (a->e - a->b) * sizeof(uint64_t));
        }
        a->proven = ST_MAX(a->proven, b->proven);
      }
      *optimal = *optimal || w->optimal;
    }
    if (!st) st = w->st;
    p->res->orderings_tried += w->res.orderings_tried;
    p->res->backtracks += w->res.backtracks;
    for (size_t k = 0; k < np; k++) part_free(&w->parts[k]);
  }
  p->stop = NULL;
  p->solved = NULL;
  free(solved);
  p->turn = -1;
  if (w) {
    free(w->p.off);
    free(w->p.tmp);
    free(w->p.order);
    free(w->p.plist);
    free(w->parts);
    free(w);
  }
  return st;
}

stalloc_status_t st_place(const st_place_item* items, size_t n, const st_place_params* params,
                          uint64_t* offsets, st_place_result* result) {
  double t0 = st_now();
  st_place_result res_local;
  st_place_result* res = result ? result : &res_local;
  memset(res, 0, sizeof *res);
  if (n && (!items || !offsets))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "placement: items and offsets must not be NULL");
  if (n > UINT32_MAX / 2)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "placement: %zu items is too many", n);
  uint64_t align = params && params->alignment ? params->alignment : 1;
  double limit = params ? params->time_limit : 0.0;
  if (!(limit >= 0.0)) /* also catches NaN */
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "placement: time_limit must be >= 0");

  /* Check every item and count the active ones (bytes live for a non-empty time). */
  size_t na = 0;
  for (size_t i = 0; i < n; i++) {
    const st_place_item* x = &items[i];
    if (x->upper < x->lower)
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "placement: item %zu: upper %llu < lower %llu",
                     i, (unsigned long long)x->upper, (unsigned long long)x->lower);
    uint64_t sz = round_up(x->size, align);
    if (sz < x->size)
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "placement: item %zu: size %llu overflows when aligned",
                     i, (unsigned long long)x->size);
    if (x->fixed_offset != PLACE_FREE && x->fixed_offset > UINT64_MAX - sz - 1)
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "placement: item %zu: fixed offset + size overflows", i);
    if (x->size && x->upper > x->lower) na++;
  }

  placer P = {0};
  placer* p = &P;
  p->align = align;
  p->heuristics = ST_SEARCH_HEURISTICS;
  p->turn = -1;
  p->cancel = params ? params->cancel : NULL;
  p->every_ordering = params && params->every_ordering && !(params->time_limit > 0.0);
  p->res = res;
  stalloc_status_t st = STALLOC_OK;
  part* parts = NULL;
  size_t nparts = 0;
  uint64_t* pts = NULL;
  p->it = malloc((na ? na : 1) * sizeof(pitem));
  pts = malloc((2 * na + 1) * sizeof(uint64_t));
  if (!p->it || !pts) goto nomem;

  /* Compress time to the distinct endpoints, so sections are consecutive integers. */
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const st_place_item* x = &items[i];
    if (!(x->size && x->upper > x->lower)) continue;
    pts[2 * k] = x->lower;
    pts[2 * k + 1] = x->upper;
    k++;
  }
  st_sort(pts, 2 * na, sizeof(uint64_t), cmp_u64);
  size_t npts = 0;
  for (size_t j = 0; j < 2 * na; j++)
    if (npts == 0 || pts[npts - 1] != pts[j]) pts[npts++] = pts[j];
  k = 0;
  for (size_t i = 0; i < n; i++) {
    const st_place_item* x = &items[i];
    if (!(x->size && x->upper > x->lower)) continue;
    pitem* y = &p->it[k++];
    size_t lo = 0, hi = npts;
    while (lo < hi) { size_t mid = (lo + hi) / 2; if (pts[mid] < x->lower) lo = mid + 1; else hi = mid; }
    y->lo = (uint32_t)lo;
    hi = npts;
    while (lo < hi) { size_t mid = (lo + hi) / 2; if (pts[mid] < x->upper) lo = mid + 1; else hi = mid; }
    y->hi = (uint32_t)lo;
    y->size = round_up(x->size, align);
    y->fixed = x->fixed_offset;
    y->length = x->upper - x->lower;
    y->orig = (uint32_t)i;
  }
  free(pts);
  pts = NULL;
  p->n = na;
  st_sort(p->it, na, sizeof(pitem), cmp_pitem_lo);

  /* Fixed items must not overlap each other: sweep them in start order against the live
   * ones (few in practice). */
  {
    uint32_t* fl = malloc((na ? na : 1) * sizeof(uint32_t));
    if (!fl) goto nomem;
    size_t nf = 0;
    for (size_t i = 0; i < na && !st; i++) {
      const pitem* x = &p->it[i];
      if (x->fixed == PLACE_FREE) continue;
      size_t w = 0;
      for (size_t j = 0; j < nf; j++) {
        const pitem* y = &p->it[fl[j]];
        if (y->hi <= x->lo) continue; /* expired: drop */
        fl[w++] = fl[j];
        /* real sizes: padding to the alignment is not the caller's */
        uint64_t xs = items[x->orig].size, ys = items[y->orig].size;
        if (x->fixed < y->fixed + ys && y->fixed < x->fixed + xs)
          st = st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                       "placement: fixed items %u and %u overlap in time and address",
                       y->orig, x->orig);
      }
      nf = w;
      fl[nf++] = (uint32_t)i;
    }
    free(fl);
    if (st) goto done;
  }

  /* The lower bound and the partitions. */
  p->off = malloc((na ? na : 1) * sizeof(uint64_t));
  p->tmp = malloc((na ? na : 1) * sizeof(uint64_t));
  p->order = malloc((ST_MIN(na, GREEDY_BIG) + 1) * sizeof(uint32_t));
  p->plist = malloc((ST_MIN(na, GREEDY_BIG) + 1) * sizeof(uint32_t));
  parts = calloc(na ? na : 1, sizeof(part));
  if (!p->off || !p->tmp || !p->order || !p->plist || !parts) goto nomem;
  {
    size_t b = 0;
    uint32_t maxhi = 0;
    for (size_t i = 0; i < na; i++) {
      if (i > b && p->it[i].lo >= maxhi) {
        parts[nparts++] = (part){.b = b, .e = i, .tlo = p->it[b].lo, .thi = maxhi};
        b = i;
      }
      maxhi = ST_MAX(maxhi, p->it[i].hi);
    }
    if (na) parts[nparts++] = (part){.b = b, .e = na, .tlo = p->it[b].lo, .thi = maxhi};
  }
  for (size_t q = 0; q < nparts; q++) {
    parts[q].nfixed = 0;
    parts[q].twin = -1;
    for (size_t i = parts[q].b; i < parts[q].e; i++) parts[q].nfixed += p->it[i].fixed != PLACE_FREE;
  }

  /* a small margin so that the whole call, joins and copies included, ends within limit */
  p->deadline = limit > 0.0 ? t0 + limit - ST_MIN(0.05, limit / 20) : 0.0;
  uint64_t lb = 0, fixed_top = 0;
  for (size_t q = 0; q < nparts; q++) {
    if (st_cancel_requested(p->cancel)) {
      st = st_fail(STALLOC_ERR_CANCELLED, "placement: cancelled");
      goto done;
    }
    st = construct(p, &parts[q]);
    if (st) goto done;
    lb = ST_MAX(lb, parts[q].lb);
    for (size_t i = parts[q].b; i < parts[q].e; i++)
      if (p->it[i].fixed != PLACE_FREE) fixed_top = ST_MAX(fixed_top, p->it[i].fixed + p->it[i].size);
  }
  res->lower_bound = lb;

  /* Large partitions: peeling and greedy orderings, each with an equal share of the time
   * (half of what is left, so the search below keeps some). */
  if (limit > 0.0 || p->every_ordering) {
    size_t nbig = 0;
    for (size_t q = 0; q < nparts; q++) nbig += parts[q].e - parts[q].b > GREEDY_MAX;
    for (size_t q = 0; q < nparts && nbig; q++) {
      if (parts[q].e - parts[q].b <= GREEDY_MAX) continue;
      double left = p->deadline - st_now();
      if ((!p->every_ordering && left <= 0) || st_cancel_requested(p->cancel)) break;
      double share = left / (double)nbig--;
      st = improve_big(p, &parts[q], st_now() + share);
      if (st) goto done;
    }
  }

  /* Improve the partition that sets the peak until the time limit. */
  bool optimal = false;
  uint64_t goal = ST_MAX(lb, fixed_top);
  if (limit > 0.0) {
    find_twins(p, parts, nparts, goal); /* without memory for it, every partition is searched */
    find_kin(p, parts, nparts);         /* without memory for it, none borrows */
    p->board = board_create(p, parts, nparts); /* nor without memory for this */
    st = improve_portfolio(p, parts, nparts, goal, &optimal);
    take_twins(p, parts, nparts);
    if (!st && !optimal) st = peel_more(p, parts, nparts);
    if (st) goto done;
  }

  /* Results in the caller's order; the peak with the real sizes. */
  for (size_t i = 0; i < n; i++)
    offsets[i] = items[i].fixed_offset != PLACE_FREE ? items[i].fixed_offset : 0;
  uint64_t peak = 0, aligned_peak = 0;
  for (size_t i = 0; i < na; i++) {
    offsets[p->it[i].orig] = p->off[i];
    uint64_t top, aligned_top;
    /* Sizes near 2^64 with less than that live at once: the heuristics can still stack items
     * past 2^64 (found by fuzz_replay). No such placement is returned. */
    if (__builtin_add_overflow(p->off[i], items[p->it[i].orig].size, &top) ||
        __builtin_add_overflow(p->off[i], p->it[i].size, &aligned_top)) {
      st = st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                   "placement: the placement found needs more than 2^64 - 1 bytes of address space");
      goto done;
    }
    peak = ST_MAX(peak, top);
    aligned_peak = ST_MAX(aligned_peak, aligned_top);
  }
  res->peak = peak;
  res->optimal = optimal || aligned_peak <= goal;
  if (!optimal && nparts) {
    /* proven by the search: the peak-setting partition cannot go lower */
    for (size_t q = 0; q < nparts; q++)
      if (parts[q].peak == aligned_peak && parts[q].proven >= aligned_peak) res->optimal = true;
  }
  goto done;
nomem:
  st = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "placement: no memory for %zu items", n);
done:
  for (size_t q = 0; q < nparts; q++) part_free(&parts[q]);
  free(parts);
  free(pts);
  free(p->it);
  free(p->off);
  free(p->tmp);
  free(p->order);
  free(p->plist);
  free(p->kin);
  board_free(p->board);
  res->seconds = st_now() - t0;
  return st;
}

/* ---- public API: a thin wrapper over st_place --------------------------------------- */

void stalloc_place_params_init(stalloc_place_params_t* params) {
  if (!params) return;
  memset(params, 0, sizeof *params);
  params->struct_size = sizeof *params;
  params->alignment = 1;
  params->time_limit = 10.0;
  params->cancel = NULL;
}

void stalloc_place_result_init(stalloc_place_result_t* result) {
  if (!result) return;
  memset(result, 0, sizeof *result);
  result->struct_size = sizeof *result;
}

_Static_assert(sizeof(stalloc_place_item_t) == sizeof(st_place_item),
               "public and internal placement items share a layout");

stalloc_status_t stalloc_place(const stalloc_place_item_t* items, size_t n,
                               const stalloc_place_params_t* params, uint64_t* offsets,
                               stalloc_place_result_t* result) {
  stalloc_place_params_t pp;
  stalloc_place_params_init(&pp);
  stalloc_status_t st = st_struct_read(&pp, sizeof pp, params, "stalloc_place: params");
  if (!st && result) st = st_struct_check(result, "stalloc_place: result");
  if (st) return st;
  if (pp.alignment == 0)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_place: alignment must be >= 1");
  st_place_params ip = {pp.alignment, pp.time_limit, pp.cancel, false};
  st_place_result ir;
  st = st_place((const st_place_item*)items, n, &ip, offsets, &ir);
  if (result && st == STALLOC_OK) {
    stalloc_place_result_t r = {
        .struct_size = sizeof r, .peak = ir.peak, .lower_bound = ir.lower_bound,
        .orderings_tried = ir.orderings_tried, .optimal = ir.optimal ? 1u : 0u,
        .backtracks = ir.backtracks, .seconds = ir.seconds};
    st_struct_write(result, &r, sizeof r);
  }
  return st;
}
