/* arena.c - the growable pool (see arena.h).
 *
 * Address space is cheap and physical memory is what a run is measured by, so the arena keeps
 * the two apart. Blocks tile [0, top) of one reserved range in address order; free ones sit in
 * a treap keyed by (size, start) for best fit (and, with the layout hints, in one keyed by
 * start, for alloc_at and the lowest fit of small requests), and coalesce with free neighbours.
 * A request no free block fits extends the top. Physical memory is mapped per granule (the
 * backend's map_granularity: 2 MiB on CUDA, and in the virtual backend, which models it): each
 * granule counts the live blocks touching it. A granule whose count drops to zero stays mapped
 * (cached) until a granule elsewhere needs mapping at the peak reserved so far: then the highest cached
 * granule that no queued work touches moves there, so the peak grows only when every mapped
 * granule holds live bytes or queued work (and that work is not the requesting stream's).
 * Best fit fills holes from the smallest up and the top grows only when nothing fits, so the
 * highest idle granules are the ones blocks come back to last. Unlike PyTorch's expandable
 * segments, a hole in the middle of the range gives its whole granules back.
 *
 * Streams: a block is free the moment it is freed, for the stream it was freed on (that
 * stream's later work is ordered after its last use), as in PyTorch's allocator; waiting for
 * the GPU there would stall the host at every free. Another stream may take it only once the
 * freeing stream's work up to the free is done. Frees are stamped with a clock; events are
 * recorded lazily, one per stream at a time, only when another stream asks, so a run on one
 * stream makes no event call at all.
 *
 * On an asynchronous device a granule freed a moment ago may still be read by queued work, so
 * unmapping it would wait for the device. Where that work is the requesting stream's, its
 * memory is mapped at the new address as well (the backend's alias), without waiting: the
 * stream's later work runs after it. The old address is unmapped once the work is done. So
 * reserved memory does not grow because the host runs ahead of the device. */
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "runtime/arena.h"

enum { AR_FREE = 1, AR_USED = 2, AR_REGION = 4 };
/* A granule's flags. ALIASED: its address still maps memory that moved to another granule
 * while queued work (its stream's, ordered before the new owner's) may use it there; it holds
 * no memory of its own and is unmapped once that work is done. SHARED (with MAPPED): the other
 * side, a granule whose memory came by an alias while that work may still run: a block of
 * another stream placed in its other bytes waits for that work first. */
enum { MAPPED = 1, LISTED = 2, ALIASED = 4, SHARED = 8 };

struct st_arena_block {
  uint64_t start, size;
  st_arena_block *prev, *next;  /* address order */
  st_arena_block* kid[2][2];    /* a free block's children in each treap (BY_SIZE, BY_START):
                                   [tree][0] left, [tree][1] right; one priority for both */
  uint32_t prio;
  uint64_t most;                /* a free block: the largest size in its subtree by start */
  uint8_t state;
  uint64_t stream, stamp;       /* a free block: freed on stream at clock stamp (0: free for all) */
  uint64_t tag;                 /* a live block: its user's (st_arena_tag) */
  st_arena_block* pnext;        /* spares */
};

/* What is known of one stream's frees: those stamped at or before `done` are finished on the
 * GPU; `event` (if any) marks the stream's work up to stamp `covers`. */
typedef struct {
  uint64_t stream, last, done, covers; /* last: its latest free's stamp */
  void* event;
} stream_state;

struct st_arena {
  const backend_ops* ops;
  void* backend;
  st_budget* budget;
  uint64_t alignment, granule, capacity, top;
  uint8_t* base;                 /* the first byte, aligned to alignment */
  void* reserved_base;          /* what the backend reserved (base may lie above it) */
  uint64_t reserved;            /* bytes reserved there: capacity and room to align base */
  st_arena_block* last;         /* the block that ends at top */
  st_arena_block* free_root;
  st_arena_block* addr_root;    /* the free blocks again, keyed by start, once alloc_at is
                                   wanted (st_arena_index_addresses: the layout hints); small
                                   requests then take the lowest fit */
  bool by_address;
  unsigned fit_candidates;      /* free blocks weighed per request (1: best fit alone) */
  bool at_ends;                 /* with fit_candidates > 1, a block may also go at either end of
                                   its free block (st_arena_set_at_ends) */
  bool top_on_boundary;         /* a block of whole granules that grows the top starts on a
                                   granule boundary (st_arena_set_top_on_boundary) */
  bool look_further;            /* with fit_candidates > 1, when each of those needs granules
                                   mapped, up to FURTHER_CANDIDATES more free blocks are looked at
                                   for one that needs none (st_arena_set_look_further) */
  uint64_t maps;                /* granules mapped at an address so far: new, moved or aliased */
  st_arena_block* spares;
  uint64_t clock;               /* stamps frees */
  stream_state* streams;        /* streams blocks were freed on */
  size_t stream_count, stream_cap;
  uint32_t* refs;               /* live blocks touching each granule below top */
  uint64_t *gstream, *gstamp;    /* per granule, the frees its queued work awaits: on gstream up
                                   to stamp gstamp (0: none, MIXED: several streams') */
  uint8_t* mapped;               /* MAPPED, and LISTED while in `cached` (set through set_flags) */
  size_t shared;                 /* granules flagged SHARED */
  size_t granules;              /* entries of refs / mapped */
  uint32_t* want;               /* per granule: want_epoch where the layout the step under way
                                   follows places a block (st_arena_want) */
  uint32_t want_epoch;
  bool wanting;                 /* such a layout is marked */
  bool want_exhausted;          /* a look found no cached granule it leaves alone, and none has
                                   been listed since: moves take the highest, as without one */
  uint32_t* cached;             /* granules mapped with no live block, a max-heap by index (stale
                                   entries: taken again since; each granule listed at most once) */
  size_t cached_count, cached_cap;
  uint32_t rng;
};

/* ---- free treaps: by (size, start) for best fit; by start for the lowest fit and alloc_at ---- */

enum { BY_SIZE = 0, BY_START = 1, L = 0, R = 1 };

/* Inlined with a constant `tree` at each use, so each treap gets its own plain code. */
#define TREAP static inline __attribute__((always_inline))

TREAP bool key_less(int tree, const st_arena_block* a, const st_arena_block* b) {
  if (tree == BY_START) return a->start < b->start;
  return a->size < b->size || (a->size == b->size && a->start < b->start);
}

/* The treap by start keeps in each block the largest size below it (`most`), so the lowest free
 * block that fits is found in one descent. An insert or a remove lists the blocks whose subtree
 * it changed, in the order it reached them, and fixes `most` on them from the deepest up. */
static uint64_t most_of(const st_arena_block* t) { return t ? t->most : 0; }

static void pull(st_arena_block* t) {
  t->most = ST_MAX(t->size, ST_MAX(most_of(t->kid[BY_START][L]), most_of(t->kid[BY_START][R])));
}

static uint64_t pull_all(st_arena_block* t) {
  if (!t) return 0;
  t->most = ST_MAX(t->size, ST_MAX(pull_all(t->kid[BY_START][L]), pull_all(t->kid[BY_START][R])));
  return t->most;
}

/* Deep enough for any treap of random priorities (expected depth about 2 ln n); a longer list
 * (never seen) is fixed by recomputing the whole treap instead. */
#define TOUCHED 256

typedef struct touched {
  st_arena_block* at[TOUCHED];
  size_t n;
} touched;

TREAP void touch(int tree, touched* p, st_arena_block* t) {
  if (tree != BY_START) return;
  if (p->n < TOUCHED) p->at[p->n] = t;
  p->n++;
}

static void refix(touched* p, st_arena_block* root) {
  if (p->n > TOUCHED) pull_all(root);
  else
    while (p->n) pull(p->at[--p->n]);
}

