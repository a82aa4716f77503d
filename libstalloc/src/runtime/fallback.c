/* fallback.c - a caching best-fit pool with splitting and coalescing (see fallback.h).
 *
 * Segment sizes follow the policy PyTorch users know: requests up to 1 MiB share 2 MiB
 * segments, 1-10 MiB share 20 MiB segments, larger ones get their own, rounded to 2 MiB; under
 * a memory limit that a cached size would break, the exact size is tried. Free blocks sit in a
 * treap ordered by (size, address), so best fit is one descent.
 *
 * Streams: a free block remembers the stream it was freed on and, where the backend has
 * events, an event recorded at the free. It is reused at once on that stream, and on another
 * only when the event is done. Neighbours coalesce when both are ready, or when both wait on
 * the same stream (the later event covers the earlier one). */
#include <stdlib.h>
#include <string.h>

#include "runtime/fallback.h"

typedef struct st_segment st_segment;

struct st_block {
  uint8_t* ptr;
  uint64_t size;
  st_block *prev, *next; /* address-ordered neighbours in the segment */
  st_segment* segment;
  bool is_free;
  uint64_t stream;
  void* event;           /* pending while non-NULL; only on free blocks */
  bool stream_only;      /* freed without an event: only its own stream may take it again */
  st_block *left, *right; /* treap of free blocks */
  uint32_t priority;
};

struct st_segment {
  uint8_t* base;
  uint64_t size;
  st_block* first;
  st_segment *prev, *next;
};

struct st_fallback {
  const backend_ops* ops;
  void* backend;
  backend_caps caps;
  uint64_t alignment;
  st_budget* budget;
  st_segment* segments;
  st_block* free_tree;
  st_block* spare_blocks; /* recycled block structs, linked through next */
  uint32_t rng;
  bool exact_segments;    /* see st_fallback_exact_segments */
};

/* ---- treap keyed by (size, ptr) ---- */

static inline bool key_less(uint64_t size, const uint8_t* ptr, const st_block* b) {
  return size < b->size || (size == b->size && ptr < b->ptr);
}

static st_block* treap_insert(st_block* root, st_block* b) {
  if (!root) return b;
  if (key_less(b->size, b->ptr, root)) {
    root->left = treap_insert(root->left, b);
    if (root->left->priority > root->priority) {
      st_block* l = root->left;
      root->left = l->right;
      l->right = root;
      return l;
    }
  } else {
    root->right = treap_insert(root->right, b);
    if (root->right->priority > root->priority) {
      st_block* r = root->right;
      root->right = r->left;
      r->left = root;
      return r;
    }
  }
  return root;
}

static st_block* treap_merge(st_block* a, st_block* b) {
  if (!a) return b;
  if (!b) return a;
  if (a->priority > b->priority) {
    a->right = treap_merge(a->right, b);
    return a;
  }
  b->left = treap_merge(a, b->left);
  return b;
}

static st_block* treap_remove(st_block* root, st_block* b) {
  if (!root) return NULL;
  if (root == b) return treap_merge(b->left, b->right);
  if (key_less(b->size, b->ptr, root)) root->left = treap_remove(root->left, b);
  else root->right = treap_remove(root->right, b);
  return root;
}

/* The smallest free block whose key is greater than (size, ptr). */
static st_block* treap_next(st_block* root, uint64_t size, const uint8_t* ptr) {
  st_block* best = NULL;
  while (root) {
    if (key_less(size, ptr, root)) {
      best = root;
      root = root->left;
    } else {
      root = root->right;
    }
  }
  return best;
}

static void tree_add(st_fallback* p, st_block* b) {
  p->rng = p->rng * 1664525u + 1013904223u;
  b->priority = p->rng;
  b->left = b->right = NULL;
  p->free_tree = treap_insert(p->free_tree, b);
}

static void tree_del(st_fallback* p, st_block* b) {
  p->free_tree = treap_remove(p->free_tree, b);
  b->left = b->right = NULL;
}

/* ---- blocks and events ---- */

static st_block* new_block(st_fallback* p) {
  st_block* b = p->spare_blocks;
  if (b) p->spare_blocks = b->next;
  else b = malloc(sizeof *b);
  if (b) memset(b, 0, sizeof *b);
  return b;
}

static void drop_block(st_fallback* p, st_block* b) {
  b->next = p->spare_blocks;
  p->spare_blocks = b;
}

