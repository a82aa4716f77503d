/* hints.c - layout hints for the growable pool (see hints.h, docs/online.md).
 *
 * Best fit knows nothing of lifetimes, and on a step's peak it leaves a hole, with its partly
 * used granules, wherever a short-lived block sat among long-lived ones. The step before knew
 * every lifetime: at each boundary a thread places that step's requests (their sizes and
 * lifetimes by position) around the blocks in use at the boundary (fixed items: weights,
 * optimizer state), with the planner's constructive placement, which is fast and the same on
 * every machine. The next step's request at position j then goes to the offset position j got,
 * if it has the same size and those bytes are free; else best fit. A step that made requests
 * the layout's step did not, or left some out (the first training step after the warm-up,
 * which made the optimizer's state), takes position j + shift once its last requests say by
 * how much (realign.h).
 *
 * Hints are kept per kind of step (steps with the same number of allocs, as in online.c): a
 * step takes the hints of the kind expected next, else the latest; while its first requests
 * are those of another kind's hints (one that does not back off), it takes those, also when
 * the kind expected has none to give. A step unlike the one planned (sizes an
 * MoE gate routes, a kind never seen) misses its hints, and they stop for the rest of it; a
 * kind whose hints stop for one of its steps (not for a step of another kind, once they served
 * one of its own), or whose sizes changed at more than one position in 16 since its step
 * before, backs off for its next 1, 3, 7, ... steps. The pool stays the only owner of its
 * bytes: a hint is only a place to look first, so a wrong one costs memory, never safety. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/virtual.h"
#include "base/clock.h"
#include "base/grow.h"
#include "plan/place.h"
#include "plan/place_granules.h"
#include "runtime/arena.h"
#include "runtime/hints.h"
#include "runtime/realign.h"
#include "runtime/shapes.h"

#define LIVE UINT32_MAX /* freed_at of a block not freed in its step */
#define SETS 4          /* kinds of step with hints of their own */
#define PROBE 16        /* first requests of a step that may move it to another kind's hints */

typedef struct hint_job {
  st_place_item* items;  /* the step's requests, then the blocks in use as fixed items */
  size_t requests, count;
  uint64_t alignment;
  uint64_t* offsets;     /* result */
  st_place_item* unpinned; /* a pending job's items before its first requests were fixed where
                              they went (pin_lifetimes), those that outlive the step still fixed;
                              NULL: none */
  uint64_t* next_offsets; /* the layout of `unpinned`, for the kind's next steps (NULL: none) */
  uint64_t* previous;    /* the kind's hints the step followed (a pending job's: up to its key),
                            where they have the job's sizes (NULL: none) */
  uint64_t* before;      /* the kind's hints before those (NULL: none) */
  uint64_t *ref_offset, *ref_size; /* the hints the step that ended followed, whatever their kind
                                      or sizes (NULL: none): their granules are mapped now */
  size_t ref_count;
  bool* once;            /* by request: lives past the step with nothing to say its like is freed
                            in the next (a warm-up's optimizer state); NULL: none such */
  uint64_t hinted, best_fit; /* granules the step needed each way, replayed (0: not known) */
  uint64_t hinted_alone, best_fit_alone; /* the same without the requests that outlive it */
  double seconds;
  bool ok;
  bool predicted;        /* sizes the rules foretold for step `step` (shapes.h) */
  bool repeats;          /* the step it came from asked its kind's step before's sizes exactly */
  bool followed;         /* the step it came from followed its hints for a quarter of its
                            requests or more (not said of sizes the rules foretold) */
  uint32_t repeated, changed; /* the run's steps so far that repeated their kind's step before,
                                 and that changed where no rule says (st_hints.repeated) */
  uint32_t step;
  size_t most;           /* the most requests a step of the run made so far */
  atomic_int done;
} hint_job;

typedef struct hint_set {
  uint64_t* offset;      /* by position */
  uint64_t* size;        /* aligned */
  size_t count;          /* positions: the allocs of the step they came from (its kind) */
  uint64_t made;         /* the step they came from */
  uint32_t failed;       /* steps of this kind in a row whose hints stopped */
  uint32_t skip;         /* steps of this kind still to serve without hints */
  bool foretold;         /* made with sizes the rules foretold (shapes.h) */
  bool foretold_missed;  /* the kind backs off because foretold hints missed (not because hints
                            made without rules did, nor because sizes changed with no rule) */
  bool served;           /* a step of this kind took these hints and they never stopped */
  bool* outlived;        /* by position: its block outlived its step in some step of this kind
                            (NULL: none did yet) */
  uint64_t* next;        /* the offsets its next steps take (next_offsets), from the next boundary
                            on; NULL: these */
  uint64_t version;      /* of its offsets, for st_hints_layout: new at each change */
  st_realign* realign;   /* its runs of sizes, made when a step first loses its place in them */
  uint64_t* before;      /* the offsets the kind had before these, for as many positions (NULL:
                            none): kept again where they still hold (keep_previous) */
} hint_set;

struct st_hints {
  uint64_t alignment;
  bool wait;
  uint32_t step;         /* the step under way */
  bool spoiled;          /* some of its requests went elsewhere */
  uint64_t* sizes;       /* the step under way: each position's aligned size */
  uint64_t* asked;       /* its requested size */
  uint32_t* freed_at;    /* allocs before its free, or LIVE */
  size_t n, cap;
  /* The blocks the step before left live, in order of position: their sizes, and the allocs
   * of the step under way before each one's free (LIVE: not yet); see predict_frees. */
  uint32_t* rank_of;     /* by position in the step before: its rank among those, or LIVE */
  size_t rank_count;     /* positions in rank_of */
  uint64_t* crossed_size;
  uint32_t* crossed_at;
  size_t crossed;
  hint_set sets[SETS];
  int active;            /* the set serving the step under way, or -1 */
  bool resting;          /* the step under way goes without hints, foretold ones included: its
                            kind backs off because foretold hints missed */
  uint32_t hits, misses;
  /* The step's position p takes the active set's position p + shift: a step that made requests
   * the set's step did not (or the other way round) picks its hints up again after them
   * (realign.h). trial: a shift on trial for trial_left more requests; missed_bits: whether
   * each of the last requests missed at the shift, the latest lowest; lost_at: the first miss
   * since the last ST_REALIGN_RUN requests in a row that did not (SIZE_MAX: none); realign_off:
   * the step looks for no other shift. */
  ptrdiff_t shift, trial;
  uint32_t missed_bits, trial_left;
  size_t lost_at;
  bool realign_off;
  /* Where the step's first requests went (st_hints_placed; UINT64_MAX: not in the pool), and
   * the first position the active set serves: a request whose hinted bytes one of the requests
   * before that position holds is not the set's miss (st_hints_outcome). */
  uint64_t first_at[PROBE];
  size_t served_from;
  /* Requests whose hinted bytes one of those held, by position, and where they went instead:
   * a request whose hinted bytes one of them holds is not a miss either (PROBE at most). */
  uint32_t displaced[PROBE];
  uint64_t displaced_at[PROBE];
  size_t displaced_n;
  /* Steps of a kind seen before: those whose sizes repeated the step before of their kind (or
   * changed only as the shape rules foretell), and those that changed at two positions or more
   * with no rule (an MoE gate routing sizes): how likely a step is to follow its hints to the
   * end (layout_at_risk). */
  uint32_t repeated, changed;
  bool last_repeated; /* the step that ended last asked its kind's step before's sizes exactly */
  bool as_before;     /* the step under way has asked so far what the kind expected asked last */
  size_t expected_n;  /* allocs of the kind expected (0: not known) */
  hint_job* job;
  /* A layout of the step that ended, started once the next step's request at the kind's key
   * position says its shape (shapes.h): a shape no step had before is placed as itself. */
  hint_job* pending;
  size_t pending_key;
  st_shapes* shapes;
  pthread_t thread;
  bool thread_live;
  uint64_t made, kept;   /* layouts finished, and kept */
  uint64_t versions;     /* offsets given to sets so far (hint_set.version) */
  double longest, total; /* seconds they took */
  size_t most;           /* the most requests a step made so far */
};

static void start_pending(st_hints* h);

/* The set that serves the step from here (-1: none), from its position as the step's own. */
static void take_set(st_hints* h, int i) {
  h->active = i;
  h->served_from = h->n;
  h->shift = 0;
  h->missed_bits = h->trial_left = 0;
  h->lost_at = SIZE_MAX;
  h->realign_off = false;
}

stalloc_status_t st_hints_create(uint64_t alignment, bool wait, st_hints** out) {
  st_hints* h = calloc(1, sizeof *h);
  if (!h) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "hints: no host memory");
  h->alignment = alignment ? alignment : 1;
  h->wait = wait;
  h->step = 1;
  take_set(h, -1);
  h->shapes = st_shapes_create(); /* NULL: no host memory, hints without predicted shapes */
  *out = h;
  return STALLOC_OK;
}

