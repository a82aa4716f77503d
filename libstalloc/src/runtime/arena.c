/* arena.c - the growable pool (see arena.h).
 *
 * Address space is cheap and physical memory is what a run is measured by, so the arena keeps
 * the two apart. Blocks tile [0, top) of one reserved range in address order; free ones sit in
 * a treap keyed by (size, start) for best fit, and coalesce with free neighbours. A request no
 * free block fits extends the top. Physical memory is mapped per granule (the backend's
 * map_granularity: 2 MiB on CUDA, and in the virtual backend, which models it): each granule
 * counts the live blocks touching it. A granule whose count drops to zero stays mapped (cached)
 * until a granule elsewhere needs mapping: then one cached granule is unmapped first, so
 * reserved memory grows only when every mapped granule holds live bytes. Unlike PyTorch's
 * expandable segments, a hole in the middle of the range gives its whole granules back.
 *
 * Streams: a block freed on a backend with events waits (pending) until its stream's work is
 * done before it coalesces or serves another request. */
#include <stdlib.h>
#include <string.h>

#include "runtime/arena.h"

enum { AR_FREE = 1, AR_USED = 2, AR_PENDING = 3, AR_REGION = 4 };
enum { MAPPED = 1, LISTED = 2 }; /* a granule's flags */

struct st_arena_block {
  uint64_t start, size;
  st_arena_block *prev, *next;  /* address order */
  st_arena_block *left, *right; /* free treap */
  uint32_t prio;
  uint8_t state;
  void* event;
  st_arena_block* pnext;        /* pending list, spares */
};

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
  st_arena_block *pending_head, *pending_tail, *spares;
  uint32_t* refs;               /* live blocks touching each granule below top */
  uint8_t* mapped;               /* MAPPED, and LISTED while in `cached` */
  size_t granules;              /* entries of refs / mapped */
  uint32_t* cached;             /* granules mapped with no live block (stale entries: taken again
                                   since; each granule listed at most once) */
  size_t cached_count, cached_cap;
  uint32_t rng;
};

/* ---- free treap keyed by (size, start) ---- */

static bool key_less(const st_arena_block* a, const st_arena_block* b) {
  return a->size < b->size || (a->size == b->size && a->start < b->start);
}

static st_arena_block* tr_insert(st_arena_block* t, st_arena_block* n) {
  if (!t) return n;
  if (n->prio > t->prio) {
    /* split t around n */
    st_arena_block *l = NULL, *r = NULL, **lp = &l, **rp = &r;
    while (t) {
      if (key_less(t, n)) {
        *lp = t;
        lp = &t->right;
        t = t->right;
      } else {
        *rp = t;
        rp = &t->left;
        t = t->left;
      }
    }
    *lp = *rp = NULL;
    n->left = l;
    n->right = r;
    return n;
  }
  if (key_less(n, t)) t->left = tr_insert(t->left, n);
  else t->right = tr_insert(t->right, n);
  return t;
}

static st_arena_block* tr_merge(st_arena_block* a, st_arena_block* b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->right = tr_merge(a->right, b);
    return a;
  }
  b->left = tr_merge(a, b->left);
  return b;
}

static st_arena_block* tr_remove(st_arena_block* t, st_arena_block* n) {
  if (!t) return NULL;
  if (t == n) return tr_merge(n->left, n->right);
  if (key_less(n, t)) t->left = tr_remove(t->left, n);
  else t->right = tr_remove(t->right, n);
  return t;
}

