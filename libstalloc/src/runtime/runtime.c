/* runtime.c - serving a run from a plan: the hot path of plan mode (see runtime.h, plan.h).
 *
 * Matching. A cursor holds the position the next alloc is expected at: positions 0..P-1 are
 * the prologue, P.. repeat the iteration forever. A request whose size equals the entry's (any
 * size for a dynamic entry) advances the cursor. Otherwise the runtime looks around the cursor
 * for a position with that size whose preceding entries match the sizes of the last requests
 * (a score that allows for one dropped or resized request), and jumps there when the evidence
 * is strong enough for the distance, the nearest on a tie: that is a resync. With no such position the request is a miss and the cursor stays, so one extra
 * request costs one miss; a dropped or resized one costs one miss plus a resync.
 *
 * Safety. The plan says which entries may share bytes, but a run that diverges (a tensor freed
 * late, a missed free, a plan from another run) breaks that promise. So every block in the pool
 * is a node of an interval treap (ordered by offset, augmented with the largest end in each
 * subtree), and a planned range is handed out only when no live node overlaps it: one
 * O(log n) query, whatever the plan says. A block freed on a stream with pending work stays
 * in the treap as "pending" until its event is done; only its own stream may reuse it before.
 *
 * Dynamic requests (a dynamic entry, or a miss inside a reuse window) go best-fit into the
 * window's reusable ranges minus the nodes live there now (the planner reserves an arena in
 * them for the window's dynamic bytes); what does not fit goes back to the caller for the
 * fallback pool. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_validate.h"
#include "runtime/arena.h"
#include "runtime/runtime.h"
#include "runtime/slab.h"

#define HISTORY 8      /* sizes of past requests compared when scoring a resync candidate */
#define WINDOW 64      /* positions searched each way around the cursor */
#define LOST_EXTRA 256 /* how much further forward the search reaches after many misses */
#define DOOMED_MAX 16
/* A plan that holds the largest size seen per position (online plans) has been outgrown by a
 * step (a batch ramp, a longer sequence) once OUTGROWN requests came larger than the slot
 * expected at the cursor, and more than a OUTGROWN_SHARE-th as many as the step's hits so far:
 * the growable pool then serves the rest of the step, since the plan's layout no longer holds
 * there. A step that merely resyncs (a request added or dropped) has hits to show for it; an
 * exact plan's larger requests are requests resized, which resyncing handles. One is enough
 * among a step's first requests (fewer than OUTGROWN_SHARE hits): a new shape shows from the
 * first input, and waiting for a second put the blocks between at planned offsets, each then
 * holding a granule of the plan's region alone beside a step served by the pool (llama_ramp at
 * 256x: 18.57 -> 10.57 MiB, docs/online.md). Further on, the share decides as before. A request
 * at a dynamic position (live across the boundary: the input batch) counts when it passes the
 * largest size the position reached. */
#define OUTGROWN 1
#define OUTGROWN_SHARE 4
/* A step an online plan does not hold at all (an MoE step routed unlike the recorded ones)
 * misses between hits, so neither OUTGROWN nor LOST_IN_POOL sees it: each miss goes to the
 * growable pool beside the plan's region while the hits hold the region's granules, and the
 * step maps both. Once OUTSIDE of a step's requests went to the pool, more than one for every
 * OUTSIDE_SHARE of its hits, the pool serves the rest of the step. A step that merely resyncs
 * sends a few there (llama_ramp's larger steps, drawn from its recording in no fixed order:
 * 41 of 190 early on, then the plan to the end). On the foreach `--small` mixtral_1f1b_m8 run
 * drawn 60 steps long (seed 4) at 256x: 81.31 -> 23.31 MiB, no other run of the recorded or
 * drawn sets moved (docs/online.md, "Where it stands"). Online plans only, as OUTGROWN: early
 * in a step a run replayed with an exact plan and 3% of its requests resized or added looks
 * the same (64 misses by the 303rd hit on llama_1f1b, test_replay.py), by count and by bytes,
 * and resyncing serves it. */
#define OUTSIDE 64
#define OUTSIDE_SHARE 8
#define LOST_IN_POOL 8 /* misses in a row after which the plan's slots are not being claimed
                          (a step of another kind): misses then go into the pool's free space */

enum { NODE_LIVE = 1, NODE_PENDING = 2 };

struct st_range_node {
  uint64_t start, end, max_end;
  st_range_node *left, *right;
  uint32_t prio;
  uint8_t state;
  bool released;                /* a pending block whose granules were let go at its free */
  uint64_t stream;
  void* event;
  st_range_node *pnext, *pprev; /* pending list (oldest first); pnext also links spares */
  st_runtime* owner;            /* a replaced plan's pool lives on until its blocks are freed */
};

/* The blocks of a pool's address range. Plans of kinds served by turns (a training step and an
 * evaluation pass; a run's length buckets) share one region of the arena, so the granules a
 * paused plan lets go are where the next one's blocks go, mapped already, rather than moved to
 * another region every change of kind (gru_bucket at 256x: about 1,300 moves a step, a third of
 * the pool). One treap holds every sharing plan's blocks: a hit checks the others' blocks live
 * across the change (a gradient kept until zero_grad) as its own. The region goes back with the
 * last plan. */
typedef struct st_space {
  st_range_node* root;
  st_arena_block* region; /* NULL: a pool of its own, never shared */
  uint64_t size;          /* bytes of the region */
  unsigned users;
} st_space;