static void free_job(hint_job* job) {
  if (!job) return;
  free(job->once);
  free(job->items);
  free(job->offsets);
  free(job->unpinned);
  free(job->next_offsets);
  free(job->previous);
  free(job->before);
  free(job->ref_offset);
  free(job->ref_size);
  free(job);
}

static void join(st_hints* h) {
  if (h->thread_live) {
    pthread_join(h->thread, NULL);
    h->thread_live = false;
  }
}

static void clear_set(hint_set* s) {
  free(s->offset);
  free(s->before);
  free(s->size);
  free(s->outlived);
  free(s->next);
  st_realign_destroy(s->realign);
  *s = (hint_set){0};
}

void st_hints_destroy(st_hints* h) {
  if (!h) return;
  join(h);
  free_job(h->job);
  free_job(h->pending);
  st_shapes_destroy(h->shapes);
  free(h->sizes);
  free(h->asked);
  free(h->freed_at);
  free(h->rank_of);
  free(h->crossed_size);
  free(h->crossed_at);
  for (int i = 0; i < SETS; i++) clear_set(&h->sets[i]);
  free(h);
}

uint32_t st_hints_step(const st_hints* h) { return h->step; }

/* The set of hints made from steps of `count` allocs, or -1. */
static int set_of(const st_hints* h, size_t count) {
  for (int i = 0; i < SETS; i++)
    if (h->sets[i].offset && h->sets[i].count == count) return i;
  return -1;
}

/* Hints that missed (or whose sizes changed with no rule): the next 1, 3, 7, ... (up to 63)
 * steps of their kind go without. */
static void back_off(hint_set* s, bool missed) {
  s->failed = ST_MIN(s->failed + 1, 6u);
  s->skip = (1u << s->failed) - 1;
  s->foretold_missed = missed && s->foretold;
}

/* The finished job's offsets become the hints of its kind (in place of the oldest set, for a
 * kind with none); they serve the step under way from its current position on. false: they
 * were not kept (no better than best fit, or no host memory). */
static bool adopt(st_hints* h) {
  hint_job* job = h->job;
  join(h);
  h->job = NULL;
  h->made++;
  h->kept += job->ok;
  h->longest = ST_MAX(h->longest, job->seconds);
  h->total += job->seconds;
  uint64_t* size = job->ok ? malloc((job->requests ? job->requests : 1) * sizeof *size) : NULL;
  if (size) {
    int i = set_of(h, job->requests);
    for (int j = 0; j < SETS && i < 0; j++)
      if (!h->sets[j].offset) i = j;
    if (i < 0) { /* the kind whose hints are oldest gives its place */
      i = 0;
      for (int j = 1; j < SETS; j++)
        if (h->sets[j].made < h->sets[i].made) i = j;
    }
    hint_set was = h->sets[i];
    bool same = was.offset && was.count == job->requests;
    size_t changed = 0; /* positions whose size differs from the kind's step before */
    for (size_t j = 0; j < job->requests; j++) {
      size[j] = job->items[j].size;
      changed += same && size[j] != was.size[j];
    }
    bool* outlived = same ? was.outlived : NULL;
    uint64_t* before = same ? was.offset : NULL;
    if (same) h->sets[i].outlived = NULL, h->sets[i].offset = NULL;
    clear_set(&h->sets[i]);
    h->sets[i] = (hint_set){job->offsets, size, job->requests, h->step, same ? was.failed : 0,
                            same ? was.skip : 0, job->predicted, same && was.foretold_missed,
                            same && was.served, outlived, job->next_offsets, ++h->versions, NULL, before};
    job->next_offsets = NULL;
    /* More than one position in 16 changed size since the kind's step before (an MoE gate
     * routes other sizes each step, a padded length changes) and no rule said how: the next
     * step would follow its hints only in part, and the blocks placed before they stop can
     * cost more than best fit alone. The kind backs off as when its hints stop. */
    if (!job->predicted && changed > job->requests / 16) back_off(&h->sets[i], false);
    job->offsets = NULL;
    /* a step under way keeps its kind's; sizes predicted for it are its own, and what the
     * hints before them missed says nothing of these (a live run may finish them a step late:
     * then they are the kind's like any others) */
    bool its_own = job->predicted && job->step == h->step && !h->resting;
    if ((!h->resting && (h->active < 0 || h->active == i)) || its_own) take_set(h, i);
    if (its_own) h->hits = h->misses = 0;
  }
  free_job(job);
  return size != NULL;
}

/* Within a step's first requests: another kind's hints whose start is the step's own (the
 * latest made, when several are: a warm-up step begins as a training step does), not those of
 * a kind that backs off. (The last step of a kind's back-off may still take its own: keeping
 * it out of that step too cost 2 MiB on gpt2_eval and llama_eval at 256x and saved 4 on
 * mixtral_1f1b.) */
static void recognise(st_hints* h) {
  int best = -1;
  for (int i = 0; i < SETS; i++) {
    const hint_set* s = &h->sets[i];
    if (i == h->active || !s->offset || s->count < h->n || s->skip) continue;
    if (memcmp(s->size, h->sizes, h->n * sizeof *h->sizes) == 0 && (best < 0 || s->made > h->sets[best].made))
      best = i;
  }
  if (best >= 0) {
    take_set(h, best);
    h->served_from = h->n - 1; /* the request under way is its */
    h->misses = 0;
  }
}

static bool stopped(const st_hints* h) { return h->misses >= 2 && h->misses > h->hits / 4; }

/* Appends a request to the step under way: its position, or LIVE when the step is not
 * recorded (a plan served part of it, or no host memory). */
static uint32_t record(st_hints* h, uint64_t size, uint64_t need) {
  uint32_t position = LIVE;
  if (!h->spoiled && h->n < UINT32_MAX - 1) {
    size_t cap = h->cap; /* three arrays of one length */
    uint64_t* s = st_room(h->sizes, h->n, &cap, sizeof *s, 1024);
    if (s) h->sizes = s;
    cap = h->cap;
    uint64_t* a = s ? st_room(h->asked, h->n, &cap, sizeof *a, 1024) : NULL;
    if (a) h->asked = a;
    cap = h->cap;
    uint32_t* f = a ? st_room(h->freed_at, h->n, &cap, sizeof *f, 1024) : NULL;
    if (f) {
      h->freed_at = f;
      h->cap = cap;
    } else { /* no host memory: this step is not planned from */
      h->spoiled = true;
    }
    if (!h->spoiled) {
      h->sizes[h->n] = need;
      h->asked[h->n] = size;
      h->freed_at[h->n] = LIVE;
      if (h->n < PROBE) h->first_at[h->n] = UINT64_MAX;
      position = (uint32_t)h->n++;
    }
  }
  return position;
}

/* Trials a shift must hold for, request after request, before the step takes it: an MoE
 * layer's routed sizes, as another layer of the set's step had them, can match a run by
 * chance, and held there for up to ten requests in the Mixtral recordings. */
#define REALIGN_TRIAL (2 * ST_REALIGN_RUN)
/* Requests past the first miss within which a shift is looked for: the step may have made
 * that many the set's did not before the run that follows them. */
#define REALIGN_WINDOW (8 * ST_REALIGN_RUN)

/* Of the step's last ST_REALIGN_RUN requests, those that missed their size at the shift. */
static unsigned recent_misses(const st_hints* h) {
  return (unsigned)__builtin_popcount(h->missed_bits & ((1u << ST_REALIGN_RUN) - 1));
}

/* The request at `position` missed its size at the shift. A step that lost the set there, with
 * most of its last ST_REALIGN_RUN requests missed (a size that changed here and there, a
 * padded length, keeps its place), looks for the shift at which the set's sizes are its last
 * ones since the first miss (st_realign_find), up to REALIGN_WINDOW requests past it, and puts
 * the one it finds on trial. Not in a run whose steps changed where no rule says (an MoE
 * gate's routing): such a step follows its hints only in part whatever the shift. */
static void realign(st_hints* h, size_t position) {
  if (h->realign_off || h->trial_left || h->changed) return;
  if (h->lost_at == SIZE_MAX) h->lost_at = position;
  if (recent_misses(h) < ST_REALIGN_RUN * 3 / 4 || position - h->lost_at >= REALIGN_WINDOW ||
      position + 1 < h->lost_at + ST_REALIGN_RUN)
    return;
  hint_set* s = &h->sets[h->active];
  if (!s->realign) s->realign = st_realign_create(s->size, s->count);
  if (s->realign && st_realign_find(s->realign, h->sizes, position, h->lost_at, h->shift, &h->trial))
    h->trial_left = REALIGN_TRIAL;
}

/* A shift on trial meets the request at `position`: taken once it held for REALIGN_TRIAL
 * requests; one miss and the step looks for no other. */
