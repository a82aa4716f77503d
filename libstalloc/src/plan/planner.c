/* planner.c - params -> pipeline -> stalloc_plan: iteration detection (period.c), classes
 * (classify.c), one placement of the prologue and one steady iteration (place.c), reusable
 * space (reuse.c); plus the plan's info, fingerprint and the public entry points (validation:
 * plan_validate.c).
 *
 * The placement timeline, in alloc time (planner.h), is the prologue [0, S) followed by one
 * iteration [S, S + P). Warm-up requests live where they lived; persistent ones from their
 * alloc to S + P, so they hold their range through every iteration; periodic ones at S plus
 * their position. A periodic request that is freed in the next iteration (it crosses the
 * boundary) occupies its range at the start of every iteration too: first it is placed as if
 * it lived through the whole iteration; then, pinned at that offset as two fixed items (its
 * part before the boundary and its part after, wrapped to the iteration's start), everything
 * else is placed again, and the lower of the two peaks is kept. Either way the layout is valid
 * when the iteration repeats forever. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/struct_size.h"
#include "base/clock.h"
#include "plan/place.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"
#include "plan/reuse.h"

/* Burst windows (reuse.c): a dynamic position more than this many allocs after the previous
 * one starts a new window. One MoE layer's expert tensors come a few allocs apart. */
#define BURST_GAP 8

_Static_assert(sizeof(stalloc_plan_entry_t) == sizeof(st_plan_entry), "entry layout");
_Static_assert(sizeof(stalloc_reuse_window_t) == sizeof(st_reuse_window), "window layout");
_Static_assert(sizeof(stalloc_reuse_range_t) == sizeof(st_reuse_range), "range layout");

void stalloc_plan_params_init(stalloc_plan_params_t* p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->time_limit = 2.0;
  p->detect_period = 1;
  p->use_step_markers = 1;
  p->classify = 1;
  p->reuse_space = 1;
  p->alignment = 512;
  p->tiny_threshold = 512;
  p->dynamic_headroom = 1.0;
}