/* Joins two treaps whose keys are all below / all above each other. */
TREAP st_arena_block* tr_merge(int tree, st_arena_block* a, st_arena_block* b, touched* p) {
  st_arena_block *root = NULL, **link = &root;
  while (a && b) {
    if (a->prio > b->prio) {
      *link = a;
      touch(tree, p, a);
      link = &a->kid[tree][R];
      a = a->kid[tree][R];
    } else {
      *link = b;
      touch(tree, p, b);
      link = &b->kid[tree][L];
      b = b->kid[tree][L];
    }
  }
  *link = a ? a : b;
  return root;
}

TREAP st_arena_block* tr_insert(int tree, st_arena_block* root, st_arena_block* n) {
  touched p;
  p.n = 0;
  st_arena_block** link = &root;
  while (*link && (*link)->prio >= n->prio) {
    touch(tree, &p, *link);
    link = &(*link)->kid[tree][key_less(tree, n, *link) ? L : R];
  }
  touch(tree, &p, n);
  /* n goes here: what hangs below splits around its key */
  st_arena_block *t = *link, **lp = &n->kid[tree][L], **rp = &n->kid[tree][R];
  while (t) {
    touch(tree, &p, t);
    if (key_less(tree, t, n)) {
      *lp = t;
      lp = &t->kid[tree][R];
      t = t->kid[tree][R];
    } else {
      *rp = t;
      rp = &t->kid[tree][L];
      t = t->kid[tree][L];
    }
  }
  *lp = *rp = NULL;
  *link = n;
  if (tree == BY_START) refix(&p, root);
  return root;
}

TREAP st_arena_block* tr_remove(int tree, st_arena_block* root, st_arena_block* n) {
  touched p;
  p.n = 0;
  st_arena_block** link = &root;
  while (*link && *link != n) {
    touch(tree, &p, *link);
    link = &(*link)->kid[tree][key_less(tree, n, *link) ? L : R];
  }
  if (*link) *link = tr_merge(tree, n->kid[tree][L], n->kid[tree][R], &p);
  if (tree == BY_START) refix(&p, root);
  return root;
}

/* The smallest free block of at least `need` bytes. */
static st_arena_block* best_fit(st_arena_block* t, uint64_t need) {
  st_arena_block* best = NULL;
  while (t) {
    if (t->size >= need) {
      best = t;
      t = t->kid[BY_SIZE][L];
    } else {
      t = t->kid[BY_SIZE][R];
    }
  }
  return best;
}

/* The free block with the smallest key above after's, or NULL. */
static st_arena_block* next_key(st_arena_block* t, const st_arena_block* after) {
  st_arena_block* next = NULL;
  while (t) {
    if (key_less(BY_SIZE, after, t)) {
      next = t;
      t = t->kid[BY_SIZE][L];
    } else {
      t = t->kid[BY_SIZE][R];
    }
  }
  return next;
}

/* The free block holding byte `at`, or NULL. */
static st_arena_block* at_find(st_arena_block* t, uint64_t at) {
  while (t) {
    if (at < t->start) t = t->kid[BY_START][L];
    else if (at >= t->start + t->size) t = t->kid[BY_START][R];
    else return t;
  }
  return NULL;
}

/* Small requests: the free block of at least `need` bytes that starts lowest. Best fit puts a
 * small block in the smallest hole anywhere in the range, and one that lives on (the optimizer
 * state of a norm or a bias) then holds a granule among activations that are freed; low in the
 * range, small blocks stay together beside the blocks that live longest (docs/online.md,
 * "Small requests go low"). Small: at most a quarter of a granule, and under 1/1024 of the range
 * used so far (in a run of a few granules nearly every block is under a quarter of one, and
 * there best fit packs them better). Only where the free blocks are kept by address (with the
 * layout hints, the online default); a pool without them stays best fit, and as cheap. */
#define SMALL_REQUEST(a, need) ((a)->by_address && (need) <= (a)->granule / 4 && (need) < (a)->top / 1024)

static st_arena_block* lowest_fit(st_arena_block* t, uint64_t need) {
  while (t && t->most >= need) {
    if (most_of(t->kid[BY_START][L]) >= need) t = t->kid[BY_START][L];
    else if (t->size >= need) return t;
    else t = t->kid[BY_START][R];
  }
  return NULL;
}

static void make_free(st_arena* a, st_arena_block* b) {
  b->state = AR_FREE;
  memset(b->kid, 0, sizeof b->kid);
  a->rng = a->rng * 1664525u + 1013904223u;
  b->prio = a->rng;
  a->free_root = tr_insert(BY_SIZE, a->free_root, b);
  if (a->by_address) a->addr_root = tr_insert(BY_START, a->addr_root, b);
}

/* Takes free block b out of both treaps. */
static void unlist(st_arena* a, st_arena_block* b) {
  a->free_root = tr_remove(BY_SIZE, a->free_root, b);
  if (a->by_address) a->addr_root = tr_remove(BY_START, a->addr_root, b);
}

/* In the treap by start, `heir` takes old's place, children and priority (the priority both
 * treaps share, so heir must not be in the one by size), and `most` is fixed down to it. Where
 * a free block grows into a freed neighbour, or a piece split off it stays free, no other free
 * block lies between the two starts, so the key order holds: one descent rather than a remove
 * and an insert, which split and merge subtrees (the pool's cost with the layout hints, mostly
 * treap upkeep: bench/c/bench_pool). heir == old: its size changed in place. */
static void take_place(st_arena* a, st_arena_block* old, st_arena_block* heir) {
  touched p;
  p.n = 0;
  st_arena_block** link = &a->addr_root;
  while (*link != old) {
    touch(BY_START, &p, *link);
    link = &(*link)->kid[BY_START][key_less(BY_START, old, *link) ? L : R];
  }
  *link = heir;
  heir->kid[BY_START][L] = old->kid[BY_START][L];
  heir->kid[BY_START][R] = old->kid[BY_START][R];
  heir->prio = old->prio;
  pull(heir);
  refix(&p, a->addr_root);
}

/* Free block b, already in the treap by start at its place, goes into the one by size. */
static void list_by_size(st_arena* a, st_arena_block* b) {
  b->state = AR_FREE;
  b->kid[BY_SIZE][L] = b->kid[BY_SIZE][R] = NULL;
  a->free_root = tr_insert(BY_SIZE, a->free_root, b);
}

/* A piece that stays free: into both treaps, taking `place`'s in the one by start if given. */
static void free_piece(st_arena* a, st_arena_block* piece, st_arena_block* place) {
  if (!place) {
    make_free(a, piece);
    return;
  }
  take_place(a, place, piece);
  list_by_size(a, piece);
}

static st_arena_block* block_new(st_arena* a) {
  st_arena_block* b = a->spares;
  if (b) a->spares = b->pnext;
  else if (!(b = malloc(sizeof *b))) return NULL;
  memset(b, 0, sizeof *b);
  return b;
}

static void block_drop(st_arena* a, st_arena_block* b) {
  b->pnext = a->spares;
  a->spares = b;
}

/* ---- streams ---- */

#define ANY_STREAM ST_ARENA_ANY_STREAM /* a request for no one stream: only blocks free for all */
#define MIXED UINT64_MAX      /* a granule freed on several streams: unmapped only by waiting */

static stream_state* stream_find(st_arena* a, uint64_t stream) {
  for (size_t i = 0; i < a->stream_count; i++)
    if (a->streams[i].stream == stream) return &a->streams[i];
  return NULL;
}

static stream_state* stream_add(st_arena* a, uint64_t stream) {
  stream_state* s = stream_find(a, stream);
  if (s) return s;
  stream_state* grown = st_room(a->streams, a->stream_count, &a->stream_cap, sizeof *grown, 4);
  if (!grown) return NULL;
  a->streams = grown;
  s = &a->streams[a->stream_count++];
  *s = (stream_state){.stream = stream};
  return s;
}

/* Whether the stream's free stamped `stamp` is finished on the device. When that is not known
 * yet it asks: an event recorded now covers every free so far, and a later call reads it. */