struct st_runtime {
  const backend_ops* ops;
  void* backend;
  st_budget* budget;
  uint64_t alignment;
  uint8_t* base;
  uint64_t pool_size;
  bool pool_mapped; /* reserve+map rather than alloc */
  /* The pool as a region of the growable pool (arena.h), in one of two modes. Held: the
   * region holds (one reference each) the granules its blocks have touched; planned positions
   * repeat every iteration, so a hit checks one flag per entry rather than counting granules.
   * Counted: each block counts itself on its granules, so what no block touches is free for
   * the growable pool. A plan switches to counted when a request misses into the growable pool
   * (the run is not following it: its idle granules should serve the misses), back to held
   * after a step with no such miss, and for good when it is retired. */
  st_arena* arena;
  const size_t* shared;         /* the arena's count of SHARED granules (read on each hit) */
  st_space* space;
  st_arena_block* region;       /* space->region, read here by every hit rather than through space */
  uint64_t granule;
  uint8_t* held;     /* per granule of the region: held */
  uint8_t* ready;    /* per entry: its range's granules are held */
  bool counted, retired;
  uint64_t arena_misses; /* since the last step marker */

  st_plan_entry* entries; /* prologue then one iteration */
  uint64_t P, I;
  uint32_t* window_of;    /* per iteration position: reuse window or UINT32_MAX */
  st_reuse_window* windows;
  size_t window_count;
  st_reuse_range* ranges;
  bool use_steps;
  bool shaped;        /* entries hold the largest size seen: a smaller request takes the slot */

  uint64_t cursor;    /* virtual position of the next alloc */
  uint64_t cur_idx;   /* its entry index, or P + I when there is none */
  uint64_t lost;      /* misses since the last match */
  uint64_t hist[HISTORY]; /* a ring: past(rt, 0) is the previous request's size */
  unsigned hist_head;     /* where past(rt, 0) is */

  st_range_node* spare;
  st_range_node *pending_head, *pending_tail;
  st_range_node* doomed[DOOMED_MAX];
  size_t doomed_count;
  uint32_t rng;
  uint64_t nodes; /* live and pending blocks in the pool */
  st_runtime_counters c;
  uint64_t step_hits;  /* hits before this step */
  uint64_t step_grown; /* requests this step taken for a planned one but larger than it */
  uint64_t step_outside; /* requests this step sent to the caller's pool (see OUTSIDE) */
  bool outgrown;       /* this step left the plan (see OUTGROWN) */
};

/* ---- interval treap keyed by (start, node address) ---- */

static inline bool node_less(const st_range_node* a, const st_range_node* b) {
  return a->start < b->start || (a->start == b->start && a < b);
}

static inline void update(st_range_node* t) {
  uint64_t m = t->end;
  if (t->left && t->left->max_end > m) m = t->left->max_end;
  if (t->right && t->right->max_end > m) m = t->right->max_end;
  t->max_end = m;
}

/* Splits t into keys < k (l) and keys >= k (r). */
static void split(st_range_node* t, const st_range_node* k, st_range_node** l, st_range_node** r) {
  if (!t) {
    *l = *r = NULL;
  } else if (node_less(t, k)) {
    split(t->right, k, &t->right, r);
    *l = t;
    update(t);
  } else {
    split(t->left, k, l, &t->left);
    *r = t;
    update(t);
  }
}

static st_range_node* merge(st_range_node* a, st_range_node* b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->right = merge(a->right, b);
    update(a);
    return a;
  }
  b->left = merge(a, b->left);
  update(b);
  return b;
}

static st_range_node* tr_insert(st_range_node* t, st_range_node* n) {
  if (!t) {
    update(n);
    return n;
  }
  if (n->prio > t->prio) {
    split(t, n, &n->left, &n->right);
    update(n);
    return n;
  }
  if (node_less(n, t)) t->left = tr_insert(t->left, n);
  else t->right = tr_insert(t->right, n);
  update(t);
  return t;
}

static st_range_node* tr_remove(st_range_node* t, st_range_node* n) {
  if (!t) return NULL;
  if (t == n) return merge(n->left, n->right);
  if (node_less(n, t)) t->left = tr_remove(t->left, n);
  else t->right = tr_remove(t->right, n);
  update(t);
  return t;
}

/* ---- nodes, pending frees ---- */

/* Inlined: a planned hit's path, where a call's register saves cost as much as the node. */
static inline __attribute__((always_inline)) stalloc_status_t node_new(st_runtime* rt, uint64_t start, uint64_t end,
                                                                       uint64_t stream, st_range_node** out) {
  st_range_node* n = rt->spare;
  if (n) rt->spare = n->pnext;
  else if (!(n = malloc(sizeof *n))) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "runtime: no host memory for a range node");
  rt->rng = rt->rng * 1664525u + 1013904223u;
  /* field by field: a compound literal compiles to a zeroing `rep stos` first, a third of a
   * planned hit's time in st_runtime_alloc (bench_hot_path) */
  n->start = start;
  n->end = n->max_end = end;
  n->left = n->right = NULL;
  n->prio = rt->rng;
  n->state = NODE_LIVE;
  n->released = false;
  n->stream = stream;
  n->event = NULL;
  n->pnext = n->pprev = NULL;
  n->owner = rt;
  rt->space->root = tr_insert(rt->space->root, n);
  rt->nodes++;
  *out = n;
  return STALLOC_OK;
}

/* A node out of the treap goes back: off the pending list, its granules let go, a spare. */
static void node_release(st_runtime* rt, st_range_node* n) {
  if (n->state == NODE_PENDING) {
    if (n->pprev) n->pprev->pnext = n->pnext;
    else rt->pending_head = n->pnext;
    if (n->pnext) n->pnext->pprev = n->pprev;
    else rt->pending_tail = n->pprev;
    if (n->event) rt->ops->event_destroy(rt->backend, n->event);
  }
  if (rt->counted && !n->released) st_arena_region_unref(rt->arena, rt->base + n->start, n->end - n->start);
  n->pnext = rt->spare;
  rt->spare = n;
  rt->nodes--;
}