void stalloc_plan_info_init(stalloc_plan_info_t* info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

/* ---- fingerprint: FNV-1a over the counts and the sizes the plan expects ----------------- */

static uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

#define FNV_SEED 0xcbf29ce484222325ull

uint64_t st_plan_fingerprint(const stalloc_plan* plan) {
  uint64_t h = fnv(fnv(FNV_SEED, plan->prologue_count), plan->iteration_count);
  for (size_t i = 0; i < plan->prologue_count; i++) h = fnv(h, plan->prologue[i].size);
  for (size_t i = 0; i < plan->iteration_count; i++) {
    const st_plan_entry* e = &plan->iteration[i];
    h = fnv(h, e->cls == PLAN_CLASS_DYNAMIC ? 0 : e->size);
  }
  return h;
}

stalloc_status_t st_plan_fingerprint_trace(const stalloc_plan* plan, const stalloc_trace_t* t,
                                           uint64_t* fingerprint) {
  size_t need = plan->prologue_count + plan->iteration_count;
  if (t->request_count < need)
    return st_fail(STALLOC_ERR_PLAN_MISMATCH,
                   "plan: the trace has %zu allocs, the plan covers %zu (prologue %zu + "
                   "iteration %zu)", t->request_count, need, plan->prologue_count,
                   plan->iteration_count);
  uint64_t h = fnv(fnv(FNV_SEED, plan->prologue_count), plan->iteration_count);
  for (size_t i = 0; i < plan->prologue_count; i++) h = fnv(h, t->requests[i].size);
  /* With sizes tolerated a position's entry is the largest size it reached: its largest over
   * the iterations the planner found (steps_found of them from the prologue's end). */
  size_t reps = 1;
  if (plan->sizes_tolerated && plan->iteration_count) {
    reps = (t->request_count - plan->prologue_count) / plan->iteration_count;
    reps = ST_MAX(ST_MIN(reps, (size_t)plan->steps_found), 1);
  }
  for (size_t i = 0; i < plan->iteration_count; i++) {
    uint64_t size = 0;
    for (size_t k = 0; k < reps; k++)
      size = ST_MAX(size, t->requests[plan->prologue_count + k * plan->iteration_count + i].size);
    h = fnv(h, plan->iteration[i].cls == PLAN_CLASS_DYNAMIC ? 0 : size);
  }
  *fingerprint = h;
  return STALLOC_OK;
}

void st_plan_free(stalloc_plan* plan) {
  if (!plan) return;
  free(plan->prologue);
  free(plan->iteration);
  free(plan->windows);
  free(plan->ranges);
  free(plan->prologue_end);
  free(plan->iteration_end);
  free(plan);
}

void stalloc_plan_destroy(stalloc_plan_t* plan) { st_plan_free(plan); }

/* ---- the pipeline ---------------------------------------------------------------------- */

/* The boundary of the iteration (without step markers any rotation of the period is one) is
 * put where the fewest bytes of freed requests are live, so few requests cross it. */
static void choose_phase(const uint64_t* sizes, const uint64_t* free_pos, size_t n,
                         st_period* per) {
  size_t S = per->start, P = per->period;
  /* Sums of up to n sizes below 2^64 each: 128 bits never overflow (sizes near 2^64 wrapped
   * 64-bit sums, undefined behaviour in signed ones). */
  __int128* minus = calloc(n + 1, sizeof *minus);
  if (!minus) return; /* keep the rotation found: still valid */
  for (size_t i = 0; i < n; i++)
    if (free_pos[i] != ST_NEVER) minus[free_pos[i]] += sizes[i];
  __int128 live = 0, best = -1;
  size_t best_b = S;
  for (size_t b = 0; b < S + P && b < n; b++) {
    live -= minus[b]; /* live now: allocs before b not yet freed when alloc b happens */
    if (b >= S && (best < 0 || live < best)) best = live, best_b = b;
    if (free_pos[b] != ST_NEVER) live += sizes[b];
  }
  free(minus);
  per->start = best_b;
  per->iterations = (n - best_b) / P;
}

static uint64_t max_live(const uint64_t* sizes, const uint64_t* free_pos, const bool* planned,
                         size_t n) {
  /* In 128 bits, saturated at UINT64_MAX (as the trace's lower bound is). */
  __int128* minus = calloc(n + 1, sizeof *minus);
  if (!minus) return 0;
  for (size_t i = 0; i < n; i++)
    if (planned[i] && free_pos[i] != ST_NEVER) minus[free_pos[i]] += sizes[i];
  __int128 live = 0, best = 0;
  for (size_t b = 0; b < n; b++) {
    live -= minus[b];
    if (planned[b]) live += sizes[b];
    if (live > best) best = live;
  }
  free(minus);
  return best > (__int128)UINT64_MAX ? UINT64_MAX : (uint64_t)best;
}

static bool is_planned(const st_class_item* c) {
  return c->cls == PLAN_CLASS_PERSISTENT || c->cls == PLAN_CLASS_PERIODIC ||
         c->cls == PLAN_CLASS_WARMUP;
}

/* The step just before the steady state, as far as it lines up with the iteration: up to the
 * first run of WARM_BREAK allocs in a row whose sizes all differ from the iteration's (the
 * structure changed there; routing changes only a few positions in a row), and ending with a
 * match (a difference with no match after it may be where the structure changes). */
#define WARM_BREAK 32

static size_t warm_prefix(const stalloc_trace_t* t, const uint64_t* sizes, size_t S, size_t P,
                          size_t* warm_start) {
  if (!S || !P) return 0;
  size_t b = S - 1;
  while (b > 0 && t->requests[b - 1].step == t->requests[S - 1].step) b--;
  if (t->requests[S - 1].step == t->requests[S].step) return 0; /* not a step of its own */
  size_t len = ST_MIN(S - b, P), run = 0, j = 0;
  for (; j < len; j++) {
    run = sizes[b + j] != sizes[S + j] ? run + 1 : 0;
    if (run == WARM_BREAK) break;
  }
  *warm_start = b;
  size_t end = j < len ? j + 1 - run : len;
  while (end && sizes[b + end - 1] != sizes[S + end - 1]) end--;
  return end;
}

typedef struct pipeline {
  size_t n;
  uint64_t *sizes, *free_pos;
  st_period per;
  st_class_item *pro, *it;
  st_place_item* items;
  uint64_t* offsets;
  size_t* entry_of;    /* item -> entry index (prologue first, then iteration) */
  size_t item_count;
  size_t arenas;       /* class items pl->it[P ..], one per reuse window: no entry */
  uint64_t* arena_off; /* their offsets */
  uint64_t gap;        /* the reuse windows' burst gap the arenas were made for */
} pipeline;

static void pipeline_free(pipeline* pl) {
  free(pl->sizes);
  free(pl->free_pos);
  free(pl->pro);
  free(pl->it);
  free(pl->items);
  free(pl->offsets);
  free(pl->entry_of);
  free(pl->arena_off);
}

/* Builds the placement items; crossing periodic requests get one whole-iteration item. */
static void build_items(pipeline* pl, bool *has_crossing) {
  size_t S = pl->per.start, P = pl->per.period, m = 0;
  uint64_t end = P ? S + P : pl->n;
  *has_crossing = false;
  for (size_t i = 0; i < S; i++) {
    const st_class_item* c = &pl->pro[i];
    if (!is_planned(c)) continue;
    uint64_t hi = c->end == ST_NEVER ? end : c->end;
    pl->items[m] = (st_place_item){c->begin, hi, c->size, PLACE_FREE};
    pl->entry_of[m++] = i;
  }
  for (size_t pos = 0; pos < P + pl->arenas; pos++) {
    const st_class_item* c = &pl->it[pos];
    if (c->cls != PLAN_CLASS_PERIODIC) continue; /* arenas too: placed like periodic */
    bool crosses = c->end > P;
    *has_crossing |= crosses;
    pl->items[m] = (st_place_item){crosses ? S : S + c->begin, crosses ? S + P : S + c->end,
                                   c->size, PLACE_FREE};
    pl->entry_of[m++] = S + pos;
  }
  pl->item_count = m;
}

static uint64_t peak_of(const st_place_item* items, const uint64_t* off, size_t m) {
  uint64_t peak = 0;
  for (size_t j = 0; j < m; j++) peak = ST_MAX(peak, off[j] + items[j].size);
  return peak;
}

/* Second pass: crossing requests pinned at their first-pass offsets as two fixed items (before
 * and after the boundary), everything else placed again. Keeps whichever peak is lower. */
static stalloc_status_t replace_crossing(pipeline* pl, const st_place_params* pp,
                                         uint64_t align) {
  size_t S = pl->per.start, P = pl->per.period, m = pl->item_count, extra = 0;
  for (size_t j = 0; j < m; j++)
    if (pl->entry_of[j] >= S && pl->it[pl->entry_of[j] - S].end > P) extra++;
  st_place_item* items = malloc((m + extra) * sizeof *items);
  uint64_t* off = malloc((m + extra) * sizeof *off);
  if (!items || !off) {
    free(items);
    free(off);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "planner: no memory for the second placement");
  }
  size_t k = m;
  for (size_t j = 0; j < m; j++) {
    items[j] = pl->items[j];
    if (pl->entry_of[j] < S) continue;
    const st_class_item* c = &pl->it[pl->entry_of[j] - S];
    if (c->end <= P) continue;
    items[j] = (st_place_item){S + c->begin, S + P, c->size, pl->offsets[j]};
    items[k++] = (st_place_item){S, S + (c->end - P), c->size, pl->offsets[j]};
  }
  st_place_result res;
  stalloc_status_t s = st_place(items, m + extra, pp, off, &res);
  if (s == STALLOC_OK) {
    uint64_t before = peak_of(pl->items, pl->offsets, m), after = peak_of(items, off, m + extra);
    (void)align;
    if (after < before) memcpy(pl->offsets, off, m * sizeof *off);
  }
  free(items);
  free(off);
  return s;
}