/* The smallest free block of at least `need` bytes. */
static st_arena_block* best_fit(st_arena_block* t, uint64_t need) {
  st_arena_block* best = NULL;
  while (t) {
    if (t->size >= need) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  return best;
}

static void make_free(st_arena* a, st_arena_block* b) {
  b->state = AR_FREE;
  b->left = b->right = NULL;
  a->rng = a->rng * 1664525u + 1013904223u;
  b->prio = a->rng;
  a->free_root = tr_insert(a->free_root, b);
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
  memset(a->refs + a->granules, 0, (n - a->granules) * sizeof *refs);
  memset(a->mapped + a->granules, 0, n - a->granules);
  a->granules = n;
  return true;
}

static void unmap_granule(st_arena* a, size_t g) {
  a->ops->unmap(a->backend, a->base + g * a->granule, a->granule);
  a->mapped[g] = 0;
  st_budget_sub(a->budget, a->granule);
}

/* A cached granule (mapped, no live block) to give back, or SIZE_MAX. */
static size_t pop_cached(st_arena* a) {
  while (a->cached_count) {
    size_t g = a->cached[--a->cached_count];
    a->mapped[g] &= (uint8_t)~LISTED;
    if (a->mapped[g] && !a->refs[g]) return g;
  }
  return SIZE_MAX;
}

static void unref(st_arena* a, uint64_t start, uint64_t size) {
  for (size_t g = start / a->granule, e = (start + size - 1) / a->granule; g <= e; g++) {
    if (--a->refs[g] || a->mapped[g] != MAPPED) continue; /* live, unmapped or listed already */
    if (a->cached_count == a->cached_cap) {
      size_t cap = a->cached_cap ? 2 * a->cached_cap : 64;
      uint32_t* c = realloc(a->cached, cap * sizeof *c);
      if (!c) {
        unmap_granule(a, g); /* no room to remember it: give it back now */
        continue;
      }
      a->cached = c;
      a->cached_cap = cap;
    }
    a->cached[a->cached_count++] = (uint32_t)g;
    a->mapped[g] |= LISTED;
  }
}

/* Counts the block on its granules, mapping those not mapped (each after giving a cached one
 * back, so reserved memory grows only when none is cached). */
static stalloc_status_t ref(st_arena* a, uint64_t start, uint64_t size) {
  size_t first = start / a->granule, last = (start + size - 1) / a->granule;
  if (!grow_tables(a, last + 1)) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
  for (size_t g = first; g <= last; g++) {
    if (!a->mapped[g]) {
      size_t c = pop_cached(a);
      if (c != SIZE_MAX) unmap_granule(a, c);
      stalloc_status_t s = STALLOC_OK;
      if (!st_budget_allows(a->budget, a->granule))
        s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: mapping %llu more bytes passes the memory limit of %llu (%llu reserved)",
                    (unsigned long long)a->granule, (unsigned long long)a->budget->limit,
                    (unsigned long long)a->budget->reserved);
      else
        s = a->ops->map(a->backend, a->base + g * a->granule, a->granule);
      if (s) {
        if (g > first) unref(a, start, (g - first) * a->granule - start % a->granule);
        return s;
      }
      a->mapped[g] = MAPPED;
      st_budget_add(a->budget, a->granule);
    }
    a->refs[g]++;
  }
  return STALLOC_OK;
}

/* ---- blocks ---- */

/* Marks b free, merged with free neighbours. */
static st_arena_block* coalesce(st_arena* a, st_arena_block* b) {
  st_arena_block* p = b->prev;
  if (p && p->state == AR_FREE) { /* merge into the previous block */
    a->free_root = tr_remove(a->free_root, p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    if (a->last == b) a->last = p;
    block_drop(a, b);
    b = p;
  }
  st_arena_block* n = b->next;
  if (n && n->state == AR_FREE) {
    a->free_root = tr_remove(a->free_root, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    if (a->last == n) a->last = b;
    block_drop(a, n);
  }
  make_free(a, b);
  return b;
}

static void release_block(st_arena* a, st_arena_block* b) {
  unref(a, b->start, b->size);
  coalesce(a, b);
}

static void poll_pending(st_arena* a) {
  for (int i = 0; i < 4 && a->pending_head; i++) {
    st_arena_block* b = a->pending_head;
    if (!a->ops->event_done(a->backend, b->event)) break;
    a->pending_head = b->pnext;
    if (!a->pending_head) a->pending_tail = NULL;
    a->ops->event_destroy(a->backend, b->event);
    b->event = NULL;
    release_block(a, b);
  }
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
                  .reserved_base = reserved_base, .reserved = capacity + slack, .rng = 0x2545F491u};
  *out = a;
  return STALLOC_OK;
}

void st_arena_destroy(st_arena* a) {
  if (!a) return;
  for (size_t g = 0; g < a->granules; g++)
    if (a->mapped[g]) unmap_granule(a, g);
  a->ops->release(a->backend, a->reserved_base, a->reserved);
  for (st_arena_block* b = a->pending_head; b; b = b->pnext)
    if (b->event) a->ops->event_destroy(a->backend, b->event);
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
  free(a->cached);
  free(a);
}

/* Takes a free block that holds [start, start + need) for some start that is a multiple of
 * `align` (best fit, else the top grows), splits off what lies before and after, and returns
 * it, neither mapped nor counted on its granules. *grew: the bytes the top grew by. */
static stalloc_status_t carve(st_arena* a, uint64_t need, uint64_t align, st_arena_block** out,
                              uint64_t* grew) {
  *grew = 0;
  uint64_t slack = align > a->alignment ? align - a->alignment : 0;
  if (!need || need > a->capacity || slack > a->capacity - need)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: %llu bytes is more than its %llu-byte range",
                   (unsigned long long)need, (unsigned long long)a->capacity);
  st_arena_block* b = best_fit(a->free_root, need + slack);
  if (b) {
    a->free_root = tr_remove(a->free_root, b);
  } else {
    /* the top grows: from its free block if it has one */
    uint64_t from = a->last && a->last->state == AR_FREE ? a->last->start : a->top;
    uint64_t end = st_align_up(from, align) + need;
    if (end > a->capacity)
      return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: its %llu-byte address range is used up",
                     (unsigned long long)a->capacity);
    if (from < a->top) {
      b = a->last;
      a->free_root = tr_remove(a->free_root, b);
    } else {
      if (!(b = block_new(a))) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
      b->start = a->top;
      b->prev = a->last;
      if (a->last) a->last->next = b;
      a->last = b;
    }
    *grew = end - a->top;
    a->top = end;
    b->size = end - b->start;
  }
  uint64_t front = st_align_up(b->start, align) - b->start;
  if (front) { /* the bytes below the aligned start stay free */
    st_arena_block* f = block_new(a);
    if (!f) {
      make_free(a, b);
      return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "arena: no host memory");
    }
    f->start = b->start;
    f->size = front;
    f->prev = b->prev;
    f->next = b;
    if (b->prev) b->prev->next = f;
    b->prev = f;
    b->start += front;
    b->size -= front;
    make_free(a, f);
  }
  if (b->size - need >= a->alignment) { /* split: the rest stays free */
    st_arena_block* r = block_new(a);
    if (r) {
      r->start = b->start + need;
      r->size = b->size - need;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      if (a->last == b) a->last = r;
      b->size = need;
      make_free(a, r);
    }
  }
  *out = b;
  return STALLOC_OK;
}