static void try_shift(st_hints* h, size_t position, uint64_t need) {
  const hint_set* s = &h->sets[h->active];
  ptrdiff_t at = (ptrdiff_t)position + h->trial;
  if (at < 0 || (size_t)at >= s->count || s->size[at] != need) {
    h->trial_left = 0;
    h->realign_off = true;
  } else if (--h->trial_left == 0) {
    h->shift = h->trial;
    h->missed_bits = 0;
    h->lost_at = SIZE_MAX;
  }
}

uint32_t st_hints_alloc(st_hints* h, uint64_t size, uint64_t* offset) {
  *offset = UINT64_MAX;
  if (h->job && atomic_load_explicit(&h->job->done, memory_order_acquire)) adopt(h);
  uint64_t need = st_align_up(size, h->alignment);
  uint32_t position = record(h, size, need);
  if (h->as_before) h->as_before = position != LIVE && st_shapes_same_at(h->shapes, h->expected_n, position, size);
  if (h->pending && position == h->pending_key) start_pending(h);
  /* no hints expected (the kind expected backs off, or has none): the step may still begin as
   * another kind's (a batch ramp's second step of a new size, expected to be of the old one) */
  if (h->active < 0 && position < PROBE && !h->resting) recognise(h);
  if (h->active < 0 || position == LIVE) return position;
  const hint_set* s = &h->sets[h->active];
  if (position < s->count && s->size[position] != need && position < PROBE) recognise(h);
  s = &h->sets[h->active];
  if (stopped(h)) return position;
  if (h->trial_left) try_shift(h, position, need);
  ptrdiff_t at = (ptrdiff_t)position + h->shift;
  bool in = at >= 0 && (size_t)at < s->count, same = in && s->size[at] == need;
  h->missed_bits = h->missed_bits << 1 | !same;
  if (!recent_misses(h)) h->lost_at = SIZE_MAX; /* back in step */
  if (!same) realign(h, position);
  if (same) *offset = s->offset[at];
  else if (in) h->misses++; /* another size there: not the step planned */
  return position;
}

bool st_hints_layout(const st_hints* h, const uint64_t** offsets, const uint64_t** sizes, size_t* n,
                     uint64_t* version) {
  int i = h->active >= 0 && !h->resting && !stopped(h) ? h->active : -1;
  *version = i < 0 ? 0 : h->sets[i].version;
  if (i < 0) return false;
  *offsets = h->sets[i].offset;
  *sizes = h->sets[i].size;
  *n = h->sets[i].count;
  return true;
}

void st_hints_placed(st_hints* h, uint32_t position, uint64_t offset) {
  if (h->pending && position < h->pending_key) h->pending->items[position].fixed_offset = offset;
  if (position < PROBE && position < h->n) h->first_at[position] = offset;
  if (h->displaced_n && h->displaced[h->displaced_n - 1] == position) h->displaced_at[h->displaced_n - 1] = offset;
}

/* Whether the step's request at position q, placed at `at` and not freed, holds some of
 * [offset, offset + size). */
static bool holds(const st_hints* h, size_t q, uint64_t at, uint64_t offset, uint64_t size) {
  return h->freed_at[q] == LIVE && at < offset + size && offset < at + h->sizes[q];
}

/* A step may begin as two kinds do (an evaluation pass expected, a training step come: both
 * ask the batch's input ids first). Its first requests go where the expected kind's layout (or
 * best fit) puts them, until one says the step is the other kind's, whose layout then serves it;
 * that layout can put the step's next requests on the bytes those first ones hold. Such a miss
 * says nothing of the layout: counted, two of them stopped the step's hints for all its
 * requests (the held-out BERT and T5 with an evaluation pass after every second step,
 * tools/make_traces.py --small --seed 157 --optimizer sgd --amp: each run's peak, 14 MiB over
 * the same run without the passes at 256x). Nor is a miss on the bytes such a request, put off
 * its place, took where best fit put it: a chain of them followed when those steps came in
 * random order (bench_online --draw-steps). */
void st_hints_outcome(st_hints* h, bool taken, uint64_t offset) {
  if (taken) {
    h->hits++;
    return;
  }
  if (h->n) {
    size_t p = h->n - 1;
    uint64_t size = h->sizes[p];
    bool held = false;
    for (size_t q = 0; q < ST_MIN(h->served_from, (size_t)PROBE) && q < p && !held; q++)
      held = holds(h, q, h->first_at[q], offset, size);
    for (size_t k = 0; k < h->displaced_n && !held; k++) held = holds(h, h->displaced[k], h->displaced_at[k], offset, size);
    if (held) {
      if (h->displaced_n < PROBE) {
        h->displaced[h->displaced_n] = (uint32_t)p;
        h->displaced_at[h->displaced_n++] = UINT64_MAX;
      }
      return;
    }
  }
  h->misses++;
}

void st_hints_freed(st_hints* h, uint32_t step, uint32_t position) {
  if (step == h->step && !h->spoiled && position < h->n) h->freed_at[position] = (uint32_t)h->n;
  else if (step + 1 == h->step && position < h->rank_count && h->rank_of[position] != LIVE)
    h->crossed_at[h->rank_of[position]] = (uint32_t)h->n;
}

void st_hints_spoil(st_hints* h) { h->spoiled = true; }

bool st_hints_follow(st_hints* h, const uint64_t* asked, size_t k) {
  if (!h->spoiled || h->n || h->pending) return false;
  h->spoiled = false;
  take_set(h, -1); /* recorded only: hints made for the plan's sizes would miss */
  h->resting = true;
  for (size_t j = 0; j < k && !h->spoiled; j++) record(h, asked[j], st_align_up(asked[j], h->alignment));
  return !h->spoiled;
}

bool st_hints_wants_layout(const st_hints* h) { return !h->spoiled && h->n && !h->job; }

/* The most bytes of granules the step needed, replayed on a private arena over the virtual
 * backend (nothing mapped for real) with the blocks in use where they are, each of its first
 * `hinted` requests at its hinted offset (offsets non-NULL), the others by best fit; 0 if the
 * replay could not run. */
static uint64_t replayed_peak(const hint_job* job, const uint64_t* offsets, size_t hinted) {
  size_t n = job->requests;
  uint64_t top = 0, sum = 0;
  for (size_t i = 0; i < job->count; i++) {
    uint64_t at = i < n ? (offsets ? offsets[i] : 0) : job->items[i].fixed_offset;
    top = ST_MAX(top, at + job->items[i].size);
    sum += job->items[i].size;
  }
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  o.virtual_capacity = st_align_up(top + sum + job->alignment, ST_VIRTUAL_GRANULE) + 2 * ST_VIRTUAL_GRANULE;
  const backend_ops* ops = st_backend_get(STALLOC_BACKEND_VIRTUAL);
  void* backend = NULL;
  backend_caps caps;
  st_budget budget = {0};
  st_arena* arena = NULL;
  st_arena_block** blocks = calloc(job->count ? job->count : 1, sizeof *blocks);
  size_t* by_free = malloc((n + 2) * sizeof *by_free); /* items bucketed by their free */
  size_t* order = malloc((job->count ? job->count : 1) * sizeof *order);
  uint64_t peak = 0;
  if (!blocks || !by_free || !order || ops->create(&o, &backend, &caps)) goto out;
  if (st_arena_create(ops, backend, &caps, job->alignment, o.virtual_capacity - ST_VIRTUAL_GRANULE, &budget, &arena)) goto out;
  st_arena_index_addresses(arena);
  void* p;
  for (size_t i = n; i < job->count; i++) /* the blocks in use, where they are */
    if (!st_arena_alloc_at(arena, job->items[i].fixed_offset, job->items[i].size, 0, &p, &blocks[i])) goto out;
  memset(by_free, 0, (n + 2) * sizeof *by_free);
  for (size_t j = 0; j < job->count; j++) by_free[job->items[j].upper]++;
  for (size_t t = 1; t < n + 2; t++) by_free[t] += by_free[t - 1];
  for (size_t j = job->count; j-- > 0;) order[--by_free[job->items[j].upper]] = j;
  size_t next = 0; /* items in order of their frees (at the alloc index `upper`) */
  for (size_t t = 0; t < n; t++) {
    for (; next < job->count && job->items[order[next]].upper <= t; next++)
      if (blocks[order[next]]) st_arena_free(arena, blocks[order[next]], 0);
    const st_place_item* it = &job->items[t];
    if (!it->size) continue; /* a request left out (place_outliving_last) */
    if (!(offsets && t < hinted && st_arena_alloc_at(arena, offsets[t], it->size, 0, &p, &blocks[t])) &&
        st_arena_alloc(arena, it->size, 0, &p, &blocks[t]))
      goto out;
  }
  peak = budget.peak_reserved;
out:
  st_arena_destroy(arena);
  if (backend) ops->destroy(backend);
  st_clear_error();
  free(blocks);
  free(by_free);
  free(order);
  return peak;
}