/* Arenas for the windows of `gap` (when `arenas`), then the placement of every item within
 * `limit` seconds; *top: the pool's extent (aligned sizes). */
static stalloc_status_t place_all(pipeline* pl, const stalloc_plan_params_t* prm, bool arenas,
                                  uint64_t gap, double limit, uint64_t* top) {
  size_t P = pl->per.period;
  stalloc_status_t s;
  pl->arenas = 0;
  if (arenas && (s = st_reuse_arenas(pl->sizes, pl->free_pos, &pl->per, pl->it,
                                     prm->dynamic_headroom, prm->alignment, gap, pl->it + P,
                                     &pl->arenas)))
    return s;
  bool crossing;
  build_items(pl, &crossing);
  st_place_params pp = {prm->alignment, limit, NULL, false};
  st_place_result res;
  if ((s = st_place(pl->items, pl->item_count, &pp, pl->offsets, &res))) return s;
  if (crossing) {
    /* the second placement gets what is left of the time limit */
    st_place_params pp2 = pp;
    pp2.time_limit = ST_MAX(0.0, limit - res.seconds);
    if ((s = replace_crossing(pl, &pp2, prm->alignment))) return s;
  }
  *top = 0;
  for (size_t j = 0; j < pl->item_count; j++)
    *top = ST_MAX(*top, pl->offsets[j] + st_align_up(pl->items[j].size, prm->alignment));
  return STALLOC_OK;
}