static void node_drop(st_runtime* rt, st_range_node* n) {
  rt->space->root = tr_remove(rt->space->root, n);
  node_release(rt, n);
}

/* Takes rt's nodes out of the treap t (the others are put back in a treap of their own) and
 * chains them by `left` onto *mine. */
static st_range_node* sift_out(st_range_node* t, const st_runtime* rt, st_range_node* keep, st_range_node** mine) {
  if (!t) return keep;
  st_range_node *l = t->left, *r = t->right;
  keep = sift_out(r, rt, sift_out(l, rt, keep, mine), mine);
  t->left = t->right = NULL;
  if (t->owner != rt) return tr_insert(keep, t);
  t->left = *mine;
  *mine = t;
  return keep;
}

/* Maps (holds) the region's granules under [start, end) not held yet, for a request on
 * `stream` (ST_ARENA_ANY_STREAM: none). Hits that follow on held granules do not ask the arena
 * for them again; they settle with it instead (settle_held). */
static stalloc_status_t hold_range(st_runtime* rt, uint64_t start, uint64_t end, uint64_t stream) {
  for (uint64_t g = start / rt->granule, last = (end - 1) / rt->granule; g <= last; g++) {
    if (rt->held[g]) continue;
    stalloc_status_t s = st_arena_region_ref(rt->arena, rt->base + g * rt->granule, rt->granule, stream);
    if (s) return s;
    rt->held[g] = 1;
  }
  return STALLOC_OK;
}

/* A request of `stream` takes [off, off + size) of held granules: where one's memory came by an
 * alias that another stream's queued work may still use, it waits for that work first (in
 * counted mode region_ref does this). */
static void settle_held(st_runtime* rt, uint64_t off, uint64_t size, uint64_t stream) {
  if (rt->region && !rt->counted && *rt->shared) st_arena_settle(rt->arena, rt->base + off, size, stream);
}

/* Counts (or, d = -1, uncounts) live blocks on their granules: held ones, so mapped, and
 * counting cannot fail. A pending block lets go of its granules with its stream's queued work
 * noted (the arena reuses them elsewhere once that is done), as a free in counted mode does. */
static void count_nodes(st_runtime* rt, st_range_node* t, int d) {
  for (; t; t = t->right) {
    count_nodes(rt, t->left, d);
    /* released: let go at its free, it holds nothing (its memory may serve elsewhere); another
     * owner: a block of a plan sharing the region, which counts its own */
    if (t->released || t->owner != rt) continue;
    void* at = rt->base + t->start;
    if (d > 0) {
      (void)st_arena_region_ref(rt->arena, at, t->end - t->start, ST_ARENA_ANY_STREAM);
      t->released = t->state == NODE_PENDING && st_arena_region_free(rt->arena, at, t->end - t->start, t->stream);
    } else {
      st_arena_region_unref(rt->arena, at, t->end - t->start);
    }
  }
}

/* Held to counted: every block counts itself, then the region lets go of its granules (those
 * no block touches are cached, and go back before new granules are mapped). */
static void count_granules(st_runtime* rt) {
  if (!rt->region || rt->counted) return;
  count_nodes(rt, rt->space->root, +1);
  for (uint64_t g = 0; g * rt->granule < rt->pool_size; g++)
    if (rt->held[g]) {
      st_arena_region_unref(rt->arena, rt->base + g * rt->granule, rt->granule);
      rt->held[g] = 0;
    }
  memset(rt->ready, 0, (size_t)(rt->P + rt->I));
  rt->counted = true;
}

/* Counted to held: the region holds what its live blocks touch now, and hits hold the rest
 * again. A pending block that let go of its granules is not held: its memory may serve another
 * address meanwhile (an alias), and holding it again would map new memory. */
static void hold_nodes(st_runtime* rt, st_range_node* t) {
  for (; t; t = t->right) {
    hold_nodes(rt, t->left);
    if (!t->released && t->owner == rt) (void)hold_range(rt, t->start, t->end, ST_ARENA_ANY_STREAM); /* mapped: cannot fail */
  }
}

static void hold_granules(st_runtime* rt) {
  if (!rt->counted || rt->retired) return;
  hold_nodes(rt, rt->space->root);
  count_nodes(rt, rt->space->root, -1);
  rt->counted = false;
}

static bool event_done(st_runtime* rt, st_range_node* n) {
  return n->event && rt->ops->event_done(rt->backend, n->event);
}

/* Drops the oldest pending frees whose work has finished (a few per call: amortised O(1)). */
static void poll_pending(st_runtime* rt) {
  for (int i = 0; i < 4 && rt->pending_head && event_done(rt, rt->pending_head); i++)
    node_drop(rt, rt->pending_head);
}

/* True when a node blocks [a, b) for `stream`; done pending nodes are noted for dropping. */
static bool blocked(st_runtime* rt, st_range_node* t, uint64_t a, uint64_t b, uint64_t stream) {
  if (!t || t->max_end <= a) return false;
  if (blocked(rt, t->left, a, b, stream)) return true;
  if (t->start >= b) return false;
  if (t->end > a) {
    if (t->state == NODE_LIVE) return true;
    if (t->stream != stream) {
      if (!event_done(rt, t) || rt->doomed_count == DOOMED_MAX) return true;
      rt->doomed[rt->doomed_count++] = t;
    }
  }
  return blocked(rt, t->right, a, b, stream);
}