/* Requests that outlive the step, with no sign that the next step frees their like (`once`),
 * and free to place: a warm-up step's new optimizer state, which the next step does not make.
 * That comes in runs (a pair or more per parameter); a lone one between requests that do not
 * outlive the step is more likely what every step makes again in that place (an input batch
 * kept until the next step begins, which the warm-up has no step before to show): it is laid
 * out with the step, not last, where it was often left alone in the layout's top granule when
 * the next step followed it (gpt2_plain at 256x: a granule, 2.49 MiB of waste against 0.49). */
static bool outlives(const hint_job* job, size_t j) {
  if (!job->once || !job->once[j] || job->items[j].fixed_offset != PLACE_FREE) return false;
  return (j > 0 && job->once[j - 1]) || (j + 1 < job->requests && job->once[j + 1]);
}

static bool place_all(hint_job* job, uint64_t* offsets) {
  st_place_params p = {.alignment = job->alignment, .time_limit = 0, .cancel = NULL, .every_ordering = true};
  st_place_result r;
  return st_place(job->items, job->count, &p, offsets, &r) == STALLOC_OK;
}

/* The requests that outlive the step (`outlives`) left out: their sizes set to 0, the sizes of
 * all kept for restore_sizes. NULL (nothing changed): no host memory. */
static uint64_t* hide_outliving(hint_job* job) {
  size_t n = job->requests;
  uint64_t* saved = malloc((n ? n : 1) * sizeof *saved);
  if (saved)
    for (size_t j = 0; j < n; j++) {
      saved[j] = job->items[j].size;
      if (outlives(job, j)) job->items[j].size = 0;
    }
  return saved;
}

static void restore_sizes(hint_job* job, uint64_t* saved) {
  for (size_t j = 0; j < job->requests; j++) job->items[j].size = saved[j];
  free(saved);
}

static bool place_in_holes(const hint_job* job, uint64_t* offsets);

/* Holes first is tried on runs where no step so far changed with no rule to say how (an MoE
 * step follows its layout only in part), and not for a step with under half the requests of the
 * run's largest (an evaluation pass: far below the run's peak, it has nothing to gain, and the
 * blocks it leaves where the next training step's layout did not expect them cost that step
 * granules). docs/online.md, "Holes first". */
static bool holes_first_allowed(const hint_job* job) {
  return !job->changed && job->requests * 2 >= job->most;
}

/* The step placed as place_all or place_in_holes does, with the free requests j where fix[j]
 * held at at[j] (at may be offsets). */
static bool place_around(hint_job* job, const bool* fix, const uint64_t* at, bool holes, uint64_t* offsets) {
  size_t n = job->requests;
  for (size_t j = 0; j < n; j++)
    if (fix[j]) job->items[j].fixed_offset = at[j];
  bool ok = holes ? place_in_holes(job, offsets) : place_all(job, offsets);
  for (size_t j = 0; j < n; j++)
    if (fix[j]) job->items[j].fixed_offset = PLACE_FREE;
  return ok;
}

/* By request: free to place and not outliving the step (the rest, around which the requests
 * that outlive it go last). NULL: no host memory. */
static bool* the_rest(const hint_job* job) {
  size_t n = job->requests;
  bool* rest = malloc(n ? n : 1);
  for (size_t j = 0; rest && j < n; j++) rest[j] = job->items[j].fixed_offset == PLACE_FREE && !outlives(job, j);
  return rest;
}

/* Placed with the rest, the requests that outlive the step (`outlives`) can spoil the layout:
 * a warm-up step's optimizer state counts twice at its end (made in the step, and in use at
 * the boundary), and the placement, held only to that higher peak, leaves the step's own peak
 * loose. So the step is also placed without them, and they go around it after. The layout whose
 * replay needs fewer granules when they are not made again is kept (ties: when they are). */
static void place_outliving_last(hint_job* job, bool holes) {
  size_t n = job->requests;
  uint64_t* two = malloc((job->count ? job->count : 1) * sizeof *two);
  bool* rest = the_rest(job);
  uint64_t* size = two && rest ? hide_outliving(job) : NULL;
  if (!size) goto out;
  job->hinted_alone = replayed_peak(job, job->offsets, n);
  if (!job->best_fit_alone) job->best_fit_alone = replayed_peak(job, NULL, 0);
  bool ok = holes ? place_in_holes(job, two) : place_all(job, two);
  uint64_t two_alone = ok ? replayed_peak(job, two, n) : 0;
  restore_sizes(job, size);
  ok = ok && place_around(job, rest, two, holes, two);
  uint64_t two_with = ok ? replayed_peak(job, two, n) : 0;
  if (two_alone && two_with &&
      (!job->hinted_alone || two_alone < job->hinted_alone || (two_alone == job->hinted_alone && two_with < job->hinted))) {
    memcpy(job->offsets, two, job->count * sizeof *two);
    job->hinted = two_with;
    job->hinted_alone = two_alone;
  }
out:
  free(two);
  free(rest);
}

/* Hints stop where a step stops matching them (an MoE gate routes other sizes), and the blocks
 * placed by then stay where the layout put them, around which best fit can do worse than it
 * would alone (Mixtral at 32x: 12 MiB worse, from some 80 hinted blocks). So the layout is also
 * replayed followed for the first 1/32, 1/16, ..., 1/2 of the step and by best fit after: it is
 * at risk when the worst of those loses more against best fit alone than following it to the
 * end gains, weighed by the odds that a step follows to the end, (repeated + 2) to (changed +
 * 1) over the run's steps so far: 2 to 1 before any (the warm-up's layout, which the first
 * full step follows). Measured (docs/online.md, "Layouts at risk"). `with`: the replays with
 * the requests that outlive the step (else without them, as place_outliving_last). */
static bool layout_at_risk(hint_job* job, bool with) {
  /* Not where the step it came from followed its hints for a quarter of its requests or more
   * and no step has changed with no rule to say how: its positions hold from one step to the
   * next (a dense run's first full step follows the warm-up's layout up to the optimizer state;
   * an MoE one parts at its first expert's request, and its layouts stay judged). Nor, after
   * such a step, a layout made with the sizes the shape rules foretell for the step under way
   * (its requests so far agreed, start_pending): the rules hold now, whatever steps changed
   * before they knew how (micro-batches of new lengths: docs/online.md, "Layouts at risk"). */
  if (job->followed && (job->predicted || !job->changed)) return false;
  size_t n = job->requests;
  uint64_t* saved = NULL;
  if (!with && !(saved = hide_outliving(job))) return false;
  uint64_t bound = with ? job->best_fit : job->best_fit_alone;
  uint64_t gain = bound - (with ? job->hinted : job->hinted_alone), worst = 0;
  for (size_t part = 32; part >= 2; part /= 2) worst = ST_MAX(worst, replayed_peak(job, job->offsets, n / part));
  if (saved) restore_sizes(job, saved);
  return worst > bound && (double)(worst - bound) * (job->changed + 1.0) > (double)gain * (job->repeated + 2.0);
}

/* A replay maps and counts every 2 MiB granule its blocks touch, and a layout takes up to eleven
 * replays. A step whose blocks would touch more than REPLAY_GRANULES granules in all (4 TiB
 * allocated in one step; the largest recorded step allocates 19 times its peak, so at that
 * ratio a 215 GB peak; fuzzed traces ask for more) is not judged, and keeps no hints: its
 * replays would hold the hints' thread for seconds to minutes (docs/fuzzing.md). The fuzz build
 * sets a lower limit (ST_REPLAY_GRANULES, CMakeLists.txt): its coverage and sanitizers make a
 * granule some 45 times dearer, and a step under 2^21 could pass libFuzzer's timeout. */
#ifndef ST_REPLAY_GRANULES
#define ST_REPLAY_GRANULES (1ull << 21)
#endif
#define REPLAY_GRANULES ((uint64_t)(ST_REPLAY_GRANULES))

static bool too_large_to_replay(const hint_job* job) {
  uint64_t granules = 0;
  for (size_t i = 0; i < job->count && granules <= REPLAY_GRANULES; i++)
    granules += job->items[i].size / ST_VIRTUAL_GRANULE + 2; /* a block straddles one more at each end */
  return granules > REPLAY_GRANULES;
}

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

/* The step placed around the blocks in use as place_all does, but kept out of the whole
 * granules below the highest that none of them touches: it fills the holes of granules mapped
 * anyway (between the weights and the optimizer state the warm-up left), and the rest goes
 * above. Around them freely, the placement also scatters the step into those free granules and
 * leaves partly used ones there at its peak (docs/online.md, "Holes first"). A block the step
 * frees that lies above every block living through it closes off nothing: a 1 KiB block GPT-2
 * leaves live to the next step's first request, near its layout's top, closed off every granule
 * below it, and the next layout went 8,600 granules up, the one after back down, each step
 * moving them ("A block freed early does not lift the layout"). */