static stalloc_status_t run(const stalloc_trace_t* t, const stalloc_plan_params_t* prm,
                            stalloc_plan* plan, pipeline* pl) {
  size_t n = t->request_count;
  pl->n = n;
  pl->sizes = malloc((n + 1) * sizeof *pl->sizes);
  pl->free_pos = malloc((n + 1) * sizeof *pl->free_pos);
  if (!pl->sizes || !pl->free_pos) goto oom;
  /* free position = number of allocs before the free: a binary search over alloc events */
  for (size_t i = 0; i < n; i++) {
    const stalloc_request_t* r = &t->requests[i];
    pl->sizes[i] = r->size;
    if (r->free_event == UINT64_MAX) {
      pl->free_pos[i] = ST_NEVER;
      continue;
    }
    size_t lo = i + 1, hi = n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (t->requests[mid].alloc_event < r->free_event) lo = mid + 1;
      else hi = mid;
    }
    pl->free_pos[i] = lo;
  }

  if (prm->detect_period) {
    st_period_find(t, pl->sizes, n, prm->use_step_markers != 0, prm->tolerate_sizes != 0, &pl->per);
    if (pl->per.period && !pl->per.from_markers) choose_phase(pl->sizes, pl->free_pos, n, &pl->per);
  } else {
    pl->per = (st_period){n, 0, 0, false};
  }
  size_t S = pl->per.start, P = pl->per.period;

  /* size 0 is never planned: it has no bytes to place */
  uint64_t tiny = prm->classify ? prm->tiny_threshold : 0;
  pl->pro = malloc((S + 1) * sizeof *pl->pro);
  pl->it = malloc((2 * P + 1) * sizeof *pl->it); /* positions, then arenas */
  plan->prologue = malloc((S + 1) * sizeof *plan->prologue);
  plan->iteration = malloc((P + 1) * sizeof *plan->iteration);
  plan->prologue_end = malloc((S + 1) * sizeof *plan->prologue_end);
  plan->iteration_end = malloc((P + 1) * sizeof *plan->iteration_end);
  if (!plan->prologue_end || !plan->iteration_end) goto oom;
  pl->items = malloc((S + 2 * P + 1) * sizeof *pl->items);
  pl->offsets = malloc((S + 2 * P + 1) * sizeof *pl->offsets);
  pl->entry_of = malloc((S + 2 * P + 1) * sizeof *pl->entry_of);
  pl->arena_off = malloc((P + 1) * sizeof *pl->arena_off);
  if (!pl->pro || !pl->it || !plan->prologue || !plan->iteration || !pl->items || !pl->offsets ||
      !pl->entry_of || !pl->arena_off)
    goto oom;
  size_t warm_start = 0, warm_len = 0;
  if (pl->per.from_markers) warm_len = warm_prefix(t, pl->sizes, S, P, &warm_start);
  st_classify(pl->sizes, pl->free_pos, n, &pl->per, true, tiny, warm_start, warm_len,
              prm->tolerate_sizes != 0, pl->pro, pl->it);
  stalloc_status_t s;
  plan->prologue_count = S;
  plan->iteration_count = P;
  plan->steps_found = (uint32_t)pl->per.iterations;
  plan->uses_step_markers = pl->per.from_markers;
  plan->sizes_tolerated = prm->tolerate_sizes != 0;

  /* placement: with arenas, once with merged windows and, where bursts split them, once with
   * burst windows (half the time limit each); the smaller pool wins */
  bool arenas = prm->reuse_space && prm->dynamic_headroom >= 1 && P;
  bool two = false;
  if (arenas) {
    st_reuse_window* w = malloc((P + 1) * sizeof *w);
    if (!w) goto oom;
    two = st_reuse_windows(pl->it, P, BURST_GAP, w) > st_reuse_windows(pl->it, P, 0, w);
    free(w);
  }
  double limit = two ? prm->time_limit / 2 : prm->time_limit;
  uint64_t top0, top1;
  if ((s = place_all(pl, prm, arenas, 0, limit, &top0))) return s;
  if (two) {
    pipeline keep = *pl;
    size_t m = pl->item_count;
    keep.items = malloc((m + 1) * sizeof *keep.items);
    keep.offsets = malloc((m + 1) * sizeof *keep.offsets);
    keep.entry_of = malloc((m + 1) * sizeof *keep.entry_of);
    keep.it = malloc((pl->arenas + 1) * sizeof *keep.it);
    if (!keep.items || !keep.offsets || !keep.entry_of || !keep.it) {
      free(keep.items);
      free(keep.offsets);
      free(keep.entry_of);
      free(keep.it);
      goto oom;
    }
    memcpy(keep.items, pl->items, m * sizeof *keep.items);
    memcpy(keep.offsets, pl->offsets, m * sizeof *keep.offsets);
    memcpy(keep.entry_of, pl->entry_of, m * sizeof *keep.entry_of);
    memcpy(keep.it, pl->it + P, pl->arenas * sizeof *keep.it);
    s = place_all(pl, prm, arenas, BURST_GAP, limit, &top1);
    if (!s && top1 < top0) {
      pl->gap = BURST_GAP;
    } else if (!s) { /* the merged windows' layout stays */
      memcpy(pl->items, keep.items, m * sizeof *keep.items);
      memcpy(pl->offsets, keep.offsets, m * sizeof *keep.offsets);
      memcpy(pl->entry_of, keep.entry_of, m * sizeof *keep.entry_of);
      memcpy(pl->it + P, keep.it, keep.arenas * sizeof *keep.it);
      pl->item_count = m;
      pl->arenas = keep.arenas;
    }
    free(keep.items);
    free(keep.offsets);
    free(keep.entry_of);
    free(keep.it);
    if (s) return s;
  }

  /* entries */
  for (size_t i = 0; i < S + P; i++) {
    const st_class_item* c = i < S ? &pl->pro[i] : &pl->it[i - S];
    st_plan_entry* e = i < S ? &plan->prologue[i] : &plan->iteration[i - S];
    *e = (st_plan_entry){c->size, PLAN_NO_OFFSET, c->cls, UINT32_MAX};
    if (i < S) plan->prologue_end[i] = c->end;
    else plan->iteration_end[i - S] = c->end;
  }
  uint64_t peak = 0, top = 0;
  for (size_t j = 0; j < pl->item_count; j++) {
    size_t i = pl->entry_of[j];
    if (i >= S + P) { /* an arena: in the pool, no entry */
      pl->arena_off[i - S - P] = pl->offsets[j];
      top = ST_MAX(top, pl->offsets[j] + st_align_up(pl->items[j].size, prm->alignment));
      continue;
    }
    st_plan_entry* e = i < S ? &plan->prologue[i] : &plan->iteration[i - S];
    e->offset = pl->offsets[j];
    peak = ST_MAX(peak, e->offset + e->size);
    top = ST_MAX(top, e->offset + st_align_up(e->size, prm->alignment));
  }
  plan->alignment = prm->alignment;
  plan->plan_peak = peak;
  plan->pool_size = st_align_up(top, prm->alignment);

  /* lower bounds: of the whole trace (DESIGN.md) and of the requests the plan holds */
  stalloc_trace_summary_t sum;
  stalloc_trace_summary_init(&sum);
  if ((s = stalloc_trace_summary(t, &sum))) return s;
  plan->lower_bound = sum.lower_bound;
  bool* planned = malloc((n + 1) * sizeof *planned);
  if (!planned) goto oom;
  /* with arenas, the dynamic requests they serve are in the pool too: part of its bound */
  for (size_t i = 0; i < n; i++) {
    const st_class_item* c = i < S ? &pl->pro[i] : &pl->it[(i - S) % P];
    planned[i] = is_planned(c) || (i >= S && pl->arenas && c->cls == PLAN_CLASS_DYNAMIC &&
                                   c->end != ST_NEVER && c->end - c->begin <= P);
  }
  plan->planned_lower_bound = max_live(pl->sizes, pl->free_pos, planned, n);
  free(planned);

  plan->fingerprint = st_plan_fingerprint(plan);
  if (prm->reuse_space && P &&
      (s = st_reuse_compute(plan, pl->pro, pl->it, pl->it + P, pl->arena_off, pl->arenas,
                            pl->gap)))
    return s;
  return st_plan_validate(plan, "planner");