static bool range_free(st_runtime* rt, uint64_t a, uint64_t b, uint64_t stream) {
  rt->doomed_count = 0;
  bool busy = blocked(rt, rt->space->root, a, b, stream);
  for (size_t i = 0; i < rt->doomed_count; i++) node_drop(rt->doomed[i]->owner, rt->doomed[i]);
  rt->doomed_count = 0;
  return !busy;
}

/* ---- best fit in reusable ranges ---- */

typedef struct gap_search {
  uint64_t need, align, pos, end; /* pos: first byte not covered by nodes seen so far */
  uint64_t best, best_waste;
} gap_search;

static void consider_gap(gap_search* g, uint64_t lo, uint64_t hi) {
  uint64_t s = st_align_up(lo, g->align);
  if (s < lo || s >= hi || hi - s < g->need) return; /* s < lo: the rounding wrapped */
  uint64_t waste = (hi - lo) - g->need;
  if (waste < g->best_waste) {
    g->best_waste = waste;
    g->best = s;
  }
}

/* In-order walk of the nodes overlapping [g->pos, g->end), considering the gaps between them. */
static void walk_gaps(st_range_node* t, gap_search* g) {
  if (!t || t->max_end <= g->pos) return;
  walk_gaps(t->left, g);
  if (t->start >= g->end) return;
  if (t->end > g->pos) {
    if (t->start > g->pos) consider_gap(g, g->pos, t->start);
    g->pos = t->end;
  }
  walk_gaps(t->right, g);
}

static bool place_dynamic(st_runtime* rt, uint32_t w, uint64_t size, uint64_t* offset) {
  if (w >= rt->window_count) return false;
  const st_reuse_window* win = &rt->windows[w];
  gap_search g = {.need = st_align_up(size, rt->alignment), .align = rt->alignment,
                  .best = UINT64_MAX, .best_waste = UINT64_MAX};
  if (!g.need) return false;
  for (uint32_t i = 0; i < win->range_count; i++) {
    const st_reuse_range* r = &rt->ranges[win->first_range + i];
    if (r->size < g.need) continue;
    g.pos = r->offset;
    g.end = r->offset + r->size;
    walk_gaps(rt->space->root, &g);
    if (g.pos < g.end) consider_gap(&g, g.pos, g.end);
  }
  if (g.best == UINT64_MAX) return false;
  *offset = g.best;
  return true;
}

/* A miss while the run is off the plan (an evaluation step, a shape never seen): best fit
 * anywhere in the pool between the live blocks, rather than a second pool stacked on top.
 * The treap keeps it safe: a planned request whose range it still holds misses in turn. */
static bool place_in_pool(st_runtime* rt, uint64_t size, uint64_t* offset) {
  gap_search g = {.need = st_align_up(size, rt->alignment), .align = rt->alignment,
                  .best = UINT64_MAX, .best_waste = UINT64_MAX, .pos = 0, .end = rt->pool_size};
  if (!g.need || g.need > rt->pool_size) return false;
  walk_gaps(rt->space->root, &g);
  if (g.pos < g.end) consider_gap(&g, g.pos, g.end);
  if (g.best == UINT64_MAX) return false;
  *offset = g.best;
  return true;
}

/* ---- matching the run against the plan ---- */

static inline const st_plan_entry* entry_at(const st_runtime* rt, uint64_t v) {
  if (v < rt->P) return &rt->entries[v];
  if (!rt->I) return NULL;
  return &rt->entries[rt->P + (v - rt->P) % rt->I];
}

static void set_cursor(st_runtime* rt, uint64_t v) {
  rt->cursor = v;
  rt->cur_idx = v < rt->P ? v : rt->I ? rt->P + (v - rt->P) % rt->I : rt->P;
}

static inline void advance(st_runtime* rt) {
  rt->cursor++;
  if (++rt->cur_idx == rt->P + rt->I && rt->I) rt->cur_idx = rt->P;
}

/* A dynamic entry takes any size, a tiny one any tiny size (the slab serves both alike; MoE
 * index tensors change size with the routing). */
static inline bool size_fits(const st_plan_entry* e, uint64_t size) {
  return e->size == size || e->cls == PLAN_CLASS_DYNAMIC ||
         (e->cls == PLAN_CLASS_TINY && size <= ST_TINY_MAX);
}

/* With a plan made for the largest shapes seen (the online lifecycle), a request at the cursor
 * no larger than its slot takes it (a shorter batch); elsewhere only an equal size counts as
 * evidence of a position. A plan of exact sizes keeps exact matching at the cursor too: there
 * a smaller request is more often an extra one. */
static inline bool fits_slot(const st_runtime* rt, const st_plan_entry* e, uint64_t size) {
  return size_fits(e, size) || (rt->shaped && size <= e->size && size > ST_TINY_MAX);
}

/* The size of the request h + 1 requests back. */
static inline uint64_t past(const st_runtime* rt, int h) { return rt->hist[(rt->hist_head + (unsigned)h) % HISTORY]; }

/* How many of past(h), past(h+1), ... match the entries at v, v-1, ... in a row. */
static int run_length(const st_runtime* rt, uint64_t v, int h) {
  int n = 0;
  for (; h < HISTORY; h++, n++) {
    const st_plan_entry* e = entry_at(rt, v);
    if (!e || !size_fits(e, past(rt, h))) break;
    if (v-- == 0) return n + 1;
  }
  return n;
}

/* The evidence for position v: 1 + how many previous requests match the entries before v,
 * read four ways: in step; with the entry just before v dropped from the run; with the previous
 * request a resized copy of that entry, or an extra one (each counted once the one before
 * matches). Ties
 * between a true position and the same layer one repetition away go to the nearer one. */