static bool place_in_holes(const hint_job* job, uint64_t* offsets) {
  size_t fixed = 0;
  uint64_t lasting = 0; /* the top of the blocks in use that live through the step */
  for (size_t i = 0; i < job->count; i++) {
    const st_place_item* it = &job->items[i];
    if (it->fixed_offset == PLACE_FREE) continue;
    fixed++;
    if (it->upper > job->requests) lasting = ST_MAX(lasting, it->fixed_offset + it->size);
  }
  uint64_t* ends = malloc((fixed ? fixed : 1) * 2 * sizeof *ends); /* granule spans: 2g starts, 2g + 1 ends */
  st_place_item* items = malloc((job->count + fixed + 1) * sizeof *items);
  uint64_t* off = malloc((job->count + fixed + 1) * sizeof *off);
  bool ok = false;
  if (!ends || !items || !off) goto out;
  size_t e = 0;
  for (size_t i = 0; i < job->count; i++) {
    const st_place_item* it = &job->items[i];
    if (it->fixed_offset == PLACE_FREE || (it->upper <= job->requests && it->fixed_offset >= lasting)) continue;
    uint64_t last = it->size ? (it->fixed_offset + it->size - 1) / ST_VIRTUAL_GRANULE : it->fixed_offset / ST_VIRTUAL_GRANULE;
    ends[e++] = it->fixed_offset / ST_VIRTUAL_GRANULE * 2;
    ends[e++] = (last + 1) * 2 + 1;
  }
  qsort(ends, e, sizeof *ends, cmp_u64);
  memcpy(items, job->items, job->count * sizeof *items);
  size_t m = job->count;
  uint64_t from = 0; /* first granule no block touches since the last run of touched ones */
  size_t depth = 0;
  for (size_t k = 0; k < e; k++) {
    uint64_t g = ends[k] / 2;
    if (ends[k] % 2 == 0) { /* a block starts: the untouched granules before it are closed off */
      if (depth++ == 0 && g > from)
        items[m++] = (st_place_item){0, job->requests + 1, (g - from) * ST_VIRTUAL_GRANULE, from * ST_VIRTUAL_GRANULE};
    } else if (--depth == 0) {
      from = g;
    }
  }
  st_place_params p = {.alignment = job->alignment, .time_limit = 0, .cancel = NULL, .every_ordering = true};
  st_place_result r;
  ok = st_place(items, m, &p, off, &r) == STALLOC_OK;
  if (ok) memcpy(offsets, off, job->count * sizeof *off);
out:
  free(ends);
  free(items);
  free(off);
  return ok;
}

/* Whole granules first: the requests whose size is a whole number of granules placed alone, on
 * granule boundaries (around the blocks in use, each taken as a whole number of granules long),
 * then the rest around them. Placed with the rest, such a block can end up straddling a
 * boundary, and once it is freed at the step's peak the hole it leaves spans two partly used
 * granules where one would have been free (T5's 2 and 4 MiB activations x256). false: none such,
 * or no host memory. */
static bool place_granules_first(hint_job* job, uint64_t* offsets) {
  size_t n = job->requests;
  bool* whole = malloc(n ? n : 1);
  bool any = false;
  for (size_t j = 0; whole && j < n; j++) {
    uint64_t size = job->items[j].size;
    whole[j] = job->items[j].fixed_offset == PLACE_FREE && size >= ST_VIRTUAL_GRANULE && size % ST_VIRTUAL_GRANULE == 0;
    any |= whole[j];
  }
  uint64_t* saved = any ? malloc(n * sizeof *saved) : NULL;
  uint64_t* off1 = saved ? malloc((job->count ? job->count : 1) * sizeof *off1) : NULL;
  bool ok = false;
  if (off1) {
    for (size_t j = 0; j < n; j++) {
      saved[j] = job->items[j].size;
      if (!whole[j]) job->items[j].size = 0;
    }
    st_place_params p = {.alignment = ST_VIRTUAL_GRANULE, .time_limit = 0, .cancel = NULL, .every_ordering = true};
    st_place_result r;
    ok = st_place(job->items, job->count, &p, off1, &r) == STALLOC_OK;
    for (size_t j = 0; j < n; j++) job->items[j].size = saved[j];
    ok = ok && place_around(job, whole, off1, false, offsets);
  }
  free(whole);
  free(saved);
  free(off1);
  return ok;
}

/* One way of laying the step out, placed around the blocks in use freely or holes first: the
 * layout, its replays, and whether it is kept (it beats best fit on the step it came from, with
 * or without the requests that outlive it, and is not at risk where a step follows it only in
 * part). With them, a tie counts as a win where the step it came from followed its hints (a
 * quarter of its requests or more) and the next step is expected to ask its sizes: it repeated
 * its kind's step before exactly, or no step of the run has changed where no rule says and the
 * layout has the step's own sizes, not sizes the rules foretold. Such a layout's replay is what
 * the next step takes, where best fit's only estimates the live pool, whose free blocks differ
 * (the free space under its top, the top that sets which requests go low). Refused on a tie,
 * the demo's dense run went by best fit every other step and its third step took a granule
 * more than the layout's replay. Not after steps of foretold sizes (dynamic padding drawn in no
 * fixed order lost two granules): docs/online.md, "Ties". */
static bool lay_out(hint_job* job, bool holes, bool outliving) {
  size_t n = job->requests;
  if (!(holes ? place_in_holes(job, job->offsets) : place_all(job, job->offsets))) return false;
  job->hinted = replayed_peak(job, job->offsets, n);
  job->hinted_alone = 0;
  if (outliving) place_outliving_last(job, holes);
  bool expected = job->repeats || (!job->predicted && !job->changed); /* the next step asks these sizes */
  bool tie = job->hinted == job->best_fit && job->followed && expected;
  bool with = job->hinted && job->best_fit && (job->hinted < job->best_fit || tie);
  return (with || (job->hinted_alone && job->best_fit_alone && job->hinted_alone < job->best_fit_alone)) &&
         !layout_at_risk(job, with);
}

/* Whole granules first (place_granules_first), judged like the other layouts: kept in place of
 * the one chosen so far where its replay needs fewer granules (without the requests that
 * outlive the step where there are such, placed around the rest after), it beats best fit, and
 * it is not at risk. Only on runs where no step changed with no rule to say how: on Mixtral at
 * 32x it lost as much as it won elsewhere (docs/online.md, "Whole granules first"). Returns
 * whether a layout is kept. */
static bool lay_out_granules_first(hint_job* job, bool outliving, bool kept) {
  size_t n = job->requests, bytes = (job->count ? job->count : 1) * sizeof(uint64_t);
  uint64_t* offsets = malloc(bytes);
  uint64_t* was = malloc(bytes);
  uint64_t* hidden = outliving && offsets && was ? hide_outliving(job) : NULL;
  bool ok = offsets && was && (!outliving || hidden) && place_granules_first(job, offsets);
  uint64_t alone = ok ? replayed_peak(job, offsets, n) : 0;
  if (hidden) restore_sizes(job, hidden);
  bool* rest = ok && outliving ? the_rest(job) : NULL;
  if (outliving) /* the requests that outlive the step around the rest, as in place_outliving_last */
    ok = ok && rest && place_around(job, rest, offsets, false, offsets);
  uint64_t now = outliving ? job->hinted_alone : job->hinted;
  uint64_t bound = outliving ? job->best_fit_alone : job->best_fit;
  if (ok && alone && alone < bound && (!kept || alone < now)) {
    uint64_t hinted = job->hinted, hinted_alone = job->hinted_alone;
    memcpy(was, job->offsets, bytes);
    memcpy(job->offsets, offsets, bytes);
    job->hinted = outliving ? replayed_peak(job, offsets, n) : alone;
    job->hinted_alone = outliving ? alone : hinted_alone;
    if (layout_at_risk(job, !outliving)) {
      memcpy(job->offsets, was, bytes);
      job->hinted = hinted;
      job->hinted_alone = hinted_alone;
    } else {
      kept = true;
    }
  }
  free(rest);
  free(offsets);
  free(was);
  return kept;
}

/* The layout kept, with blocks moved off granules that only a block or two touch at its peak
 * (st_place_fewer_granules): kept where its replay needs fewer granules, and no more without
 * the requests that outlive the step. Its work is bounded by a count of granules tried; the
 * clock only guards against sizes no step has (under it, the figures of a replay do not depend
 * on the machine). */
#define FEWER_GRANULES_SECONDS 0.5

static void lay_out_fewer_granules(hint_job* job, bool outliving) {
  size_t n = job->requests, bytes = (job->count ? job->count : 1) * sizeof(uint64_t);
  uint64_t* offsets = malloc(bytes);
  if (!offsets) return;
  memcpy(offsets, job->offsets, bytes);
  if (st_place_fewer_granules(job->items, job->count, offsets, ST_VIRTUAL_GRANULE, job->alignment,
                              FEWER_GRANULES_SECONDS)) {
    uint64_t with = replayed_peak(job, offsets, n), alone = 0;
    uint64_t* saved = outliving ? hide_outliving(job) : NULL;
    if (saved) {
      alone = replayed_peak(job, offsets, n);
      restore_sizes(job, saved);
    }
    bool alone_no_worse = !outliving || (alone && (!job->hinted_alone || alone <= job->hinted_alone));
    bool no_worse = with && with <= job->hinted && alone_no_worse;
    bool better = with < job->hinted || (outliving && job->hinted_alone && alone < job->hinted_alone);
    if (no_worse && better) {
      memcpy(job->offsets, offsets, bytes);
      job->hinted = with;
      if (outliving) job->hinted_alone = alone;
    }
  }
  free(offsets);
}