oom:
  return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "planner: no memory for %zu requests", n);
}

stalloc_status_t stalloc_plan_create(const stalloc_trace_t* trace,
                                     const stalloc_plan_params_t* params, stalloc_plan_t** out) {
  if (!out) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_create: plan is NULL");
  *out = NULL;
  if (!trace) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_create: trace is NULL");
  stalloc_plan_params_t prm;
  stalloc_plan_params_init(&prm);
  stalloc_status_t st = st_struct_read(&prm, sizeof prm, params, "stalloc_plan_create: params");
  if (st) return st;
  if (!st_is_pow2(prm.alignment))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "plan params: alignment %llu is not a power of two",
                   (unsigned long long)prm.alignment);
  if (!(prm.dynamic_headroom == 0 || (prm.dynamic_headroom >= 1 && prm.dynamic_headroom <= 1e6)))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                   "plan params: dynamic_headroom must be 0 (no arenas) or between 1 and 1e6, not %g",
                   prm.dynamic_headroom);
  if (!(prm.time_limit >= 0) || !isfinite(prm.time_limit))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "plan params: time_limit must be >= 0 seconds");
  if (trace->request_count >= UINT32_MAX)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "planner: %zu requests is more than it can plan",
                   trace->request_count);
  double t0 = st_now();
  stalloc_plan* plan = calloc(1, sizeof *plan);
  if (!plan) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "planner: no memory");
  pipeline pl;
  memset(&pl, 0, sizeof pl);
  stalloc_status_t s = run(trace, &prm, plan, &pl);
  pipeline_free(&pl);
  if (s) {
    st_plan_free(plan);
    return s;
  }
  plan->seconds = st_now() - t0;
  *out = plan;
  return STALLOC_OK;
}