static int score_at(const st_runtime* rt, uint64_t v) {
  if (v == 0) return 1;
  int best = run_length(rt, v - 1, 0);
  int inserted = run_length(rt, v - 1, 1); /* the previous request was an extra one */
  if (inserted) best = ST_MAX(best, 1 + inserted);
  if (v >= 2) {
    best = ST_MAX(best, run_length(rt, v - 2, 0));
    int resized = run_length(rt, v - 2, 1);
    if (resized) best = ST_MAX(best, 1 + resized);
  }
  return 1 + best;
}

typedef struct candidate {
  uint64_t v, dist;
  int score;
  bool found;
} candidate;

/* The evidence needed grows with the distance jumped; backward jumps need two matches. */
static bool acceptable(int score, uint64_t dist, bool forward) {
  return score >= 3 || (score == 2 && dist <= 16) || (score == 1 && forward && dist <= 2);
}

/* floor: the evidence that the run is still in step at the cursor (the request resized or
 * extra); a jump must beat it, except to the next position or the one after (a drop). */
static void try_candidate(const st_runtime* rt, uint64_t v, uint64_t size, int floor, candidate* best) {
  const st_plan_entry* e = entry_at(rt, v);
  if (!e || e->size != size) return;
  bool forward = v > rt->cursor;
  uint64_t dist = forward ? v - rt->cursor : rt->cursor - v;
  int score = score_at(rt, v);
  if (!acceptable(score, dist, forward)) return;
  if (score <= floor && !(forward && dist <= 2)) return;
  if (!best->found || score > best->score || (score == best->score && dist < best->dist))
    *best = (candidate){.v = v, .dist = dist, .score = score, .found = true};
}

static void push_history(st_runtime* rt, uint64_t size) {
  rt->hist_head = (rt->hist_head + HISTORY - 1) % HISTORY;
  rt->hist[rt->hist_head] = size;
}

/* The step left the plan (OUTGROWN, OUTSIDE): the growable pool, where there is one and steps
 * are marked, serves its rest. The next marker resets it. */
static void leave_plan_for_step(st_runtime* rt) { rt->outgrown = rt->arena && rt->use_steps; }

/* A request larger than the slot expected at the cursor (runtime.c's OUTGROWN). */
static void note_grown(st_runtime* rt) {
  if (++rt->step_grown >= OUTGROWN && rt->step_grown * OUTGROWN_SHARE > rt->c.hits - rt->step_hits)
    leave_plan_for_step(rt);
}

/* The entry this request matches (advancing the cursor), or NULL for a miss. */
static const st_plan_entry* match(st_runtime* rt, uint64_t size) {
  if (rt->cur_idx < rt->P + rt->I) {
    const st_plan_entry* e = &rt->entries[rt->cur_idx];
    /* Past the largest size its position reached: a planned slot misses it, a dynamic entry
     * (which takes any size) still matches, and either way the step's shape is new (t5_ramp
     * `--small` at 256x: 18.18 -> 16.18 MiB once dynamic entries counted, docs/online.md "A step
     * that outgrows its plan"). */
    if (rt->shaped && size > e->size && (e->cls == PLAN_CLASS_PERIODIC || e->cls == PLAN_CLASS_DYNAMIC))
      note_grown(rt);
    if (fits_slot(rt, e, size)) {
      advance(rt);
      rt->lost = 0;
      push_history(rt, size);
      return e;
    }
  }
  /* Long lost (a plan from another run): search on every 8th miss only, so each miss costs
   * about what the fallback pool does; finding the way back takes at most 7 requests more. */
  if (rt->lost >= 32 && (rt->lost & 7)) {
    rt->lost++;
    push_history(rt, size);
    return NULL;
  }
  candidate best = {0};
  uint64_t cur = rt->cursor;
  /* Repeated structure (layers, experts) offers far positions whose recent sizes match as
   * well as the cursor's: staying in step wins those ties. */
  int floor = cur ? 1 + run_length(rt, cur - 1, 0) : 0;
  uint64_t forward = WINDOW + ST_MIN(rt->lost, LOST_EXTRA);
  for (uint64_t d = 1; d <= forward; d++) {
    try_candidate(rt, cur + d, size, floor, &best);
    if (d <= WINDOW && d <= cur) try_candidate(rt, cur - d, size, floor, &best);
  }
  /* The first positions of the steady state or of the next iteration: a run that ended an
   * iteration early, or a prologue of another length, finds its way back there. */
  uint64_t start = rt->P;
  if (rt->I && cur >= rt->P) start = cur - (cur - rt->P) % rt->I + rt->I;
  for (uint64_t j = 0; j <= HISTORY; j++) try_candidate(rt, start + j, size, floor, &best);
  push_history(rt, size);
  if (!best.found) {
    rt->lost++;
    /* No better place: within a factor of two of the expected size it is taken for that
     * request resized (its position is used up), else for an extra request (the position
     * waits). Guessing wrong costs one resync; not consuming a resized position would shift
     * a run of equal sizes onto its neighbours' offsets. */
    const st_plan_entry* e = rt->cur_idx < rt->P + rt->I ? &rt->entries[rt->cur_idx] : NULL;
    if (e && e->cls != PLAN_CLASS_TINY && size > ST_TINY_MAX && e->size > ST_TINY_MAX &&
        size / 2 <= e->size && e->size / 2 <= size) {
      advance(rt);
      return e;
    }
    /* A tiny position that grew a little (an MoE index tensor of a busier expert) is that
     * request too: left waiting, it would cost the next request a resync. */
    if (e && e->cls == PLAN_CLASS_TINY && size <= 2 * ST_TINY_MAX) {
      advance(rt);
      return e;
    }
    return NULL;
  }
  set_cursor(rt, best.v + 1);
  rt->lost = 0;
  rt->c.resyncs++;
  return entry_at(rt, best.v);
}