static uint64_t top_of(const hint_job* job, const uint64_t* offsets) {
  uint64_t top = 0;
  for (size_t j = 0; j < job->requests; j++)
    if (job->items[j].size) top = ST_MAX(top, offsets[j] + job->items[j].size);
  return top;
}

/* Marks in seen the granules of [at, at + size); *n (if not NULL) counts those not marked yet. */
static void touch(uint8_t* seen, size_t granules, uint64_t at, uint64_t size, uint64_t* n) {
  if (!size) return;
  for (uint64_t g = at / ST_VIRTUAL_GRANULE, last = (at + size - 1) / ST_VIRTUAL_GRANULE; g <= last && g < granules; g++)
    if (!seen[g]) {
      seen[g] = 1;
      if (n) (*n)++;
    }
}

/* For each of two layouts of the step, the granules its requests touch that neither the blocks
 * in use nor the hints the step that ended followed touch: those the next step maps at new
 * addresses, moving granules once the pool is at its peak (it maps no more). false: no host
 * memory. */
static bool new_granules(const hint_job* job, const uint64_t* const layouts[2], uint64_t fresh[2]) {
  uint64_t top = 0;
  for (size_t i = 0; i < job->count; i++)
    for (int k = 0; k < 2 && job->items[i].size; k++)
      top = ST_MAX(top, (i < job->requests ? layouts[k][i] : job->items[i].fixed_offset) + job->items[i].size);
  for (size_t j = 0; j < job->ref_count; j++) top = ST_MAX(top, job->ref_offset[j] + job->ref_size[j]);
  size_t granules = (size_t)(top / ST_VIRTUAL_GRANULE) + 1;
  uint8_t *mapped = calloc(granules, 1), *seen = malloc(granules);
  bool ok = mapped && seen;
  if (ok) {
    for (size_t j = 0; j < job->ref_count; j++) touch(mapped, granules, job->ref_offset[j], job->ref_size[j], NULL);
    for (size_t i = job->requests; i < job->count; i++)
      touch(mapped, granules, job->items[i].fixed_offset, job->items[i].size, NULL);
    for (int k = 0; k < 2; k++) {
      memcpy(seen, mapped, granules);
      fresh[k] = 0;
      for (size_t j = 0; j < job->requests; j++) touch(seen, granules, layouts[k][j], job->items[j].size, &fresh[k]);
    }
  }
  free(mapped);
  free(seen);
  return ok;
}

/* Whether the layout at `offsets` should give way to the one at `other`, which needs `saved`
 * bytes of granules more: it maps more granules at new addresses than MOVES_PER_GRANULE for
 * each granule it saves. Holes first puts the step above the highest block in use; where a
 * block that lives into the next step sat at a layout's top, the next layout goes above it,
 * and the steps climb the address space: BERT with micro-batches padded each on its own and
 * AdamW foreach at 2048x, its steps three times over (tests/data/traces/foreach), took layouts
 * a granule or two lower than the free ones and a thousand or two granules higher, and its
 * last ten steps moved 11,481 granules (a map of tens of us each on a GPU); 2,097 now. */
#define MOVES_PER_GRANULE 64

static bool moves_outweigh(const hint_job* job, const uint64_t* offsets, const uint64_t* other, uint64_t saved) {
  const uint64_t* const layouts[2] = {offsets, other};
  uint64_t fresh[2], granules = (saved + ST_VIRTUAL_GRANULE - 1) / ST_VIRTUAL_GRANULE;
  return new_granules(job, layouts, fresh) && fresh[0] > fresh[1] && fresh[0] - fresh[1] > MOVES_PER_GRANULE * granules;
}

/* The step laid out every way above; the one kept (if any) is in job->offsets. */
static bool lay_out_step(hint_job* job) {
  size_t n = job->requests;
  bool outliving = false;
  for (size_t j = 0; j < n && !outliving; j++) outliving = outlives(job, j);
  bool large = too_large_to_replay(job), kept = false;
  if (!large) {
    job->best_fit = replayed_peak(job, NULL, 0);
    kept = lay_out(job, false, outliving);
  }
  uint64_t* free_way = !large && holes_first_allowed(job) ? malloc((job->count ? job->count : 1) * sizeof *free_way) : NULL;
  if (free_way) {
    /* holes first replaces the free layout where it is kept and, if the free one is too, its
     * replay needs fewer granules (without the requests that outlive the step where there are
     * such, as a step that does not make them again runs; ties: with them) */
    uint64_t hinted = job->hinted, alone = job->hinted_alone;
    memcpy(free_way, job->offsets, job->count * sizeof *free_way);
    bool better = lay_out(job, true, outliving) &&
                  (!kept || (outliving ? job->hinted_alone < alone || (job->hinted_alone == alone && job->hinted < hinted)
                                       : job->hinted < hinted));
    if (better && kept && job->ref_offset) {
      uint64_t saved = outliving && job->hinted_alone < alone ? alone - job->hinted_alone : hinted - job->hinted;
      better = !moves_outweigh(job, job->offsets, free_way, saved);
    }
    if (better) {
      kept = true;
    } else {
      memcpy(job->offsets, free_way, job->count * sizeof *free_way);
      job->hinted = hinted;
      job->hinted_alone = alone;
    }
    free(free_way);
  }
  if (!large && !job->changed) kept = lay_out_granules_first(job, outliving, kept);
  if (kept) lay_out_fewer_granules(job, outliving);
  return kept;
}

/* Whether the offsets place no request on bytes another one, or a block in use, holds at the
 * same time: st_place refuses fixed items that overlap. */
static bool valid_layout(const hint_job* job, const uint64_t* offsets) {
  st_place_item* items = malloc((job->count ? job->count : 1) * sizeof *items);
  uint64_t* out = malloc((job->count ? job->count : 1) * sizeof *out);
  bool ok = items && out;
  if (ok) {
    memcpy(items, job->items, job->count * sizeof *items);
    for (size_t j = 0; j < job->requests; j++) items[j].fixed_offset = offsets[j];
    st_place_params p = {.alignment = 1, .time_limit = 0, .cancel = NULL, .every_ordering = false};
    st_place_result r;
    ok = st_place(items, job->count, &p, out, &r) == STALLOC_OK;
  }
  free(items);
  free(out);
  return ok;
}

/* One of the kind's earlier layouts (`earlier`: what the step followed, or the one before it)
 * where it still holds around the blocks in use and its replay needs no more granules than the
 * new layout's (fewer than best fit's where none is kept). A step that followed its kind's
 * hints up to its key (a pending job) and asks their sizes keeps them so: placed again around
 * the requests it fixed, the rest can land a granule higher than it did (a U-Net's steps at a
 * new image size, after taking the layout of lay_out_unpinned: 5,838 -> 5,840 MiB at 256x). And
 * a step whose blocks live into the next (gradients accumulated, a batch fetched ahead) cannot
 * take one layout every step: the blocks it leaves live sit where the next step's like would
 * go, so each boundary lays the step out anew around them, and two layouts as good as each
 * other can place the whole step far apart. Taken by turns, each step maps at new addresses
 * what the step before freed (BERT with gradient accumulation at 2048x: 2,721 of its 5,414
 * granules a step). The layout before the one the step followed is where the blocks live into
 * the next step were not, and kept it brings the kind back to the same two layouts. */
static bool keep_earlier(hint_job* job, uint64_t* earlier, bool kept, bool* taken) {
  *taken = false;
  if (!earlier || !valid_layout(job, earlier)) return kept;
  for (size_t i = job->requests; i < job->count; i++) earlier[i] = job->items[i].fixed_offset;
  uint64_t replayed = replayed_peak(job, earlier, job->requests);
  if (!replayed || (kept ? replayed > job->hinted : replayed >= job->best_fit)) return kept;
  /* Nor where it lies far from what the step just followed and the new one does not: T5 at
   * 256x (tools/make_traces.py --models t5 --seed 131 --optimizer adamw_foreach --amp), its
   * plans off, took the layout before the one it followed at every boundary, two layouts whose
   * tops were 20 GiB apart, each needing as many granules as the new one: 9,919 moves a step. */
  if (kept && job->ref_offset && moves_outweigh(job, earlier, job->offsets, job->hinted - replayed)) return kept;
  memcpy(job->offsets, earlier, job->count * sizeof *job->offsets);
  job->hinted = replayed;
  *taken = true;
  return true;
}