/* ---- queries --------------------------------------------------------------------------- */

stalloc_status_t stalloc_plan_info(const stalloc_plan_t* plan, stalloc_plan_info_t* info) {
  if (!plan) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_info: NULL plan");
  stalloc_status_t st = st_struct_check(info, "stalloc_plan_info");
  if (st) return st;
  stalloc_plan_info_t v;
  stalloc_plan_info_init(&v);
  v.lower_bound = plan->planned_lower_bound;
  v.trace_lower_bound = plan->lower_bound;
  v.plan_peak = plan->plan_peak;
  v.pool_size = plan->pool_size;
  v.alignment = plan->alignment;
  v.fingerprint = plan->fingerprint;
  for (size_t i = 0; i < plan->prologue_count + plan->iteration_count; i++) {
    bool it = i >= plan->prologue_count;
    uint32_t cls = it ? plan->iteration[i - plan->prologue_count].cls : plan->prologue[i].cls;
    v.persistent += cls == PLAN_CLASS_PERSISTENT;
    v.periodic += cls == PLAN_CLASS_PERIODIC;
    v.tiny += cls == PLAN_CLASS_TINY;
    v.dynamic += cls == PLAN_CLASS_DYNAMIC;
    v.warmup += cls == PLAN_CLASS_WARMUP;
  }
  v.prologue_count = plan->prologue_count;
  v.iteration_count = plan->iteration_count;
  v.steps_found = plan->steps_found;
  v.uses_step_markers = plan->uses_step_markers;
  v.sizes_tolerated = plan->sizes_tolerated;
  v.window_count = plan->window_count;
  v.range_count = plan->range_count;
  for (size_t r = 0; r < plan->range_count; r++) v.reusable_bytes += plan->ranges[r].size;
  /* An arena above every entry is in the pool but not in plan_peak (the entries' extent):
   * then the pool's size is the peak the ratio is about. */
  uint64_t top = 0;
  for (size_t i = 0; i < plan->prologue_count + plan->iteration_count; i++) {
    bool it = i >= plan->prologue_count;
    const st_plan_entry* e = it ? &plan->iteration[i - plan->prologue_count] : &plan->prologue[i];
    if (e->offset != PLAN_NO_OFFSET) top = ST_MAX(top, e->offset + st_align_up(e->size, plan->alignment));
  }
  uint64_t used = plan->pool_size > st_align_up(top, plan->alignment) ? plan->pool_size : plan->plan_peak;
  v.ratio = v.lower_bound ? (double)used / (double)v.lower_bound : 1.0;
  v.seconds = plan->seconds;
  st_struct_write(info, &v, sizeof v);
  return STALLOC_OK;
}