/* ---- public within the library ---- */

/* The plan's own rules (plan_validate.c, as when it was built or read), then what this allocator
 * adds: a valid plan made for a finer alignment than the allocator's fits only if every offset
 * happens to meet the allocator's too. */
static stalloc_status_t check_plan(const stalloc_plan* p, uint64_t alignment) {
  if (!p) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "load_plan: NULL plan");
  stalloc_status_t s = st_plan_validate(p, "load_plan");
  if (s || alignment <= p->alignment) return s;
  for (size_t i = 0; i < p->prologue_count + p->iteration_count; i++) {
    bool pro = i < p->prologue_count;
    const st_plan_entry* e = pro ? &p->prologue[i] : &p->iteration[i - p->prologue_count];
    if (e->offset != PLAN_NO_OFFSET && e->offset % alignment)
      return st_fail(STALLOC_ERR_PLAN_MISMATCH, "load_plan: %s entry %zu: offset %llu is not a multiple of the allocator's alignment %llu",
                     pro ? "prologue" : "iteration", pro ? i : i - p->prologue_count,
                     (unsigned long long)e->offset, (unsigned long long)alignment);
  }
  return STALLOC_OK;
}

static stalloc_status_t reserve_pool(st_runtime* rt, const backend_caps* caps, uint64_t size, const st_runtime* share) {
  if (!size) return STALLOC_OK;
  /* A region of the arena is mapped granule by granule where blocks lie; a pool of its own is
   * one allocation, rounded to what the backend hands out. */
  uint64_t granule = rt->arena ? rt->alignment : ST_MAX(caps->granularity, rt->alignment);
  size = st_align_up(size, granule);
  if (!size) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "plan pool is too large");
  if (!st_budget_allows(rt->budget, size))
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "plan pool of %llu bytes passes the memory limit of %llu (%llu reserved)",
                   (unsigned long long)size, (unsigned long long)rt->budget->limit,
                   (unsigned long long)rt->budget->reserved);
  void* base = NULL;
  stalloc_status_t s;
  if (rt->arena) { /* address space only: blocks map what they touch */
    rt->granule = st_arena_granule(rt->arena);
    /* a region too small for this pool grows in place where the address space after it is free */
    bool join = share && share->region && share->arena == rt->arena &&
                (share->space->size >= size || st_arena_region_extend(rt->arena, share->space->region, size));
    /* the region first: it fails for a pool past the arena's range, before any flag is made */
    if (!join && (s = st_arena_region(rt->arena, size, rt->alignment, &base, &rt->space->region))) return s;
    size_t granules = (size_t)((size + rt->granule - 1) / rt->granule);
    if (!(rt->held = calloc(granules, 1))) {
      if (!join) st_arena_region_release(rt->arena, rt->space->region);
      rt->space->region = NULL;
      return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "load_plan: no host memory for %zu granule flags", granules);
    }
    if (join) {
      free(rt->space);
      rt->space = share->space;
      rt->space->size = ST_MAX(rt->space->size, size);
      rt->space->users++;
      base = share->base;
    } else {
      rt->space->size = size;
    }
    rt->region = rt->space->region;
    rt->base = base;
    rt->pool_size = size;
    return STALLOC_OK;
  }
  uint64_t map_granule = caps->map_granularity ? caps->map_granularity : caps->granularity;
  if (caps->can_grow && rt->ops->reserve && rt->ops->map && size % map_granule == 0) {
    /* One reservation mapped at once: the plan needs all of it every iteration. */
    s = rt->ops->reserve(rt->backend, size, &base);
    if (!s && (s = rt->ops->map(rt->backend, base, size))) rt->ops->release(rt->backend, base, size);
    rt->pool_mapped = !s;
  } else {
    s = rt->ops->alloc(rt->backend, size, rt->alignment, 0, &base);
  }
  if (s) return s;
  rt->base = base;
  rt->pool_size = size;
  st_budget_add(rt->budget, size);
  return STALLOC_OK;
}