static bool stream_reached(st_arena* a, stream_state* s, uint64_t stamp) {
  if (stamp <= s->done) return true;
  if (s->event && a->ops->event_done(a->backend, s->event)) {
    s->done = s->covers;
    a->ops->event_destroy(a->backend, s->event);
    s->event = NULL;
    if (stamp <= s->done) return true;
  }
  if (!s->event) {
    if (a->ops->event_record(a->backend, s->stream, &s->event) == STALLOC_OK) {
      s->covers = a->clock;
      return stream_reached(a, s, stamp); /* a stream with nothing queued is done at once */
    }
    s->event = NULL; /* asked again next time; meanwhile its blocks stay its own */
    st_clear_error();
  }
  return false;
}

/* The stamp of a free on `stream` now (0 where the backend has no queued work); false: no host
 * memory to follow the stream. */
static bool stamp_free(st_arena* a, uint64_t stream, uint64_t* stamp) {
  *stamp = 0;
  if (!a->ops->event_record) return true;
  stream_state* s = stream_add(a, stream);
  if (!s) return false;
  *stamp = s->last = ++a->clock;
  return true;
}

/* Whether `stream`'s work up to `stamp` is known finished; `ask`: ask the device if need be. */
static bool stamp_done(st_arena* a, uint64_t stream, uint64_t stamp, bool ask) {
  stream_state* s = stream_find(a, stream);
  return s && (ask ? stream_reached(a, s, stamp) : stamp <= s->done);
}

/* Free for every stream, as far as is known without asking the device. */
static bool settled(st_arena* a, st_arena_block* b) {
  if (b->stamp && !stamp_done(a, b->stream, b->stamp, false)) return false;
  b->stamp = 0;
  return true;
}

/* Whether free block b may serve a request on `stream`. */
static bool usable(st_arena* a, st_arena_block* b, uint64_t stream) {
  if (settled(a, b) || b->stream == stream) return true;
  if (!stamp_done(a, b->stream, b->stamp, true)) return false;
  b->stamp = 0;
  return true;
}

/* Waits until every free so far is finished on the device, so every free block serves any
 * stream (a plan's region is about to take them, for whichever streams its blocks use). */
static void settle_all(st_arena* a) {
  for (size_t i = 0; i < a->stream_count; i++) {
    stream_state* s = &a->streams[i];
    while (!stream_reached(a, s, s->last)) {
      if (!s->event) break; /* no event to wait on: its blocks stay its own */
      if (a->ops->event_wait) a->ops->event_wait(a->backend, s->event);
    }
  }
}

/* ---- granules ---- */

static bool grow_tables(st_arena* a, size_t granules) {
  if (granules <= a->granules) return true;
  size_t n = ST_MAX(granules, 2 * a->granules);
  uint32_t* refs = realloc(a->refs, n * sizeof *refs);
  if (!refs) return false;
  a->refs = refs;
  uint8_t* mapped = realloc(a->mapped, n);
  if (!mapped) return false;
  a->mapped = mapped;
  uint64_t* gstream = realloc(a->gstream, n * sizeof *gstream);
  if (!gstream) return false;
  a->gstream = gstream;
  uint64_t* gstamp = realloc(a->gstamp, n * sizeof *gstamp);
  if (!gstamp) return false;
  a->gstamp = gstamp;
  uint32_t* want = realloc(a->want, n * sizeof *want);
  if (!want) return false;
  a->want = want;
  memset(a->want + a->granules, 0, (n - a->granules) * sizeof *want);
  memset(a->refs + a->granules, 0, (n - a->granules) * sizeof *refs);
  memset(a->mapped + a->granules, 0, n - a->granules);
  memset(a->gstamp + a->granules, 0, (n - a->granules) * sizeof *gstamp);
  a->granules = n;
  return true;
}

/* Sets granule g's flags, counting the SHARED ones. */
static void set_flags(st_arena* a, size_t g, uint8_t flags) {
  a->shared += (flags & SHARED) != 0;
  a->shared -= (a->mapped[g] & SHARED) != 0;
  a->mapped[g] = flags;
}

/* Unmaps granule g's address (its memory goes when no other address maps it); `unused`: no
 * queued work touches it, so the device need not be waited for. */
static void unmap_address(st_arena* a, size_t g, bool unused) {
  if (unused && a->ops->unmap_unused) a->ops->unmap_unused(a->backend, a->base + g * a->granule, a->granule);
  else a->ops->unmap(a->backend, a->base + g * a->granule, a->granule);
  set_flags(a, g, 0);
  a->gstamp[g] = 0;
}

/* Unmaps granule g and gives its memory back to the budget. */
static void unmap_granule(st_arena* a, size_t g, bool unused) {
  unmap_address(a, g, unused);
  st_budget_sub(a->budget, a->granule);
}

/* Notes a free of stream's at `stamp` touching granule g (its work must finish before g is
 * unmapped without waiting). */
static void granule_freed(st_arena* a, size_t g, uint64_t stream, uint64_t stamp) {
  uint64_t was = a->gstamp[g];
  if (!stamp || was == MIXED) return;
  if (!was || a->gstream[g] == stream) {
    a->gstream[g] = stream;
    a->gstamp[g] = ST_MAX(was, stamp);
    return;
  }
  if (stamp_done(a, a->gstream[g], was, false)) { /* the other stream's frees are finished */
    a->gstream[g] = stream;
    a->gstamp[g] = stamp;
  } else {
    a->gstamp[g] = MIXED;
  }
}

/* Whether no queued work touches cached granule g (asking the device if need be). */
static bool granule_unused(st_arena* a, size_t g) {
  uint64_t stamp = a->gstamp[g];
  if (!stamp) return true;
  if (stamp == MIXED || !stamp_done(a, a->gstream[g], stamp, true)) return false;
  a->gstamp[g] = 0;
  return true;
}

/* Waits until no queued work touches granule g: its stream's work up to its frees (every
 * stream's so far when several freed there), not the device's. false: it could not wait. */
static bool wait_granule(st_arena* a, size_t g) {
  if (granule_unused(a, g)) return true;
  if (!a->ops->event_wait) return false;
  /* Each wait is on an event not waited for yet: one that a wait leaves unfinished (a failed
   * context) ends the loop, and the caller unmaps with the backend's own wait instead. */
  if (a->gstamp[g] == MIXED) {
    bool all = true;
    for (size_t i = 0, upto = a->clock; i < a->stream_count; i++) {
      stream_state* s = &a->streams[i];
      for (void* waited = NULL; !stream_reached(a, s, upto) && s->event && s->event != waited;) {
        waited = s->event;
        a->ops->event_wait(a->backend, s->event);
      }
      all &= stream_reached(a, s, upto);
    }
    if (all) a->gstamp[g] = 0;
    return all;
  }
  stream_state* s = stream_find(a, a->gstream[g]);
  for (void* waited = NULL; s && !granule_unused(a, g) && s->event && s->event != waited;) {
    waited = s->event;
    a->ops->event_wait(a->backend, s->event);
  }
  return granule_unused(a, g);
}

/* Unmaps aliased granule g's address (no memory of its own), waiting for the device only if
 * queued work may still use it. */
static void unmap_alias(st_arena* a, size_t g) {
  unmap_address(a, g, wait_granule(a, g)); /* its memory is counted at the address it moved to */
}

/* Shared granule g (its memory came by an alias) gets a block of `stream`: another stream's (or
 * a request of no one stream) waits for the queued work of the memory's old owner first. */
static void settle_shared(st_arena* a, size_t g, uint64_t stream) {
  if (!granule_unused(a, g) && (stream == ANY_STREAM || a->gstamp[g] == MIXED || a->gstream[g] != stream))
    (void)wait_granule(a, g);
  if (granule_unused(a, g)) set_flags(a, g, a->mapped[g] & (uint8_t)~SHARED);
}