static bool keep_previous(hint_job* job, bool kept) {
  bool taken;
  kept = keep_earlier(job, job->previous, kept, &taken);
  return taken ? kept : keep_earlier(job, job->before, kept, &taken);
}

/* A pending job's first requests are fixed where they went (pin_lifetimes), and the kind's next
 * step takes them from its layout, to be fixed there again: where best fit put them once (the
 * first step of a new shape, which no layout served) they stay for the rest of the run, however
 * far up, and each step at the pool's peak moves granules to follow them (a U-Net trained at
 * several image sizes, at 256x: 1,000 moves a step, its layouts' tops 46% above their peaks).
 * So where the step placed with them free (but for those that outlive it) lies lower by a 16th
 * or more (a granule at least), it is laid out so too, and the kind's next steps take that
 * layout if its replay needs no more granules. */
static void lay_out_unpinned(hint_job* job) {
  size_t bytes = (job->count ? job->count : 1) * sizeof(uint64_t);
  uint64_t* offsets = malloc(bytes);
  st_place_item* pinned = job->items;
  job->items = job->unpinned;
  uint64_t top = offsets && place_all(job, offsets) ? top_of(job, offsets) : 0;
  bool lower = top && top + ST_MAX(ST_VIRTUAL_GRANULE, top / 16) <= top_of(job, job->offsets);
  job->items = pinned;
  if (lower) {
    hint_job unpinned_job;
    memcpy(&unpinned_job, job, sizeof unpinned_job); /* the step as it is but for the pins */
    unpinned_job.items = job->unpinned;
    unpinned_job.offsets = offsets;
    unpinned_job.hinted = unpinned_job.best_fit = unpinned_job.hinted_alone = unpinned_job.best_fit_alone = 0;
    if (lay_out_step(&unpinned_job) && unpinned_job.hinted <= job->hinted) {
      job->next_offsets = offsets;
      offsets = NULL;
    }
  }
  free(offsets);
}

static void* place_thread(void* arg) {
  hint_job* job = arg;
  double t0 = st_now();
  bool kept = keep_previous(job, lay_out_step(job));
  if (kept && job->unpinned) lay_out_unpinned(job);
  job->ok = kept;
  st_clear_error();
  job->seconds = st_now() - t0;
  atomic_store_explicit(&job->done, 1, memory_order_release);
  return NULL;
}

#define FOR_GOOD (1u << 31) /* in sized.index: a block not freed in the step after its own */

typedef struct sized {
  uint64_t size;
  uint32_t index;
} sized;