stalloc_status_t st_runtime_create(const backend_ops* ops, void* backend, const backend_caps* caps,
                                   st_budget* budget, st_arena* arena, uint64_t alignment,
                                   const stalloc_plan* plan, uint64_t position, bool shaped,
                                   const st_runtime* share, st_runtime** out) {
  stalloc_status_t s = check_plan(plan, alignment);
  if (s) return s;
  st_runtime* rt = calloc(1, sizeof *rt);
  if (!rt || !(rt->space = calloc(1, sizeof *rt->space))) {
    free(rt);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "load_plan: no host memory");
  }
  rt->space->users = 1;
  rt->ops = ops;
  rt->backend = backend;
  rt->budget = budget;
  rt->arena = arena;
  rt->shared = arena ? st_arena_shared_count(arena) : NULL;
  rt->alignment = ST_MAX(alignment, plan->alignment); /* a power of two: validated */
  rt->rng = 0x9E3779B9u;
  rt->P = plan->prologue_count;
  rt->I = plan->iteration_count;
  rt->use_steps = plan->uses_step_markers != 0;
  rt->shaped = shaped;
  size_t n = (size_t)(rt->P + rt->I);
  rt->entries = malloc((n ? n : 1) * sizeof *rt->entries);
  rt->window_of = malloc((rt->I ? rt->I : 1) * sizeof *rt->window_of);
  rt->windows = malloc((plan->window_count ? plan->window_count : 1) * sizeof *rt->windows);
  rt->ranges = malloc((plan->range_count ? plan->range_count : 1) * sizeof *rt->ranges);
  rt->ready = calloc(n ? n : 1, 1);
  if (!rt->entries || !rt->window_of || !rt->windows || !rt->ranges || !rt->ready) {
    st_runtime_destroy(rt);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "load_plan: no host memory for %zu entries", n);
  }
  if (rt->P) memcpy(rt->entries, plan->prologue, rt->P * sizeof *rt->entries);
  if (rt->I) memcpy(rt->entries + rt->P, plan->iteration, rt->I * sizeof *rt->entries);
  if (plan->window_count) memcpy(rt->windows, plan->windows, plan->window_count * sizeof *rt->windows);
  if (plan->range_count) memcpy(rt->ranges, plan->ranges, plan->range_count * sizeof *rt->ranges);
  rt->window_count = plan->window_count;
  for (uint64_t i = 0; i < rt->I; i++) rt->window_of[i] = UINT32_MAX;
  for (size_t w = 0; w < plan->window_count; w++)
    for (uint64_t i = plan->windows[w].begin; i < plan->windows[w].end; i++)
      rt->window_of[i % rt->I] = (uint32_t)w;
  /* A planned range must lie in the pool even after rounding its end up. */
  uint64_t need = plan->pool_size;
  for (size_t i = 0; i < n; i++)
    if (rt->entries[i].offset != PLAN_NO_OFFSET)
      need = ST_MAX(need, st_align_up(rt->entries[i].offset + rt->entries[i].size, rt->alignment));
  s = reserve_pool(rt, caps, need, share);
  if (s) {
    st_runtime_destroy(rt);
    return s;
  }
  set_cursor(rt, position);
  *out = rt;
  return STALLOC_OK;
}

void st_runtime_destroy(st_runtime* rt) {
  if (!rt) return;
  st_range_node* mine = NULL;
  rt->space->root = sift_out(rt->space->root, rt, NULL, &mine);
  for (st_range_node* next; mine; mine = next) {
    next = mine->left;
    node_release(rt, mine);
  }
  for (st_range_node *n = rt->spare, *next; n; n = next) {
    next = n->pnext;
    free(n);
  }
  bool last = --rt->space->users == 0;
  if (rt->region) {
    for (uint64_t g = 0; !rt->counted && g * rt->granule < rt->pool_size; g++)
      if (rt->held[g]) st_arena_region_unref(rt->arena, rt->base + g * rt->granule, rt->granule);
    if (last) st_arena_region_release(rt->arena, rt->region);
  } else if (rt->base) {
    if (rt->pool_mapped) {
      rt->ops->unmap(rt->backend, rt->base, rt->pool_size);
      rt->ops->release(rt->backend, rt->base, rt->pool_size);
    } else {
      rt->ops->free(rt->backend, rt->base, rt->pool_size);
    }
    st_budget_sub(rt->budget, rt->pool_size);
  }
  free(rt->held);
  free(rt->ready);
  free(rt->entries);
  free(rt->window_of);
  free(rt->windows);
  free(rt->ranges);
  if (last) free(rt->space);
  free(rt);
}

stalloc_status_t st_runtime_alloc(st_runtime* rt, uint64_t size, uint64_t stream, st_rt_outcome* outcome,
                                  void** ptr, st_range_node** node) {
  if (rt->pending_head) poll_pending(rt);
  if (__builtin_expect(rt->outgrown, 0)) { /* the step outgrew the plan: the pool serves its rest */
    if (size > ST_TINY_MAX) {
      rt->c.misses++;
      rt->c.miss_bytes += size;
    }
    *outcome = size <= ST_TINY_MAX ? RT_TINY : RT_FALLBACK;
    return STALLOC_OK;
  }
  uint64_t expected = rt->cursor; /* where a miss would have been: picks its reuse window */
  const st_plan_entry* e = match(rt, size);
  uint64_t end = st_align_up(size, rt->alignment);
  if (e && e->offset != PLAN_NO_OFFSET && e->cls != PLAN_CLASS_DYNAMIC && end &&
      e->offset + end <= rt->pool_size) {
    /* A resized request (match() took it for this entry) keeps the planned offset when it is
     * no larger than planned. */
    size_t idx = (size_t)(e - rt->entries);
    if (size <= e->size && range_free(rt, e->offset, e->offset + end, stream)) {
      stalloc_status_t s;
      if (rt->region && rt->counted) {
        if ((s = st_arena_region_ref(rt->arena, rt->base + e->offset, end, stream))) return s;
      } else if (rt->region && !rt->ready[idx]) { /* its granules, the first time it is hit */
        if ((s = hold_range(rt, e->offset, e->offset + st_align_up(e->size, rt->alignment), stream))) return s;
        rt->ready[idx] = 1;
      }
      settle_held(rt, e->offset, end, stream);
      st_range_node* n = NULL;
      if ((s = node_new(rt, e->offset, e->offset + end, stream, &n))) {
        if (rt->counted) st_arena_region_unref(rt->arena, rt->base + e->offset, end);
        return s;
      }
      rt->c.hits++;
      rt->c.hit_bytes += size;
      *outcome = RT_HIT;
      *ptr = rt->base + e->offset;
      *node = n;
      return STALLOC_OK;
    }
    /* Its bytes are still held (a block kept longer than planned), or it grew (an MoE
     * position that repeated its size in the recorded iterations): inside a reuse window it
     * is tried there, like a dynamic request, before the fallback pool. */
    rt->c.misses++;
  } else if (e && e->cls != PLAN_CLASS_DYNAMIC && e->cls != PLAN_CLASS_TINY) {
    rt->c.misses++;
  } else if (!e && size > ST_TINY_MAX) {
    rt->c.misses++;
  }
  if (size <= ST_TINY_MAX) {
    *outcome = RT_TINY;
    return STALLOC_OK;
  }
  uint32_t w = UINT32_MAX;
  if (e && e->cls == PLAN_CLASS_DYNAMIC) w = e->window;
  else if (e && (size_t)(e - rt->entries) >= rt->P) w = rt->window_of[(size_t)(e - rt->entries) - rt->P];
  else if (!e && expected >= rt->P && rt->I) w = rt->window_of[(expected - rt->P) % rt->I];
  if (!e || (e->cls != PLAN_CLASS_DYNAMIC)) rt->c.miss_bytes += size;
  uint64_t off;
  if ((w != UINT32_MAX && place_dynamic(rt, w, size, &off)) || (rt->lost >= LOST_IN_POOL && place_in_pool(rt, size, &off))) {
    stalloc_status_t s = STALLOC_OK;
    if (rt->region)
      s = rt->counted ? st_arena_region_ref(rt->arena, rt->base + off, end, stream) : hold_range(rt, off, off + end, stream);
    if (s) return s;
    settle_held(rt, off, end, stream);
    st_range_node* n = NULL;
    if ((s = node_new(rt, off, off + end, stream, &n))) {
      if (rt->counted) st_arena_region_unref(rt->arena, rt->base + off, end);
      return s;
    }
    rt->c.dynamic++;
    *outcome = RT_DYNAMIC;
    *ptr = rt->base + off;
    *node = n;
    return STALLOC_OK;
  }
  if (rt->shaped && ++rt->step_outside >= OUTSIDE && rt->step_outside * OUTSIDE_SHARE > rt->c.hits - rt->step_hits)
    leave_plan_for_step(rt);
  *outcome = RT_FALLBACK;
  return STALLOC_OK;
}