/* The cached list is a max-heap by granule index: the highest granule first. */
static void cached_sift_up(st_arena* a, size_t i) {
  uint32_t g = a->cached[i];
  for (; i && a->cached[(i - 1) / 2] < g; i = (i - 1) / 2) a->cached[i] = a->cached[(i - 1) / 2];
  a->cached[i] = g;
}

static void cached_sift_down(st_arena* a, size_t i) {
  uint32_t g = a->cached[i];
  for (size_t c; (c = 2 * i + 1) < a->cached_count; i = c) {
    if (c + 1 < a->cached_count && a->cached[c + 1] > a->cached[c]) c++;
    if (a->cached[c] <= g) break;
    a->cached[i] = a->cached[c];
  }
  a->cached[i] = g;
}

/* Drops the entries of unmapped granules (their LISTED flag went with the unmapping). */
static void forget_unmapped(st_arena* a) {
  size_t n = 0;
  for (size_t i = 0; i < a->cached_count; i++)
    if (a->mapped[a->cached[i]] & MAPPED) a->cached[n++] = a->cached[i];
  a->cached_count = n;
  for (size_t i = n / 2; i-- > 0;) cached_sift_down(a, i);
}

/* Takes entry i off the cached list. */
static size_t drop_cached(st_arena* a, size_t i) {
  size_t g = a->cached[i];
  a->cached[i] = a->cached[--a->cached_count];
  if (i < a->cached_count) {
    cached_sift_down(a, i);
    cached_sift_up(a, i);
  }
  set_flags(a, g, a->mapped[g] & (uint8_t)~LISTED);
  return g;
}

/* Whether granule g is mapped with no live block and no alias role: one trim would unmap. */
static bool idle_granule(const st_arena* a, size_t g) {
  return (a->mapped[g] & ~(SHARED | LISTED)) == MAPPED && !a->refs[g];
}

/* A cached granule (mapped, no live block) to give back, or SIZE_MAX. */
static size_t pop_cached(st_arena* a) {
  while (a->cached_count) {
    size_t g = drop_cached(a, 0);
    if (idle_granule(a, g)) return g;
  }
  return SIZE_MAX;
}

/* Whether cached entry g is stale: unmapped or taken again since it was listed. */
static bool stale_entry(const st_arena* a, size_t g) { return !(a->mapped[g] & MAPPED) || a->refs[g]; }

#define UNWANTED_SCAN 8192

/* A cached granule that the layout the step follows does not want and no queued work touches,
 * the first in heap order (so among the highest; at most 16 asked), or SIZE_MAX. A step that
 * follows a layout (the layout hints, or a plan's pool) finds its granules where that layout
 * put them the time before; a granule moved from under a later block of the same step is moved
 * back when that block comes, from under another, and so on.
 * After an evaluation pass, whose blocks went where the training steps have none, the training
 * step moved 250 granules that way on the full-size llama_eval at 32x, where the 62 the pass
 * took were enough (docs/online.md, "Moves that follow a layout"). */
static size_t pop_unwanted(st_arena* a) {
  /* the heap's first UNWANTED_SCAN entries (a 16 GB pool's every idle granule): a move is tens
   * of us of driver calls, a look at each idle granule of an 80 GB pool would add as much; and a
   * look that found none is not made again until an idle granule the layout leaves comes */
  size_t scan = ST_MIN(a->cached_count, (size_t)UNWANTED_SCAN), asked = 0;
  for (size_t i = 0; i < scan && asked < 16; i++) {
    size_t g = a->cached[i];
    if (a->want[g] == a->want_epoch || stale_entry(a, g)) continue;
    asked++;
    if (granule_unused(a, g)) return drop_cached(a, i);
  }
  if (!asked) a->want_exhausted = true;
  return SIZE_MAX;
}

/* A cached granule no queued work touches, or SIZE_MAX: stale entries at the top are dropped,
 * then one the layout under way does not want is looked for; failing that, the heap's first few
 * entries asked, the highest of those whose work is done taken (the top itself on a synchronous
 * device). Stale entries further down stay until they reach the top: dropping one there
 * reshapes the heap under the scan. */
static size_t pop_unused(st_arena* a) {
  while (a->cached_count && stale_entry(a, a->cached[0])) drop_cached(a, 0);
  if (a->wanting && !a->want_exhausted) {
    size_t g = pop_unwanted(a);
    if (g != SIZE_MAX) return g;
  }
  size_t best = SIZE_MAX;
  for (size_t i = 0, asked = 0; i < a->cached_count && i < 64 && asked < 16; i++) {
    size_t g = a->cached[i];
    if (stale_entry(a, g) || (best != SIZE_MAX && g < a->cached[best])) continue;
    asked++;
    if (granule_unused(a, g)) {
      best = i;
      if (i == 0) break;
    }
  }
  return best == SIZE_MAX ? SIZE_MAX : drop_cached(a, best);
}

/* A cached granule whose queued work is all `stream`'s (so that stream's later work may use its
 * memory at once), or SIZE_MAX; the highest few are looked at. */
static size_t pop_same_stream(st_arena* a, uint64_t stream) {
  if (!a->ops->alias || stream == ANY_STREAM) return SIZE_MAX;
  size_t best = SIZE_MAX;
  for (size_t i = 0, looked = 0; i < a->cached_count && looked < 16; i++) {
    size_t g = a->cached[i];
    if (stale_entry(a, g)) continue; /* pop_unused drops it */
    looked++;
    if (a->gstamp[g] != MIXED && a->gstream[g] == stream && (best == SIZE_MAX || g > a->cached[best])) best = i;
  }
  return best == SIZE_MAX ? SIZE_MAX : drop_cached(a, best);
}

/* Maps cached granule c's memory at granule g too, leaving c's address aliased until its queued
 * work is done; false: the backend could not, and c is as it was. */
static bool alias_granule(st_arena* a, size_t c, size_t g) {
  if (a->ops->alias(a->backend, a->base + c * a->granule, a->base + g * a->granule, a->granule) != STALLOC_OK) {
    st_clear_error();
    return false;
  }
  set_flags(a, c, ALIASED);
  set_flags(a, g, MAPPED | SHARED);
  a->maps++;
  a->gstream[g] = a->gstream[c]; /* the memory's queued work, now g's too */
  a->gstamp[g] = a->gstamp[c];
  return true;
}

/* Lists mapped granule g, with no live block, as cached. */
static void list_cached(st_arena* a, size_t g) {
  uint32_t* c = st_room(a->cached, a->cached_count, &a->cached_cap, sizeof *c, 64);
  if (!c) {
    unmap_granule(a, g, false); /* no room to remember it: give it back now */
    return;
  }
  a->cached = c;
  a->cached[a->cached_count++] = (uint32_t)g;
  cached_sift_up(a, a->cached_count - 1);
  set_flags(a, g, a->mapped[g] | LISTED);
  if (a->want[g] != a->want_epoch) a->want_exhausted = false; /* pop_unwanted may take it */
}

/* Uncounts a range: a block freed on `stream` at `stamp` (0: no queued work uses it). */
static void unref(st_arena* a, uint64_t start, uint64_t size, uint64_t stream, uint64_t stamp) {
  for (size_t g = start / a->granule, e = (start + size - 1) / a->granule; g <= e; g++) {
    granule_freed(a, g, stream, stamp);
    if (--a->refs[g] || (a->mapped[g] & ~SHARED) != MAPPED) continue; /* live, unmapped or listed already */
    list_cached(a, g);
  }
}

/* Puts cached granule c's memory at granule g where the backend can (no allocation: on CUDA it
 * saves cuMemCreate and cuMemRelease); false: it could not, and c is as it was or unmapped. */
static bool move_granule(st_arena* a, size_t c, size_t g) {
  if (!a->ops->move) return false;
  if (a->ops->move(a->backend, a->base + c * a->granule, a->base + g * a->granule, a->granule) != STALLOC_OK) {
    st_clear_error();
    return false;
  }
  set_flags(a, c, 0);
  a->gstamp[c] = 0;
  set_flags(a, g, MAPPED);
  a->maps++;
  return true;
}