stalloc_status_t stalloc_plan_check(const stalloc_plan_t* plan, const stalloc_trace_t* trace) {
  if (!plan || !trace) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_check: NULL argument");
  uint64_t fp;
  stalloc_status_t s = st_plan_fingerprint_trace(plan, trace, &fp);
  if (s) return s;
  if (fp != plan->fingerprint)
    return st_fail(STALLOC_ERR_PLAN_MISMATCH,
                   "plan: made for another trace (fingerprint %016llx, this trace %016llx)",
                   (unsigned long long)plan->fingerprint, (unsigned long long)fp);
  return STALLOC_OK;
}

stalloc_status_t stalloc_plan_entries(const stalloc_plan_t* plan, int32_t which,
                                      const stalloc_plan_entry_t** entries, size_t* count) {
  if (!plan || !entries || !count || (which != 0 && which != 1))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_entries: bad argument");
  *entries = (const stalloc_plan_entry_t*)(which ? plan->iteration : plan->prologue);
  *count = which ? plan->iteration_count : plan->prologue_count;
  return STALLOC_OK;
}

stalloc_status_t stalloc_plan_lifetimes(const stalloc_plan_t* plan, int32_t which,
                                        const uint64_t** ends, size_t* count) {
  if (!plan || !ends || !count || (which != 0 && which != 1))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_lifetimes: bad argument");
  *ends = which ? plan->iteration_end : plan->prologue_end;
  *count = !*ends ? 0 : which ? plan->iteration_count : plan->prologue_count; /* none: hand-made */
  return STALLOC_OK;
}

stalloc_status_t stalloc_plan_reuse(const stalloc_plan_t* plan,
                                    const stalloc_reuse_window_t** windows, size_t* window_count,
                                    const stalloc_reuse_range_t** ranges, size_t* range_count) {
  if (!plan || !windows || !window_count || !ranges || !range_count)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_reuse: bad argument");
  *windows = (const stalloc_reuse_window_t*)plan->windows;
  *window_count = plan->window_count;
  *ranges = (const stalloc_reuse_range_t*)plan->ranges;
  *range_count = plan->range_count;
  return STALLOC_OK;
}