static int cmp_sized(const void* a, const void* b) {
  const sized *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

/* When each block the step that ended leaves live will be freed in the next (allocs before its
 * free, by position; LIVE: not known): as the block the step before left live was freed in this
 * one, paired size by size in order (a gradient at the next zero_grad, a data batch). NULL: no
 * host memory, or nothing to pair. */
static uint32_t* predict_frees(const st_hints* h) {
  size_t n = h->n, c = 0;
  for (size_t j = 0; j < n; j++) c += h->freed_at[j] == LIVE;
  if (!c || !h->crossed) return NULL;
  uint32_t* goes = malloc(n * sizeof *goes);
  sized* now = malloc(c * sizeof *now);
  sized* before = malloc(h->crossed * sizeof *before);
  if (goes && now && before && h->crossed < FOR_GOOD) {
    for (size_t j = 0, i = 0; j < n; j++) {
      goes[j] = LIVE;
      if (h->freed_at[j] == LIVE) now[i++] = (sized){h->sizes[j], (uint32_t)j};
    }
    /* within a size, those that were freed first: a step's first blocks that live on for
     * good (created once, in the warm-up) are not what the next step frees */
    for (size_t k = 0; k < h->crossed; k++)
      before[k] = (sized){h->crossed_size[k], (uint32_t)k | (h->crossed_at[k] == LIVE ? FOR_GOOD : 0)};
    qsort(now, c, sizeof *now, cmp_sized);
    qsort(before, h->crossed, sizeof *before, cmp_sized);
    for (size_t i = 0, k = 0; i < c && k < h->crossed;) {
      if (now[i].size < before[k].size) i++;
      else if (now[i].size > before[k].size) k++;
      else goes[now[i++].index] = h->crossed_at[before[k++].index & ~FOR_GOOD];
    }
  } else {
    free(goes);
    goes = NULL;
  }
  free(now);
  free(before);
  return goes;
}

/* The hints the step that ended followed, as the job's reference for new_granules. */
static void reference_layout(const st_hints* h, hint_job* job) {
  if (h->active < 0 || !h->sets[h->active].offset) return;
  const hint_set* s = &h->sets[h->active];
  job->ref_offset = malloc((s->count ? s->count : 1) * sizeof *job->ref_offset);
  job->ref_size = malloc((s->count ? s->count : 1) * sizeof *job->ref_size);
  if (!job->ref_offset || !job->ref_size) {
    free(job->ref_offset);
    free(job->ref_size);
    job->ref_offset = job->ref_size = NULL;
    return;
  }
  memcpy(job->ref_offset, s->offset, s->count * sizeof *job->ref_offset);
  memcpy(job->ref_size, s->size, s->count * sizeof *job->ref_size);
  job->ref_count = s->count;
}

static void start(st_hints* h, hint_job* job) {
  reference_layout(h, job);
  h->job = job;
  job->repeated = h->repeated;
  job->changed = h->changed;
  if (pthread_create(&h->thread, NULL, place_thread, job) == 0) h->thread_live = true;
  else place_thread(job);
}

/* The requests made before the key are fixed where they went: each lives from its position to
 * its free in this step (or on), and a block in use at the boundary whose bytes one of them took
 * was freed before it, whatever the step before said. */
static void pin_lifetimes(st_hints* h, hint_job* job) {
  size_t key = h->pending_key;
  for (size_t j = 0; j < key && j < job->requests; j++) {
    st_place_item* it = &job->items[j];
    if (it->fixed_offset == PLACE_FREE) continue;
    it->upper = h->freed_at[j] != LIVE ? ST_MAX((uint64_t)h->freed_at[j], (uint64_t)j + 1) : ST_MAX(it->upper, (uint64_t)key + 1);
    for (size_t i = job->requests; i < job->count; i++) {
      st_place_item* b = &job->items[i];
      if (b->fixed_offset < it->fixed_offset + it->size && it->fixed_offset < b->fixed_offset + b->size)
        b->upper = ST_MIN(b->upper, (uint64_t)j);
    }
  }
}

/* The job's items with its requests before the key free to place again, but for those that
 * outlive the step (they are still where they went when the next step begins). NULL: no host
 * memory. */
static st_place_item* unpinned_items(const st_hints* h, const hint_job* job) {
  st_place_item* items = malloc((job->count ? job->count : 1) * sizeof *items);
  if (!items) return NULL;
  memcpy(items, job->items, job->count * sizeof *items);
  for (size_t j = 0; j < h->pending_key && j < job->requests; j++)
    if (items[j].upper <= job->requests) items[j].fixed_offset = PLACE_FREE;
  return items;
}

/* The hints the step under way follows, where they have the job's sizes and put its requests
 * before the key where they went (they are then a layout of the job's), into job->previous, and
 * the kind's hints before them into job->before. Neither where they do not (or no host memory). */
static void previous_layout(const st_hints* h, hint_job* job) {
  if (h->active < 0 || h->shift || h->sets[h->active].count != job->requests) return;
  const hint_set* s = &h->sets[h->active];
  for (size_t j = 0; j < job->requests; j++)
    if (s->size[j] != job->items[j].size ||
        (j < h->pending_key && job->items[j].fixed_offset != PLACE_FREE && job->items[j].fixed_offset != s->offset[j]))
      return;
  size_t bytes = (job->count ? job->count : 1) * sizeof(uint64_t);
  if ((job->previous = malloc(bytes))) memcpy(job->previous, s->offset, job->requests * sizeof(uint64_t));
  if (s->before && (job->before = malloc(bytes))) memcpy(job->before, s->before, job->requests * sizeof(uint64_t));
}

/* The step under way reached its kind's key position: the layout of the step before, with
 * each position's size as the rules say this step's shape makes it (unchanged when the shape
 * is), is started; a replay waits for it, so the whole step follows it. When the step's own
 * requests so far are not what the rules say (a position changed that never had before), the
 * rules are not complete yet: the step goes by best fit, and the boundary learns from it. */
static void start_pending(st_hints* h) {
  hint_job* job = h->pending;
  h->pending = NULL;
  size_t n = job->requests, seen = h->pending_key + 1;
  uint64_t* predicted = malloc((n ? n : 1) * sizeof *predicted);
  if (predicted && st_shapes_predict(h->shapes, n, h->asked, predicted)) {
    job->predicted = true;
    job->step = h->step;
    bool agrees = true;
    for (size_t j = 0; j < n; j++) job->items[j].size = st_align_up(predicted[j], job->alignment);
    for (size_t j = 0; j < seen; j++) agrees &= job->items[j].size == h->sizes[j];
    if (!agrees) {
      free_job(job);
      job = NULL;
      take_set(h, -1);
    }
  }
  free(predicted);
  if (!job) return;
  job->unpinned = unpinned_items(h, job);
  previous_layout(h, job);
  pin_lifetimes(h, job);
  start(h, job);
  /* Best fit until they are ready, and if they are not kept: the old hints have other sizes. */
  if (!h->wait || !adopt(h)) take_set(h, -1);
}

/* The request at position j lives past the step that ended, and nothing says that the next
 * step frees its like (`goes`, from predict_frees): a warm-up's optimizer state. */
static bool one_off(const st_hints* h, const uint32_t* goes, size_t j) {
  return h->freed_at[j] == LIVE && (!goes || goes[j] == LIVE);
}

/* A job placing the step that ended around the blocks in use; NULL: no host memory. */
static hint_job* make_job(st_hints* h, const uint64_t* starts, const uint64_t* sizes, const uint64_t* tags,
                          size_t taken) {
  hint_job* job = calloc(1, sizeof *job);
  size_t n = h->n, count = n + taken;
  if (job) {
    job->items = malloc(count * sizeof *job->items);
    job->offsets = malloc(count * sizeof *job->offsets);
  }
  if (!job || !job->items || !job->offsets) {
    free_job(job);
    return NULL;
  }
  uint64_t end = (uint64_t)n + 1; /* what lives past the step lives to its end */
  /* a position that outlived an earlier step of its kind (a batch kept until another step's
   * turn) is not taken to be freed within the next one: its bytes may still be in use there */
  int kind = set_of(h, n);
  const bool* outlived = kind >= 0 ? h->sets[kind].outlived : NULL;
  for (size_t j = 0; j < n; j++) {
    uint64_t freed = h->freed_at[j] == LIVE || (outlived && outlived[j]) ? end
                                                                         : ST_MAX((uint64_t)h->freed_at[j], (uint64_t)j + 1);
    job->items[j] = (st_place_item){j, freed, h->sizes[j], PLACE_FREE};
  }
  uint32_t* goes = predict_frees(h);
  bool any = false;
  for (size_t j = 0; j < n && !any; j++) any = one_off(h, goes, j);
  if (any && (job->once = malloc(n * sizeof *job->once)))
    for (size_t j = 0; j < n; j++) job->once[j] = one_off(h, goes, j);
  for (size_t i = 0; i < taken; i++) {
    uint64_t upper = end, tag = tags ? tags[i] : 0;
    uint32_t position = (uint32_t)tag;
    if (goes && tag >> 32 == h->step && position < n && goes[position] != LIVE) upper = goes[position];
    job->items[n + i] = (st_place_item){0, upper, sizes[i], starts[i]};
  }
  free(goes);
  job->requests = n;
  job->count = count;
  job->alignment = h->alignment;
  job->followed = n && (size_t)h->hits * 4 >= n; /* read here: a pending job starts in the next step */
  return job;
}

/* The positions whose blocks the step that ended leaves live, kept by its kind (once one has
 * hints) for the layouts of its steps to come (make_job). */
static void note_outliving(st_hints* h) {
  int kind = h->spoiled ? -1 : set_of(h, h->n);
  if (kind < 0) return;
  hint_set* s = &h->sets[kind];
  for (size_t j = 0; j < h->n; j++) {
    if (h->freed_at[j] != LIVE) continue;
    if (!s->outlived && !(s->outlived = calloc(h->n, sizeof *s->outlived))) return;
    s->outlived[j] = true;
  }
}

/* The blocks the step that ended leaves live, for the next step to say when they go. */
static void note_crossing(st_hints* h) {
  free(h->rank_of);
  free(h->crossed_size);
  free(h->crossed_at);
  h->rank_of = NULL;
  h->crossed_size = NULL;
  h->crossed_at = NULL;
  h->rank_count = h->crossed = 0;
  size_t n = h->spoiled ? 0 : h->n, c = 0;
  for (size_t j = 0; j < n; j++) c += h->freed_at[j] == LIVE;
  if (!c) return;
  h->rank_of = malloc(n * sizeof *h->rank_of);
  h->crossed_size = malloc(c * sizeof *h->crossed_size);
  h->crossed_at = malloc(c * sizeof *h->crossed_at);
  if (!h->rank_of || !h->crossed_size || !h->crossed_at) return; /* freed at the next boundary */
  for (size_t j = 0; j < n; j++) {
    h->rank_of[j] = LIVE;
    if (h->freed_at[j] != LIVE) continue;
    h->rank_of[j] = (uint32_t)h->crossed;
    h->crossed_size[h->crossed] = h->sizes[j];
    h->crossed_at[h->crossed++] = LIVE;
  }
  h->rank_count = n;
}

void st_hints_boundary(st_hints* h, uint64_t* starts, uint64_t* sizes, uint64_t* tags, size_t count,
                       uint64_t expected) {
  if (h->active >= 0 && (h->hits || h->misses)) { /* how the step's hints did */
    hint_set* used = &h->sets[h->active];
    /* A step of another kind (an evaluation pass where a training step was expected, which
     * begins as one) says nothing of how this kind's steps follow hints that served them
     * before; nor of hints that have not served one yet, when it took none of them and is
     * not near their kind's size (st_shapes_near): an evaluation pass missing a first training
     * step's layout at its first request. A warm-up's hints, met by the first training step,
     * still back off: nothing of that kind comes again, and kept they are taken by steps whose
     * first requests match them and then part. */
    bool far = h->hits == 0 && !st_shapes_near(h->n, used->count);
    bool other_kind = !h->spoiled && h->n != used->count && (used->served || far);
    if (!other_kind) {
      if (stopped(h)) {
        back_off(used, true);
      } else {
        used->failed = 0;
        used->served |= h->hits > 0 && h->n == used->count;
      }
    }
  }
  free_job(h->pending); /* the step had no request at its key position */
  h->pending = NULL;
  bool repeats = !h->spoiled && st_shapes_repeats(h->shapes, h->asked, h->n); /* before it is learned */
  h->last_repeated = repeats;
  if (!h->spoiled) {
    ptrdiff_t unexplained = st_shapes_learn(h->shapes, h->asked, h->n);
    if (unexplained >= 2) h->changed++; /* hints stop at their second miss */
    else if (unexplained >= 0) h->repeated++;
  }
  hint_job* job = starts && st_hints_wants_layout(h) ? make_job(h, starts, sizes, tags, count) : NULL;
  note_outliving(h);
  h->most = ST_MAX(h->most, h->n);
  if (job) job->most = h->most, job->repeats = repeats;
  size_t key = job && expected == h->n ? st_shapes_key_position(h->shapes, h->n) : ST_SHAPE_NONE;
  if (key != ST_SHAPE_NONE) { /* started at the next step's key position */
    h->pending = job;
    h->pending_key = key;
  } else if (job) {
    if (h->hits && !stopped(h)) previous_layout(h, job); /* the step followed them */
    start(h, job);
  }
  free(starts);
  free(sizes);
  free(tags);
  /* the blocks of the step that ended: when they go in the next */
  note_crossing(h);
  if (h->job && (h->wait || atomic_load_explicit(&h->job->done, memory_order_acquire))) adopt(h);
  for (int i = 0; i < SETS; i++) { /* the layouts made for the steps after the one that ended */
    hint_set* s = &h->sets[i];
    if (!s->next) continue;
    free(s->before);
    s->before = s->offset;
    s->offset = s->next;
    s->next = NULL;
    s->version = ++h->versions;
  }
  int k = expected ? set_of(h, expected) : -1;
  if (k >= 0) take_set(h, k); /* else the latest hints made */
  if (h->active >= 0 && h->sets[h->active].skip) { /* its hints stopped in its last steps */
    h->sets[h->active].skip--;
    /* sizes foretold by the rules, when they come, still serve a step that rests because
     * hints made without them missed, or because its kind's sizes changed with no rule; and
     * a step served by another kind's hints (its own kind has none yet: the first training
     * step after the warm-up's) does not rest because those, foretold, missed */
    h->resting = k >= 0 && h->sets[h->active].foretold_missed;
    take_set(h, -1);
  } else {
    h->resting = false;
  }
  h->step++;
  h->spoiled = false;
  h->as_before = true;
  h->expected_n = expected;
  h->n = 0;
  h->displaced_n = 0;
  h->hits = h->misses = 0;
  take_set(h, h->active);
}

bool st_hints_steps_repeat(const st_hints* h) { return h->repeated > 0 && h->changed == 0; }

bool st_hints_step_repeated(const st_hints* h) { return h->last_repeated && h->as_before; }

void st_hints_counts(const st_hints* h, uint64_t* made, uint64_t* kept, double* longest, double* total) {
  *made = h->made;
  *kept = h->kept;
  *longest = h->longest;
  *total = h->total;
}