/* Takes a cached granule no queued work touches for granule g: its memory moves there, or,
 * where the move fails, it is unmapped (its memory is then free for a new granule). Returns it,
 * or SIZE_MAX for none. */
static size_t take_unused(st_arena* a, size_t g) {
  size_t c = pop_unused(a);
  if (c != SIZE_MAX && !move_granule(a, c, g)) {
    unmap_granule(a, c, true);
    st_clear_error(); /* a failed move may have unmapped it already */
  }
  return c;
}

/* Counts the block on its granules, mapping those not mapped: below the peak reserved so far
 * as new granules, at the peak each in place of a cached granule that no queued work touches,
 * or aliasing one whose queued work is the requesting stream's: the peak grows only when
 * neither is. The host waits for the device here only when memory is short or an aliased
 * address is needed before its work is done (that stream's work, not the device's). */
static stalloc_status_t ref_granules(st_arena* a, uint64_t start, uint64_t size, uint64_t stream) {
  size_t first = start / a->granule, last = (start + size - 1) / a->granule;
  for (size_t g = first; g <= last; g++) {
    if (a->mapped[g] == ALIASED) unmap_alias(a, g);
    if (a->mapped[g] & SHARED) settle_shared(a, g, stream);
    /* Below the peak a new granule costs no peak memory, and an alias may cost a wait later.
     * Nor is a cached granule moved there: it stays mapped where it is for a later block (after
     * a trim, as a plan's switch makes, the pool regrows to its peak without moving each
     * granule twice). A memory limit under the peak counts as the peak. */
    bool at_peak = a->budget->reserved + a->granule > a->budget->peak_reserved ||
                   !st_budget_allows(a->budget, a->granule);
    size_t c = !a->mapped[g] && at_peak ? take_unused(a, g) : SIZE_MAX;
    bool moved = c != SIZE_MAX && (a->mapped[g] & MAPPED);
    if (c == SIZE_MAX && !a->mapped[g] && at_peak && (c = pop_same_stream(a, stream)) != SIZE_MAX &&
        !alias_granule(a, c, g))
      list_cached(a, c); /* back on the list, as it was */
    if (!a->mapped[g]) {
      while (!st_budget_allows(a->budget, a->granule) && (c = pop_cached(a)) != SIZE_MAX)
        unmap_granule(a, c, false);
      stalloc_status_t s = STALLOC_OK;
      if (!st_budget_allows(a->budget, a->granule))
        s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: mapping %llu more bytes passes the memory limit of %llu (%llu reserved)",
                    (unsigned long long)a->granule, (unsigned long long)a->budget->limit,
                    (unsigned long long)a->budget->reserved);
      else
        s = a->ops->map(a->backend, a->base + g * a->granule, a->granule);
      /* below the peak the device may be full all the same (other processes): as at the peak,
       * an unused cached granule moves here before any that needs waiting for */
      if (s == STALLOC_ERR_OUT_OF_MEMORY && !at_peak && (c = take_unused(a, g)) != SIZE_MAX) {
        st_clear_error();
        moved = a->mapped[g] & MAPPED;
        s = moved ? STALLOC_OK : a->ops->map(a->backend, a->base + g * a->granule, a->granule);
      }
      while (s == STALLOC_ERR_OUT_OF_MEMORY && (c = pop_cached(a)) != SIZE_MAX) {
        unmap_granule(a, c, false); /* the device is full: wait, and take a cached one's place */
        st_clear_error();
        s = a->ops->map(a->backend, a->base + g * a->granule, a->granule);
      }
      if (s) {
        if (g > first) unref(a, start, (g - first) * a->granule - start % a->granule, 0, 0);
        return s;
      }
      if (!moved) {
        set_flags(a, g, MAPPED);
        st_budget_add(a->budget, a->granule);
        a->maps++;
      }
    }
    a->refs[g]++;
  }
  return STALLOC_OK;
}

/* ref_granules, with the granules a block maps one by one granted the device's access in one
 * grant per run where the backend batches grants. If the grant or any map fails, the granules
 * this call mapped are unmapped and counted gone (an alias's memory stays at its old address
 * until that is unmapped, as it would have anyway) and the block is not counted: a request
 * that cannot be served leaves the pool as it found it, not grown towards the limit. One that
 * the memory limit could never let in fails before anything is mapped. */
static stalloc_status_t ref(st_arena* a, uint64_t start, uint64_t size, uint64_t stream) {
  size_t first = start / a->granule, last = (start + size - 1) / a->granule;
  if (!grow_tables(a, last + 1)) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
  size_t g = first;
  while (g <= last && (a->mapped[g] & MAPPED)) g++;
  if (g > last) return ref_granules(a, start, size, stream); /* nothing to map */
  size_t unmapped = 0;
  for (size_t h = g; h <= last; h++) unmapped += !(a->mapped[h] & MAPPED);
  /* cached granules give their memory back before new ones are mapped: only the rest counts */
  if (unmapped > a->cached_count && !st_budget_allows(a->budget, (unmapped - a->cached_count) * a->granule))
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: mapping %llu more bytes passes the memory limit of %llu (%llu reserved)",
                   (unsigned long long)((unmapped - a->cached_count) * a->granule),
                   (unsigned long long)a->budget->limit, (unsigned long long)a->budget->reserved);
  size_t n = last - first + 1;
  uint8_t stack_was[64];
  uint8_t* was = n <= sizeof stack_was ? stack_was : malloc(n);
  if (!was) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
  for (g = first; g <= last; g++) was[g - first] = (a->mapped[g] & MAPPED) != 0;
  bool batch = a->ops->access_begin && a->ops->access_end;
  if (batch) a->ops->access_begin(a->backend);
  stalloc_status_t s = ref_granules(a, start, size, stream);
  stalloc_status_t granted = batch ? a->ops->access_end(a->backend) : STALLOC_OK;
  if (granted && !s) {
    unref(a, start, size, 0, 0); /* ref_granules' own failure has done so already */
    s = granted;
  }
  if (s) {
    for (g = first; g <= last; g++) /* what it mapped no work uses */
      if (!was[g - first] && (a->mapped[g] & MAPPED)) unmap_granule(a, g, true);
    forget_unmapped(a); /* unref listed them: a later listing must not be a second entry */
  }
  if (was != stack_was) free(was);
  return s;
}

/* ---- blocks ---- */

/* Whether free neighbour n and block b may become one free block: the merged block is held to
 * the stricter of the two, which must be one stream's. */
static bool mergeable(st_arena* a, st_arena_block* n, st_arena_block* b) {
  return n && n->state == AR_FREE && (settled(a, n) || settled(a, b) || n->stream == b->stream);
}

/* into takes in from's bytes: the merged block waits for whichever of the two still waits. */
static void merge_stamp(st_arena* a, st_arena_block* into, st_arena_block* from) {
  if (settled(a, from)) return;
  if (settled(a, into)) into->stream = from->stream;
  into->stamp = ST_MAX(into->stamp, from->stamp);
}

/* Marks b free, merged with free neighbours. The merged block keeps a neighbour's place in the
 * treap by start (`placed`: the previous block's, or b takes the next one's). */