static void drop_event(st_fallback* p, st_block* b) {
  if (b->event) p->ops->event_destroy(p->backend, b->event);
  b->event = NULL;
}

/* A free block is ready when no event is pending; a done event is dropped on the way. */
static bool block_ready(st_fallback* p, st_block* b) {
  if (b->stream_only) return false;
  if (!b->event) return true;
  if (!p->ops->event_done(p->backend, b->event)) return false;
  drop_event(p, b);
  return true;
}

static bool usable_on(st_fallback* p, st_block* b, uint64_t stream) {
  return b->stream == stream || block_ready(p, b);
}

/* ---- segments ---- */

static uint64_t segment_size_for(uint64_t rounded) {
  const uint64_t MiB = 1ull << 20;
  if (rounded <= MiB) return 2 * MiB;
  if (rounded < 10 * MiB) return 20 * MiB;
  return st_align_up(rounded, 2 * MiB);
}

static void release_segment(st_fallback* p, st_segment* s) {
  st_block* b = s->first;
  tree_del(p, b);
  drop_event(p, b);
  drop_block(p, b);
  if (s->prev) s->prev->next = s->next;
  else p->segments = s->next;
  if (s->next) s->next->prev = s->prev;
  p->ops->free(p->backend, s->base, s->size);
  st_budget_sub(p->budget, s->size);
  free(s);
}

/* Gives back every wholly free, ready segment smaller than below. */
static uint64_t release_cached_below(st_fallback* p, uint64_t below) {
  uint64_t released = 0;
  for (st_segment *s = p->segments, *next; s; s = next) {
    next = s->next;
    st_block* b = s->first;
    if (b->is_free && !b->next && s->size < below && block_ready(p, b)) {
      released += s->size;
      release_segment(p, s);
    }
  }
  return released;
}

uint64_t st_fallback_release_cached(st_fallback* p) { return release_cached_below(p, UINT64_MAX); }

static stalloc_status_t try_new_segment(st_fallback* p, uint64_t size, uint64_t stream, st_block** out) {
  if (!st_budget_allows(p->budget, size))
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "memory limit: %llu bytes reserved, %llu more would pass the limit of %llu",
                   (unsigned long long)p->budget->reserved, (unsigned long long)size,
                   (unsigned long long)p->budget->limit);
  st_segment* s = calloc(1, sizeof *s);
  st_block* b = new_block(p);
  if (!s || !b) {
    free(s);
    if (b) drop_block(p, b);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "fallback pool: no host memory for bookkeeping");
  }
  void* base;
  stalloc_status_t st = p->ops->alloc(p->backend, size, p->alignment, stream, &base);
  if (st) {
    free(s);
    drop_block(p, b);
    return st;
  }
  st_budget_add(p->budget, size);
  s->base = base;
  s->size = size;
  s->first = b;
  s->next = p->segments;
  if (p->segments) p->segments->prev = s;
  p->segments = s;
  b->ptr = base;
  b->size = size;
  b->segment = s;
  b->is_free = true;
  b->stream = stream;
  tree_add(p, b);
  *out = b;
  return STALLOC_OK;
}

/* New segment for a request of `rounded` bytes: the cached size first, then the exact size,
 * each again after giving cached segments back. */
static stalloc_status_t new_segment(st_fallback* p, uint64_t rounded, uint64_t stream, st_block** out) {
  uint64_t exact = st_align_up(rounded, p->caps.granularity);
  uint64_t cached = p->exact_segments ? exact : st_align_up(segment_size_for(rounded), p->caps.granularity);
  uint64_t sizes[2] = {cached, exact};
  if (!exact || !sizes[0])
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "request of %llu bytes is too large", (unsigned long long)rounded);
  /* With a plan loaded the fallback pool is the overflow of a planned run: an idle segment too
   * small for this request would only add to the peak beside the new one. */
  if (p->exact_segments) release_cached_below(p, exact);
  stalloc_status_t st = STALLOC_ERR_OUT_OF_MEMORY;
  for (int attempt = 0; attempt < 2; attempt++) {
    for (int i = 0; i < 2; i++) {
      if (i == 1 && sizes[1] == sizes[0]) break;
      st = try_new_segment(p, sizes[i], stream, out);
      if (st != STALLOC_ERR_OUT_OF_MEMORY) return st;
    }
    if (attempt == 0 && st_fallback_release_cached(p) == 0) break;
  }
  return st;
}