/* Gives back a block carve() took: free again, and a top that grew for it shrinks. */
static void uncarve(st_arena* a, st_arena_block* b, uint64_t grew) {
  b = coalesce(a, b);
  if (grew && a->last == b && b->size >= grew) {
    a->free_root = tr_remove(a->free_root, b);
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
  (void)stream; /* a free block is free for every stream: pending ones wait above */
  if (a->pending_head) poll_pending(a);
  uint64_t need = st_align_up(size, a->alignment), grew;
  st_arena_block* b;
  stalloc_status_t s = carve(a, need ? need : size, a->alignment, &b, &grew);
  if (s) return s;
  if ((s = ref(a, b->start, b->size))) {
    uncarve(a, b, grew);
    return s;
  }
  b->state = AR_USED;
  *ptr = a->base + b->start;
  *out = b;
  return STALLOC_OK;
}

stalloc_status_t st_arena_region(st_arena* a, uint64_t size, uint64_t align, void** ptr,
                                 st_arena_block** out) {
  if (a->pending_head) poll_pending(a);
  /* It starts on a granule, so the plan's offsets fall on granules as planned, and ends where
   * it needs to: the bytes above share its last granule. */
  align = ST_MAX(ST_MAX(align, a->alignment), a->granule);
  uint64_t need = st_align_up(size, a->alignment), grew;
  st_arena_block* b;
  stalloc_status_t s = carve(a, need ? need : size, align, &b, &grew);
  if (s) return s;
  b->state = AR_REGION;
  *ptr = a->base + b->start;
  *out = b;
  return STALLOC_OK;
}

stalloc_status_t st_arena_region_ref(st_arena* a, const void* ptr, uint64_t size) {
  return ref(a, (uint64_t)((const uint8_t*)ptr - a->base), size);
}

void st_arena_region_unref(st_arena* a, const void* ptr, uint64_t size) {
  unref(a, (uint64_t)((const uint8_t*)ptr - a->base), size);
}

void st_arena_region_release(st_arena* a, st_arena_block* region) { coalesce(a, region); }

uint64_t st_arena_alignment(const st_arena* a) { return a->alignment; }

uint64_t st_arena_granule(const st_arena* a) { return a->granule; }

size_t st_arena_cached_entries(const st_arena* a) { return a->cached_count; }

void st_arena_free(st_arena* a, st_arena_block* b, uint64_t stream) {
  if (a->ops->event_record) {
    void* ev = NULL;
    if (a->ops->event_record(a->backend, stream, &ev) != STALLOC_OK) ev = NULL;
    b->state = AR_PENDING;
    /* Without an event the work cannot be waited for: the block is never reused (its bytes
     * stay out of use until the arena goes) rather than risk another stream overwriting it. */
    if (!ev) return;
    b->event = ev;
    b->pnext = NULL;
    if (a->pending_tail) a->pending_tail->pnext = b;
    else a->pending_head = b;
    a->pending_tail = b;
    return;
  }
  release_block(a, b);
}

uint64_t st_arena_trim(st_arena* a) {
  poll_pending(a);
  uint64_t bytes = 0;
  for (size_t g = pop_cached(a); g != SIZE_MAX; g = pop_cached(a)) {
    unmap_granule(a, g);
    bytes += a->granule;
  }
  return bytes;
}