static st_arena_block* coalesce(st_arena* a, st_arena_block* b) {
  bool placed = false;
  st_arena_block* p = b->prev;
  if (mergeable(a, p, b)) { /* merge into the previous block */
    merge_stamp(a, p, b);
    a->free_root = tr_remove(BY_SIZE, a->free_root, p);
    placed = a->by_address;
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    if (a->last == b) a->last = p;
    block_drop(a, b);
    b = p;
  }
  st_arena_block* n = b->next;
  if (mergeable(a, n, b)) {
    merge_stamp(a, b, n);
    a->free_root = tr_remove(BY_SIZE, a->free_root, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    if (a->last == n) a->last = b;
    if (placed) a->addr_root = tr_remove(BY_START, a->addr_root, n);
    else if (a->by_address) { /* b takes n's place: nothing free lies between them */
      take_place(a, n, b);
      placed = true;
    }
    block_drop(a, n);
  }
  if (!placed) make_free(a, b);
  else {
    if (b == p) take_place(a, b, b); /* it kept its place and grew */
    list_by_size(a, b);
  }
  return b;
}

static void release_block(st_arena* a, st_arena_block* b) {
  unref(a, b->start, b->size, b->stream, b->stamp);
  coalesce(a, b);
}

stalloc_status_t st_arena_create(const backend_ops* ops, void* backend, const backend_caps* caps,
                                 uint64_t alignment, uint64_t capacity, st_budget* budget,
                                 st_arena** out) {
  if (!caps->can_grow || !ops->reserve || !ops->map || !ops->unmap || !ops->release)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "arena: the %s backend cannot map memory in place", ops->name);
  uint64_t granule = caps->map_granularity ? caps->map_granularity : caps->granularity;
  capacity = st_align_up(capacity, granule);
  if (!capacity || capacity / granule > UINT32_MAX)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "arena: capacity out of range");
  st_arena* a = calloc(1, sizeof *a);
  if (!a) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
  /* Offsets are multiples of alignment, so base must be too: an alignment above the granule
   * (which the backend's reservation is aligned to) needs room to move base up. */
  uint64_t slack = alignment > granule ? alignment : 0;
  if (capacity > UINT64_MAX - slack) {
    free(a);
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "arena: capacity out of range");
  }
  void* reserved_base = NULL;
  stalloc_status_t s = ops->reserve(backend, capacity + slack, &reserved_base);
  if (s) {
    free(a);
    return s;
  }
  uint8_t* base = (uint8_t*)st_align_up((uintptr_t)reserved_base, ST_MAX(alignment, granule));
  *a = (st_arena){.ops = ops, .backend = backend, .budget = budget, .alignment = alignment,
                  .granule = granule, .capacity = capacity, .base = base,
                  .reserved_base = reserved_base, .reserved = capacity + slack, .rng = 0x2545F491u,
                  .fit_candidates = 1};
  *out = a;
  return STALLOC_OK;
}

void st_arena_destroy(st_arena* a) {
  if (!a) return;
  for (size_t g = 0; g < a->granules; g++)
    if (a->mapped[g] == ALIASED) unmap_alias(a, g);
    else if (a->mapped[g]) unmap_granule(a, g, false);
  a->ops->release(a->backend, a->reserved_base, a->reserved);
  for (size_t i = 0; i < a->stream_count; i++)
    if (a->streams[i].event) a->ops->event_destroy(a->backend, a->streams[i].event);
  free(a->streams);
  for (st_arena_block *b = a->last, *p; b; b = p) {
    p = b->prev;
    free(b);
  }
  for (st_arena_block *b = a->spares, *n; b; b = n) {
    n = b->pnext;
    free(b);
  }
  free(a->refs);
  free(a->mapped);
  free(a->gstream);
  free(a->gstamp);
  free(a->want);
  free(a->cached);
  free(a);
}

/* Free block b, off the treap by size (and off the one by start, unless `placed`: then it still
 * sits there and the first piece split off it takes its place), becomes [start, start + need);
 * the bytes before and after stay free. false (b free again): no host memory. */
static bool split_out(st_arena* a, st_arena_block* b, uint64_t start, uint64_t need, bool placed) {
  uint64_t front = start - b->start;
  if (front) { /* the bytes below start stay free */
    st_arena_block* f = block_new(a);
    if (!f) {
      if (placed) list_by_size(a, b);
      else make_free(a, b);
      return false;
    }
    f->start = b->start;
    f->size = front;
    f->stream = b->stream;
    f->stamp = b->stamp;
    f->prev = b->prev;
    f->next = b;
    if (b->prev) b->prev->next = f;
    b->prev = f;
    free_piece(a, f, placed ? b : NULL);
    placed = false;
    b->start += front;
    b->size -= front;
  }
  if (b->size - need >= a->alignment) { /* split: the rest stays free */
    st_arena_block* r = block_new(a);
    if (r) {
      r->start = b->start + need;
      r->size = b->size - need;
      r->stream = b->stream;
      r->stamp = b->stamp;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      if (a->last == b) a->last = r;
      free_piece(a, r, placed ? b : NULL);
      placed = false;
      b->size = need;
    }
  }
  if (placed) a->addr_root = tr_remove(BY_START, a->addr_root, b);
  return true;
}

/* Grows the top to `end` from its free block (taken off the treaps), or from a new one that
 * starts at the old top; NULL: no host memory. *grew: the bytes the top grew by. */
static st_arena_block* grow_top(st_arena* a, bool last_free, uint64_t end, uint64_t* grew) {
  st_arena_block* b;
  if (last_free) {
    b = a->last;
    unlist(a, b);
  } else {
    if (!(b = block_new(a))) return NULL;
    b->start = a->top;
    b->prev = a->last;
    if (a->last) a->last->next = b;
    a->last = b;
  }
  *grew = end - a->top;
  a->top = end;
  b->size = end - b->start;
  return b;
}

/* Granules of [start, start + need), inside a free block, that no live block touches: only the
 * first and the last can be shared, with the neighbours below and above. */
static uint64_t untouched_in(const st_arena* a, uint64_t start, uint64_t need) {
  size_t first = start / a->granule, last = (start + need - 1) / a->granule;
  uint64_t n = last - first + 1;
  n -= first < a->granules && a->refs[first];
  n -= last != first && last < a->granules && a->refs[last];
  return n;
}

/* Where in free block b (not at the top) a block of `need` bytes starts: at b's start, unless
 * the block is a whole number of granules and b has room to put it on a granule boundary. There
 * it holds exactly its own granules, and all of them come back when it is freed; one that
 * straddles a boundary more shares a granule with each neighbour, and once one of them is
 * freed that granule stays mapped for a few bytes (best fit packs from a hole's start, and a
 * hole starts wherever its neighbour ended). Of the two boundaries (the block begins on the
 * first one in b, or ends on the last one), the one that leaves the smaller gap. Measured on
 * recorded runs (docs/online.md, "Blocks on granule boundaries").
 * A block of other sizes goes against b's end rather than its start when that touches fewer
 * granules no live block touches: the block above shares its granule with it, where from the
 * start that granule would stay partly used for as long as the block above lives (weights and
 * optimizer state made where freed activations were). The start wins a tie, as best fit.
 * docs/online.md, "Against the block above". */
static uint64_t start_in(const st_arena* a, const st_arena_block* b, uint64_t need, uint64_t align) {
  uint64_t start = st_align_up(b->start, align), end = b->start + b->size, g = a->granule;
  if (need % g) {
    uint64_t against = (end - need) / align * align; /* b holds need bytes from start */
    return against > start && untouched_in(a, against, need) < untouched_in(a, start, need) ? against : start;
  }
  if (start % g == 0) return start;
  uint64_t low = st_align_up(st_align_up(start, g), align); /* begins on a boundary */
  uint64_t high = end / g * g;                              /* ends on one */
  high = high >= need ? (high - need) / align * align : 0;
  bool low_fits = low <= end && end - low >= need, high_fits = high >= start && high + need <= end;
  if (low_fits && (!high_fits || low - start <= end - (high + need))) return low;
  return high_fits ? high : start;
}

/* Granules of [start, start + need) not mapped: what placing a block there maps or moves. */
static uint64_t unmapped_in(const st_arena* a, uint64_t start, uint64_t need) {
  uint64_t n = 0;
  for (size_t g = start / a->granule, last = (start + need - 1) / a->granule; g <= last; g++)
    n += g >= a->granules || !(a->mapped[g] & MAPPED);
  return n;
}