/* ---- public within the library ---- */

stalloc_status_t st_fallback_create(const backend_ops* ops, void* backend_state,
                                    const backend_caps* caps, uint64_t alignment,
                                    st_budget* budget, st_fallback** out) {
  st_fallback* p = calloc(1, sizeof *p);
  if (!p) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "fallback pool: no host memory");
  p->ops = ops;
  p->backend = backend_state;
  p->caps = *caps;
  if (p->caps.granularity < alignment) p->caps.granularity = alignment;
  p->alignment = alignment;
  p->budget = budget;
  p->rng = 0x2545F491u;
  *out = p;
  return STALLOC_OK;
}

void st_fallback_exact_segments(st_fallback* p, bool exact) { p->exact_segments = exact; }

void st_fallback_destroy(st_fallback* p) {
  if (!p) return;
  while (p->segments) {
    st_segment* s = p->segments;
    for (st_block *b = s->first, *next; b; b = next) {
      next = b->next;
      drop_event(p, b);
      free(b);
    }
    p->segments = s->next;
    p->ops->free(p->backend, s->base, s->size);
    st_budget_sub(p->budget, s->size);
    free(s);
  }
  for (st_block *b = p->spare_blocks, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(p);
}

stalloc_status_t st_fallback_alloc(st_fallback* p, uint64_t size, uint64_t stream, void** ptr,
                                   st_block** out) {
  uint64_t rounded = st_align_up(size ? size : 1, p->alignment);
  if (!rounded) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "request of %llu bytes is too large", (unsigned long long)size);
  st_block* b = treap_next(p->free_tree, rounded, NULL);
  while (b && !usable_on(p, b, stream)) b = treap_next(p->free_tree, b->size, b->ptr);
  if (!b) {
    stalloc_status_t st = new_segment(p, rounded, stream, &b);
    if (st) return st;
  }
  tree_del(p, b);
  if (b->size - rounded >= p->alignment) {
    st_block* rest = new_block(p);
    if (rest) {
      rest->ptr = b->ptr + rounded;
      rest->size = b->size - rounded;
      rest->segment = b->segment;
      rest->is_free = true;
      rest->stream = b->stream;
      rest->event = b->event; /* the rest still waits on the same work */
      rest->stream_only = b->stream_only;
      b->event = NULL;
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = rounded;
      tree_add(p, rest);
    }
  }
  drop_event(p, b); /* usable_on said it is ready for this stream */
  b->stream_only = false;
  b->is_free = false;
  b->stream = stream;
  *ptr = b->ptr;
  *out = b;
  return STALLOC_OK;
}

/* Whether two adjacent free blocks may become one. */
static bool can_merge(st_fallback* p, st_block* a, st_block* b) {
  if (!a || !b || !a->is_free || !b->is_free) return false;
  if (a->stream == b->stream) return true;
  return block_ready(p, a) && block_ready(p, b);
}

/* Absorbs `victim` (the right neighbour of `keep`) into `keep`. */
static void absorb(st_fallback* p, st_block* keep, st_block* victim, bool victim_is_newer) {
  if (victim->event && (victim_is_newer || !keep->event)) {
    drop_event(p, keep);
    keep->event = victim->event;
    victim->event = NULL;
  } else {
    drop_event(p, victim);
  }
  if (victim_is_newer) keep->stream = victim->stream;
  keep->stream_only = keep->stream_only || victim->stream_only; /* merged only on one stream */
  keep->size += victim->size;
  keep->next = victim->next;
  if (victim->next) victim->next->prev = keep;
  drop_block(p, victim);
}

void st_fallback_block_segment(const st_block* b, void** base, uint64_t* size) {
  *base = b->segment->base;
  *size = b->segment->size;
}

void st_fallback_free(st_fallback* p, st_block* b, uint64_t stream) {
  b->is_free = true;
  b->stream = stream;
  if (p->ops->event_record && p->ops->event_record(p->backend, stream, &b->event) != STALLOC_OK) {
    b->event = NULL;
    b->stream_only = true; /* cannot order it against other streams */
  }
  if (can_merge(p, b, b->next)) {
    tree_del(p, b->next);
    absorb(p, b, b->next, false);
  }
  if (can_merge(p, b->prev, b)) {
    st_block* prev = b->prev;
    tree_del(p, prev);
    absorb(p, prev, b, true);
    b = prev;
  }
  tree_add(p, b);
}