void st_runtime_free(st_runtime* rt, st_range_node* n, uint64_t stream) {
  if (!rt->ops->event_record) {
    node_drop(rt, n);
    return;
  }
  /* Reusable at once on `stream`, elsewhere once the event is done; with no event (the
   * record failed) it stays for its own stream only, never done for the others. */
  if (rt->ops->event_record(rt->backend, stream, &n->event) != STALLOC_OK) n->event = NULL;
  n->state = NODE_PENDING;
  n->stream = stream;
  /* Counted: its granules go back now, with the stream's queued work noted, so another plan's
   * blocks can alias them at the peak rather than map new memory while the device catches up. */
  if (rt->region && rt->counted)
    n->released = st_arena_region_free(rt->arena, rt->base + n->start, n->end - n->start, stream);
  n->pnext = NULL;
  n->pprev = rt->pending_tail;
  if (rt->pending_tail) rt->pending_tail->pnext = n;
  else rt->pending_head = n;
  rt->pending_tail = n;
}

void st_runtime_step(st_runtime* rt) {
  rt->step_hits = rt->c.hits;
  rt->step_grown = rt->step_outside = 0;
  rt->outgrown = false;
  if (rt->counted && !rt->arena_misses) hold_granules(rt); /* a step that followed the plan */
  rt->arena_misses = 0;
  if (!rt->use_steps || !rt->I || rt->cursor < rt->P) return;
  uint64_t k = (rt->cursor - rt->P) % rt->I;
  if (!k) return;
  /* The last iteration ended early: the next alloc starts a new one. */
  set_cursor(rt, rt->cursor - k + rt->I);
  rt->lost = 0;
  rt->c.resyncs++;
}

bool st_runtime_step_begins(const st_runtime* rt, const uint64_t* sizes, size_t n) {
  if (!rt->use_steps || rt->I < n) return false;
  for (size_t i = 0; i < n; i++)
    if (rt->entries[rt->P + i].size != sizes[i]) return false;
  return true;
}

void st_runtime_join_step(st_runtime* rt, uint64_t served) {
  st_runtime_step(rt);
  if (rt->use_steps && rt->I && rt->cursor >= rt->P && served < rt->I) set_cursor(rt, rt->cursor + served);
  rt->lost = 0;
}

st_runtime* st_runtime_of(const st_range_node* node) { return node->owner; }

bool st_runtime_idle(st_runtime* rt) {
  while (rt->pending_head && event_done(rt, rt->pending_head)) node_drop(rt, rt->pending_head);
  return rt->nodes == 0;
}

const st_runtime_counters* st_runtime_counters_of(const st_runtime* rt) { return &rt->c; }

void st_runtime_reset_counters(st_runtime* rt) {
  memset(&rt->c, 0, sizeof rt->c);
  rt->step_hits = 0;
}

void st_runtime_pool_allocation(const st_runtime* rt, void** base, uint64_t* size) {
  bool whole = !rt->pool_mapped && !rt->region;
  *base = whole ? rt->base : NULL;
  *size = whole ? rt->pool_size : 0;
}

uint64_t st_runtime_pool_size(const st_runtime* rt) { return rt->pool_size; }

void st_runtime_missed_into_arena(st_runtime* rt) {
  rt->arena_misses++;
  count_granules(rt);
}

bool st_runtime_outgrown(const st_runtime* rt) { return rt->outgrown; }

void st_runtime_retire(st_runtime* rt) {
  count_granules(rt);
  rt->retired = true;
}

bool st_runtime_span(const st_runtime* rt, const void** base, uint64_t* size) {
  if (!rt->region) return false;
  *base = rt->base;
  *size = rt->pool_size;
  return true;
}

void st_runtime_pause(st_runtime* rt) {
  count_granules(rt);
  rt->arena_misses = 0;
}