/* Where in free block b a block of `need` bytes goes: start_in's start or, with at_ends, the
 * lowest granule boundary in b or b's end (on a boundary or not), whichever maps the fewest
 * granules (the first of those). Best fit at the pool's peak leaves the step's blocks on other
 * addresses each step when their sizes vary (MoE routing): at one end or the other of its free
 * block a block often finds granules still mapped from the step before. *cost: the granules
 * it maps there. */
static uint64_t cheapest_start(const st_arena* a, const st_arena_block* b, uint64_t need, uint64_t align,
                               uint64_t* cost) {
  uint64_t start = start_in(a, b, need, align), best = unmapped_in(a, start, need);
  if (a->at_ends && best) {
    uint64_t g = a->granule, end = b->start + b->size, last = end - need; /* b holds need bytes */
    uint64_t ends[3] = {st_align_up(st_align_up(b->start, g), align), last / align * align, last / g * g / align * align};
    for (int k = 0; k < 3 && best; k++) {
      if (ends[k] < b->start || ends[k] > last) continue;
      uint64_t n = unmapped_in(a, ends[k], need);
      if (n < best) {
        best = n;
        start = ends[k];
      }
    }
  }
  *cost = best;
  return start;
}

#define FURTHER_CANDIDATES 60

/* Among best fit and the next fit_candidates - 1 free blocks by size, the one whose placement
 * needs the fewest granules mapped (the smallest of those): each granule it maps is a move on
 * a GPU, tens of us of driver calls. *start: where in it the block goes (cheapest_start's). */
static st_arena_block* fewest_unmapped(st_arena* a, st_arena_block* b, uint64_t need, uint64_t align,
                                       uint64_t stream, uint64_t* start) {
  uint64_t best;
  *start = cheapest_start(a, b, need, align, &best);
  st_arena_block* c = b;
  for (unsigned i = 1; i < a->fit_candidates && best && (c = next_key(a->free_root, c)); i++) {
    if (!usable(a, c, stream)) continue;
    uint64_t cost, at = cheapest_start(a, c, need, align, &cost);
    if (cost < best) {
      best = cost;
      b = c;
      *start = at;
    }
  }
  /* A block that needs a map in each of those may still find mapped granules a little further
   * up the sizes: an evaluation pass between training steps, served by best fit, put its blocks
   * where nothing was mapped and moved 399 of the training step's idle granules there, and the
   * step after it moved them back (full-size GPT-2 at 256x), where some free block a few sizes
   * up held each of those blocks on mapped granules. Only a placement that maps nothing is taken
   * there, so the candidates' choice stands wherever every block needs a map. */
  for (unsigned more = 0; a->look_further && best && c && more < FURTHER_CANDIDATES && (c = next_key(a->free_root, c)); more++) {
    if (!usable(a, c, stream)) continue;
    uint64_t cost, at = cheapest_start(a, c, need, align, &cost);
    if (!cost) {
      best = 0;
      b = c;
      *start = at;
    }
  }
  return b;
}

/* Takes a free block that holds [start, start + need) for some start that is a multiple of
 * `align` (best fit, else the top grows), splits off what lies before and after, and returns
 * it, neither mapped nor counted on its granules. *grew: the bytes the top grew by. */
static stalloc_status_t carve(st_arena* a, uint64_t need, uint64_t align, uint64_t stream,
                              st_arena_block** out, uint64_t* grew) {
  *grew = 0;
  uint64_t slack = align > a->alignment ? align - a->alignment : 0;
  if (!need || need > a->capacity || slack > a->capacity - need)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: %llu bytes is more than its %llu-byte range",
                   (unsigned long long)need, (unsigned long long)a->capacity);
  /* both treaps hold the same blocks: when the lowest fit finds none, neither would best fit */
  st_arena_block* b = SMALL_REQUEST(a, need) ? lowest_fit(a->addr_root, need + slack)
                                             : best_fit(a->free_root, need + slack);
  for (int skipped = 0; b && !usable(a, b, stream); skipped++) /* others' recent frees */
    b = skipped < 64 ? next_key(a->free_root, b) : NULL;
  uint64_t start = 0;
  if (b && a->fit_candidates > 1) b = fewest_unmapped(a, b, need, align, stream, &start);
  else if (b) start = start_in(a, b, need, align);
  bool placed = false; /* b stays in the treap by start for split_out */
  if (b) {
    a->free_root = tr_remove(BY_SIZE, a->free_root, b);
    placed = a->by_address;
  } else {
    /* the top grows: from its free block if it has one */
    bool last_free = a->last && a->last->state == AR_FREE && usable(a, a->last, stream);
    uint64_t from = last_free ? a->last->start : a->top;
    uint64_t first = st_align_up(from, align);
    if (a->top_on_boundary && need % a->granule == 0)
      first = st_align_up(st_align_up(from, a->granule), align);
    uint64_t end = first + need;
    if (end > a->capacity)
      return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: its %llu-byte address range is used up",
                     (unsigned long long)a->capacity);
    if (!(b = grow_top(a, last_free, end, grew))) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
    start = first;
  }
  if (!split_out(a, b, start, need, placed))
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
  *out = b;
  return STALLOC_OK;
}

/* Takes [at, at + need) if it is free and usable on `stream` (the top grows if it must):
 * false, with nothing changed, if any byte of it is taken. */
static bool carve_at(st_arena* a, uint64_t at, uint64_t need, uint64_t stream, st_arena_block** out,
                     uint64_t* grew) {
  *grew = 0;
  if (at % a->alignment || !need || need > a->capacity || at > a->capacity - need) return false;
  st_arena_block* b = NULL;
  if (at < a->top) { /* its start lies in a free block */
    b = at_find(a->addr_root, at);
    if (!b || !usable(a, b, stream)) return false;
  }
  bool placed = false; /* b stays in the treap by start for split_out */
  if (at + need <= a->top) {
    if (at + need > b->start + b->size) return false;
    a->free_root = tr_remove(BY_SIZE, a->free_root, b);
    placed = true;
  } else { /* it passes the top: from the free block that ends there, if any */
    bool last_free = a->last && a->last->state == AR_FREE && usable(a, a->last, stream);
    if (b && b != a->last) return false;
    if (!(b = grow_top(a, last_free, at + need, grew))) return false;
  }
  if (!split_out(a, b, at, need, placed)) return false;
  *out = b;
  return true;
}

/* Gives back a block carve() took: free again, and a top that grew for it shrinks. */
static void uncarve(st_arena* a, st_arena_block* b, uint64_t grew) {
  b = coalesce(a, b);
  if (grew && a->last == b && b->size >= grew) {
    unlist(a, b);
    b->size -= grew;
    a->top -= grew;
    if (b->size) make_free(a, b);
    else { /* it was all new: drop it */
      a->last = b->prev;
      if (b->prev) b->prev->next = NULL;
      block_drop(a, b);
    }
  }
}

stalloc_status_t st_arena_alloc(st_arena* a, uint64_t size, uint64_t stream, void** ptr,
                                st_arena_block** out) {
  uint64_t need = st_align_up(size, a->alignment), grew;
  st_arena_block* b;
  stalloc_status_t s = carve(a, need ? need : size, a->alignment, stream, &b, &grew);
  if (s) return s;
  if ((s = ref(a, b->start, b->size, stream))) {
    uncarve(a, b, grew);
    return s;
  }
  b->state = AR_USED;
  b->stamp = 0;
  b->tag = 0;
  *ptr = a->base + b->start;
  *out = b;
  return STALLOC_OK;
}

void st_arena_index_addresses(st_arena* a) {
  if (a->by_address) return;
  a->by_address = true;
  for (st_arena_block* b = a->last; b; b = b->prev)
    if (b->state == AR_FREE) a->addr_root = tr_insert(BY_START, a->addr_root, b);
}

bool st_arena_alloc_at(st_arena* a, uint64_t offset, uint64_t size, uint64_t stream, void** ptr,
                       st_arena_block** out) {
  uint64_t need = st_align_up(size, a->alignment), grew;
  st_arena_block* b;
  if (!a->by_address || !carve_at(a, offset, need, stream, &b, &grew)) return false;
  if (ref(a, b->start, b->size, stream)) {
    uncarve(a, b, grew);
    st_clear_error();
    return false;
  }
  b->state = AR_USED;
  b->stamp = 0;
  b->tag = 0;
  *ptr = a->base + b->start;
  *out = b;
  return true;
}

size_t st_arena_taken(const st_arena* a, uint64_t* starts, uint64_t* sizes, uint64_t* tags, size_t capacity) {
  size_t n = 0;
  for (const st_arena_block* b = a->last; b; b = b->prev)
    if (b->state != AR_FREE) {
      if (n < capacity) {
        starts[n] = b->start;
        sizes[n] = b->size;
        if (tags) tags[n] = b->state == AR_USED ? b->tag : 0;
      }
      n++;
    }
  return n;
}

uint64_t* st_arena_tag(st_arena_block* b) { return &b->tag; }

uint64_t st_arena_offset(const st_arena* a, const void* ptr) { return (uint64_t)((const uint8_t*)ptr - a->base); }

stalloc_status_t st_arena_region(st_arena* a, uint64_t size, uint64_t align, void** ptr,
                                 st_arena_block** out) {
  settle_all(a);
  /* It starts on a granule, so the plan's offsets fall on granules as planned, and ends where
   * it needs to: the bytes above share its last granule. */
  align = ST_MAX(ST_MAX(align, a->alignment), a->granule);
  uint64_t need = st_align_up(size, a->alignment), grew;
  st_arena_block* b;
  stalloc_status_t s = carve(a, need ? need : size, align, ANY_STREAM, &b, &grew);
  if (s) return s;
  b->state = AR_REGION;
  b->stamp = 0;
  *ptr = a->base + b->start;
  *out = b;
  return STALLOC_OK;
}

bool st_arena_region_extend(st_arena* a, st_arena_block* r, uint64_t size) {
  uint64_t need = st_align_up(size, a->alignment), grew;
  if (need <= r->size) return true;
  uint64_t at = r->start + r->size, extra = need - r->size;
  if (extra > a->capacity || at > a->capacity - extra) return false;
  settle_all(a);
  /* r's neighbour by address: a free block long enough, or the last one, or none (r is last) */
  st_arena_block* b = r->next;
  if (b ? b->state != AR_FREE || !usable(a, b, ANY_STREAM) || (b->size < extra && b != a->last) : a->top != at)
    return false;
  bool placed = false; /* b stays in the treap by start for split_out */
  if (b && b->size >= extra) {
    a->free_root = tr_remove(BY_SIZE, a->free_root, b);
    placed = a->by_address;
  } else if (!(b = grow_top(a, b != NULL, at + extra, &grew))) {
    return false;
  }
  if (!split_out(a, b, at, extra, placed)) return false;
  /* b begins where r ends: r takes its bytes */
  r->size += b->size;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  if (a->last == b) a->last = r;
  block_drop(a, b);
  return true;
}

stalloc_status_t st_arena_region_ref(st_arena* a, const void* ptr, uint64_t size, uint64_t stream) {
  return ref(a, (uint64_t)((const uint8_t*)ptr - a->base), size, stream);
}

/* The runtime lets go of a range only once its queued work is done (a freed block's event). */
void st_arena_region_unref(st_arena* a, const void* ptr, uint64_t size) {
  unref(a, (uint64_t)((const uint8_t*)ptr - a->base), size, 0, 0);
}

const size_t* st_arena_shared_count(const st_arena* a) { return &a->shared; }

void st_arena_settle(st_arena* a, const void* ptr, uint64_t size, uint64_t stream) {
  uint64_t start = (uint64_t)((const uint8_t*)ptr - a->base);
  for (size_t g = start / a->granule, e = (start + size - 1) / a->granule; g <= e && g < a->granules; g++)
    if (a->mapped[g] & SHARED) settle_shared(a, g, stream);
}

bool st_arena_region_free(st_arena* a, const void* ptr, uint64_t size, uint64_t stream) {
  uint64_t stamp;
  if (!stamp_free(a, stream, &stamp)) return false;
  unref(a, (uint64_t)((const uint8_t*)ptr - a->base), size, stream, stamp);
  return true;
}

void st_arena_region_release(st_arena* a, st_arena_block* region) { coalesce(a, region); }

uint64_t st_arena_alignment(const st_arena* a) { return a->alignment; }

uint64_t st_arena_granule(const st_arena* a) { return a->granule; }

size_t st_arena_cached_entries(const st_arena* a) { return a->cached_count; }

void st_arena_free(st_arena* a, st_arena_block* b, uint64_t stream) {
  uint64_t stamp;
  /* No host memory to follow its stream: the block is never reused (its bytes stay out of use
   * until the arena goes) rather than risk another stream overwriting it. */
  if (!stamp_free(a, stream, &stamp)) return;
  if (stamp) {
    b->stream = stream;
    b->stamp = stamp;
  }
  release_block(a, b);
}

uint64_t st_arena_idle_bytes(const st_arena* a) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < a->cached_count; i++) bytes += idle_granule(a, a->cached[i]) ? a->granule : 0;
  return bytes;
}

uint64_t st_arena_maps(const st_arena* a) { return a->maps; }

uint64_t st_arena_released_by(const st_arena* a, st_arena_block* const* blocks, size_t n) {
  uint32_t* touches = calloc(a->granules ? a->granules : 1, sizeof *touches);
  if (!touches) return 0; /* no host memory: assume nothing would go */
  for (size_t i = 0; i < n; i++)
    for (size_t g = blocks[i]->start / a->granule, e = (blocks[i]->start + blocks[i]->size - 1) / a->granule;
         g <= e && g < a->granules; g++)
      touches[g]++;
  uint64_t bytes = 0;
  for (size_t g = 0; g < a->granules; g++)
    bytes += touches[g] && touches[g] == a->refs[g] ? a->granule : 0;
  free(touches);
  return bytes;
}

void st_arena_set_fit_candidates(st_arena* a, unsigned candidates) {
  a->fit_candidates = candidates ? candidates : 1;
}

void st_arena_set_top_on_boundary(st_arena* a, bool on) { a->top_on_boundary = on; }

void st_arena_set_at_ends(st_arena* a, bool on) { a->at_ends = on; }

void st_arena_set_look_further(st_arena* a, bool on) { a->look_further = on; }

void st_arena_want(st_arena* a, const uint64_t* offsets, const uint64_t* sizes, size_t n) {
  if (++a->want_epoch == 0) { /* wrapped: no mark of an old epoch may read as current */
    if (a->want) memset(a->want, 0, a->granules * sizeof *a->want);
    a->want_epoch = 1;
  }
  a->wanting = n > 0;
  a->want_exhausted = false;
  for (size_t i = 0; i < n; i++) {
    if (!sizes[i] || offsets[i] >= a->capacity || sizes[i] > a->capacity - offsets[i]) continue;
    size_t first = offsets[i] / a->granule, last = (offsets[i] + sizes[i] - 1) / a->granule;
    if (!grow_tables(a, last + 1)) { /* no host memory: moves go as without a layout */
      a->wanting = false;
      return;
    }
    for (size_t g = first; g <= last; g++) a->want[g] = a->want_epoch;
  }
}

uint64_t st_arena_trim(st_arena* a) {
  uint64_t bytes = 0;
  for (size_t g = pop_cached(a); g != SIZE_MAX; g = pop_cached(a)) {
    /* The queued work of the frees that touched it, on their streams (once a stream is waited
     * for, its later granules need no wait), not the whole device granule by granule. */
    unmap_granule(a, g, wait_granule(a, g));
    bytes += a->granule;
  }
  return bytes;
}
