/* sim_torch.c - a model of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp)
 * that replays a trace and reports peak reserved: the baseline stalloc is compared with.
 *
 * Facts taken from PyTorch's source (the code is not):
 *   - sizes round up to 512 B (kMinBlockSize), at least 512;
 *   - requests <= 1 MiB (kSmallSize) use the small pool, fed 2 MiB (kSmallBuffer) segments;
 *     larger ones the large pool: < 10 MiB (kMinLargeAlloc) get a 20 MiB (kLargeBuffer)
 *     segment, larger ones their size rounded up to 2 MiB (kRoundLarge);
 *   - free blocks are ordered by (stream, size, address); a request takes the first block of
 *     its stream at or above its size (best fit; no block of another stream);
 *   - with max_split_size set, a request below it never takes a block at or above it, and a
 *     request at or above it takes a block at most 20 MiB larger;
 *   - a found block splits when the rest is >= 512 B (small pool, or any expandable segment)
 *     or when the request is below max_split_size and the rest is > 1 MiB (large pool); the
 *     request takes the low end;
 *   - a freed block merges with free neighbours (in expandable segments, only with neighbours
 *     in the same mapped state);
 *   - no free block: allocate a segment; if the memory limit refuses, release oversize cached
 *     blocks (max_split_size only) and retry, then release every cached unsplit segment (and
 *     unmap every whole free page of expandable segments) and retry, then report OOM;
 *   - expandable segments: one reserved address range per (stream, pool), mapped in pages of
 *     2 MiB (small pool) or 20 MiB (large pool) when no free block fits; the free block that
 *     ends where the unmapped tail begins is grown in place; pages stay mapped until the
 *     cache is released. Best fit among expandable blocks counts a block's size as what it
 *     could grow to (its size plus an unmapped block right after it).
 *
 * Blocks live in one array (indices, not pointers, so it can grow); free blocks sit in two
 * treaps per pool, keyed as PyTorch's sets are: free blocks by (stream, size, address),
 * unmapped ranges by (stream, address), so the search for room to grow goes in address order. */
#include <stdlib.h>
#include <string.h>

#include "base/struct_size.h"
#include "trace/trace.h"

#define K_MIN_BLOCK 512ull
#define K_SMALL_SIZE (1ull << 20)
#define K_SMALL_BUFFER (2ull << 20)
#define K_LARGE_BUFFER (20ull << 20)
#define K_MIN_LARGE_ALLOC (10ull << 20)
#define K_ROUND_LARGE (2ull << 20)
/* Address range of one expandable segment when no memory limit says the device's size:
 * PyTorch reserves 1 1/8 of device memory; any range larger than the trace needs acts alike. */
#define EXPANDABLE_RANGE (1ull << 44)
#define NIL (-1)

typedef struct blk {
  uint64_t addr, size, stream;
  int32_t prev, next;  /* address neighbours within the segment */
  int32_t left, right; /* treap children */
  uint32_t prio;
  int32_t seg;
  uint8_t allocated, mapped, small, used; /* used: not on the spare list */
} blk;

typedef struct seg {
  uint64_t base, size; /* expandable: the whole address range */
  bool expandable, live;
} seg;

typedef struct sim {
  blk* b;
  size_t nb, capb;
  int32_t spare; /* recycled block indices, linked through next */
  seg* s;
  size_t ns, caps;
  int32_t free_root[2];     /* [small] */
  int32_t unmapped_root[2]; /* expandable only */
  uint64_t next_base;
  uint32_t rng;
  bool expandable;
  uint64_t max_split; /* UINT64_MAX = unlimited */
  uint64_t limit;     /* 0 = none */
  uint64_t range;     /* expandable segment address range */
  uint64_t reserved, live_segments;
  stalloc_sim_result_t* r;
  bool oom_host; /* host memory ran out */
} sim;

/* ---- block storage ---- */

static int32_t blk_new(sim* m) {
  int32_t i;
  if (m->spare != NIL) {
    i = m->spare;
    m->spare = m->b[i].next;
  } else {
    if (m->nb == m->capb) {
      size_t cap = m->capb ? m->capb * 2 : 1024;
      blk* p = realloc(m->b, cap * sizeof *p);
      if (!p || cap > INT32_MAX) {
        m->oom_host = true;
        return NIL;
      }
      m->b = p;
      m->capb = cap;
    }
    i = (int32_t)m->nb++;
  }
  memset(&m->b[i], 0, sizeof m->b[i]);
  m->b[i].prev = m->b[i].next = m->b[i].left = m->b[i].right = NIL;
  m->b[i].used = 1;
  m->rng = m->rng * 1664525u + 1013904223u;
  m->b[i].prio = m->rng;
  return i;
}

static void blk_release(sim* m, int32_t i) {
  m->b[i].used = 0;
  m->b[i].next = m->spare;
  m->spare = i;
}

/* ---- treaps keyed by (stream, size, addr) ---- */

/* by_addr: the unmapped sets are ordered by (stream, addr) as PyTorch's BlockComparatorAddress;
 * the free sets by (stream, size, addr) as its BlockComparatorSize. */
static inline int key_cmp(bool by_addr, uint64_t s1, uint64_t z1, uint64_t a1, const blk* x) {
  if (s1 != x->stream) return s1 < x->stream ? -1 : 1;
  if (!by_addr && z1 != x->size) return z1 < x->size ? -1 : 1;
  if (a1 != x->addr) return a1 < x->addr ? -1 : 1;
  return 0;
}

static int32_t treap_insert(sim* m, bool by_addr, int32_t root, int32_t n) {
  if (root == NIL) return n;
  blk* r = &m->b[root];
  blk* x = &m->b[n];
  if (key_cmp(by_addr, x->stream, x->size, x->addr, r) < 0) {
    r->left = treap_insert(m, by_addr, r->left, n);
    if (m->b[r->left].prio > r->prio) {
      int32_t l = r->left;
      r->left = m->b[l].right;
      m->b[l].right = root;
      return l;
    }
  } else {
    r->right = treap_insert(m, by_addr, r->right, n);
    if (m->b[r->right].prio > r->prio) {
      int32_t rr = r->right;
      r->right = m->b[rr].left;
      m->b[rr].left = root;
      return rr;
    }
  }
  return root;
}

static int32_t treap_merge(sim* m, int32_t a, int32_t c) {
  if (a == NIL) return c;
  if (c == NIL) return a;
  if (m->b[a].prio > m->b[c].prio) {
    m->b[a].right = treap_merge(m, m->b[a].right, c);
    return a;
  }
  m->b[c].left = treap_merge(m, a, m->b[c].left);
  return c;
}

static int32_t treap_erase(sim* m, bool by_addr, int32_t root, int32_t n) {
  if (root == NIL) return NIL; /* not there: a broken invariant, but never a crash */
  if (root == n) {
    int32_t merged = treap_merge(m, m->b[n].left, m->b[n].right);
    m->b[n].left = m->b[n].right = NIL;
    return merged;
  }
  blk* x = &m->b[n];
  if (key_cmp(by_addr, x->stream, x->size, x->addr, &m->b[root]) < 0)
    m->b[root].left = treap_erase(m, by_addr, m->b[root].left, n);
  else
    m->b[root].right = treap_erase(m, by_addr, m->b[root].right, n);
  return root;
}

/* First node with key >= (stream, size, addr). */
static int32_t treap_lower_bound(const sim* m, bool by_addr, int32_t root, uint64_t stream,
                                 uint64_t size, uint64_t addr) {
  int32_t best = NIL;
  while (root != NIL) {
    if (key_cmp(by_addr, stream, size, addr, &m->b[root]) <= 0) {
      best = root;
      root = m->b[root].left;
    } else {
      root = m->b[root].right;
    }
  }
  return best;
}

/* Last node with key < (stream, size, addr). */
static int32_t treap_before(const sim* m, int32_t root, uint64_t stream, uint64_t size,
                            uint64_t addr) {
  int32_t best = NIL;
  while (root != NIL) {
    if (key_cmp(false, stream, size, addr, &m->b[root]) > 0) {
      best = root;
      root = m->b[root].right;
    } else {
      root = m->b[root].left;
    }
  }
  return best;
}

static inline int32_t treap_successor(const sim* m, bool by_addr, int32_t root, int32_t n) {
  const blk* x = &m->b[n];
  return treap_lower_bound(m, by_addr, root, x->stream, x->size, x->addr + 1);
}

static void free_insert(sim* m, int32_t i) {
  int p = m->b[i].small;
  m->free_root[p] = treap_insert(m, false, m->free_root[p], i);
}
static void free_erase(sim* m, int32_t i) {
  int p = m->b[i].small;
  m->free_root[p] = treap_erase(m, false, m->free_root[p], i);
}
static void unmapped_insert(sim* m, int32_t i) {
  int p = m->b[i].small;
  m->unmapped_root[p] = treap_insert(m, true, m->unmapped_root[p], i);
}
static void unmapped_erase(sim* m, int32_t i) {
  int p = m->b[i].small;
  m->unmapped_root[p] = treap_erase(m, true, m->unmapped_root[p], i);
}

/* ---- the allocator's rules ---- */

static inline uint64_t round_size(uint64_t size) {
  return size < K_MIN_BLOCK ? K_MIN_BLOCK : (size + K_MIN_BLOCK - 1) / K_MIN_BLOCK * K_MIN_BLOCK;
}

static inline uint64_t allocation_size(uint64_t size) {
  if (size <= K_SMALL_SIZE) return K_SMALL_BUFFER;
  if (size < K_MIN_LARGE_ALLOC) return K_LARGE_BUFFER;
  return (size + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

static inline bool should_split(const sim* m, const blk* x, uint64_t size) {
  uint64_t remaining = x->size - size;
  if (x->small || m->expandable) return remaining >= K_MIN_BLOCK;
  return size < m->max_split && remaining > K_SMALL_SIZE;
}

static void set_reserved(sim* m, uint64_t reserved) {
  m->reserved = reserved;
  if (reserved > m->r->peak_reserved) m->r->peak_reserved = reserved;
}

static inline uint64_t grow_size(const sim* m, int32_t i) {
  const blk* x = &m->b[i];
  if (x->next != NIL && !m->b[x->next].mapped) return x->size + m->b[x->next].size;
  return x->size;
}

/* A cached block for (stream, size) by PyTorch's rules, taken out of the free set; or NIL. */
static int32_t get_free_block(sim* m, int small, uint64_t stream, uint64_t size) {
  int32_t root = m->free_root[small];
  int32_t it = treap_lower_bound(m, false, root, stream, size, 0);
  if (it == NIL || m->b[it].stream != stream) return NIL;
  if (m->expandable) {
    /* an expandable block counts as the size it could grow to */
    for (int32_t nx = treap_successor(m, false, root, it);
         nx != NIL && m->b[nx].stream == stream && grow_size(m, nx) < grow_size(m, it);
         nx = treap_successor(m, false, root, nx))
      it = nx;
  }
  if (size < m->max_split && m->b[it].size >= m->max_split) return NIL;
  if (size >= m->max_split && m->b[it].size >= size + K_LARGE_BUFFER) return NIL;
  free_erase(m, it);
  return it;
}

static int32_t seg_new(sim* m, uint64_t size, bool expandable) {
  if (m->ns == m->caps) {
    size_t cap = m->caps ? m->caps * 2 : 64;
    seg* p = realloc(m->s, cap * sizeof *p);
    if (!p) {
      m->oom_host = true;
      return NIL;
    }
    m->s = p;
    m->caps = cap;
  }
  int32_t i = (int32_t)m->ns++;
  m->s[i].base = m->next_base;
  m->s[i].size = size;
  m->s[i].expandable = expandable;
  m->s[i].live = true;
  /* leave a gap so no two segments look adjacent */
  m->next_base += size + K_ROUND_LARGE;
  m->live_segments++;
  if (m->live_segments > m->r->segments) m->r->segments = m->live_segments;
  return i;
}

/* cudaMalloc of a new segment holding one free block (not in the free set); NIL if refused. */
static int32_t alloc_segment(sim* m, int small, uint64_t stream, uint64_t alloc_size) {
  if (m->limit && (m->reserved > m->limit || alloc_size > m->limit - m->reserved)) return NIL;
  int32_t si = seg_new(m, alloc_size, false);
  int32_t i = si == NIL ? NIL : blk_new(m);
  if (i == NIL) return NIL;
  blk* x = &m->b[i];
  x->addr = m->s[si].base;
  x->size = alloc_size;
  x->stream = stream;
  x->seg = si;
  x->mapped = 1;
  x->small = (uint8_t)small;
  m->r->segment_allocs++;
  set_reserved(m, m->reserved + alloc_size);
  return i;
}

/* cudaFree of a whole-segment free block that is in the free set. */
static void release_segment_block(sim* m, int32_t i) {
  free_erase(m, i);
  m->s[m->b[i].seg].live = false;
  m->live_segments--;
  set_reserved(m, m->reserved - m->b[i].size);
  blk_release(m, i);
}

/* Merges src into dst when both are free and in the same mapped state; src leaves its set. */
static void try_merge(sim* m, int32_t dst, int32_t src) {
  if (src == NIL) return;
  blk* s = &m->b[src];
  blk* d = &m->b[dst];
  if (s->allocated || s->mapped != d->mapped) return;
  if (s->mapped)
    free_erase(m, src);
  else
    unmapped_erase(m, src);
  if (d->prev == src) {
    d->addr = s->addr;
    d->prev = s->prev;
    if (d->prev != NIL) m->b[d->prev].next = dst;
  } else {
    d->next = s->next;
    if (d->next != NIL) m->b[d->next].prev = dst;
  }
  d->size += s->size;
  blk_release(m, src);
}

/* New block [addr, addr+size) cut from the low end of block i (which keeps the rest). */
static int32_t split_low(sim* m, int32_t i, uint64_t size) {
  int32_t n = blk_new(m);
  if (n == NIL) return NIL;
  blk* x = &m->b[i];
  blk* y = &m->b[n];
  y->addr = x->addr;
  y->size = size;
  y->stream = x->stream;
  y->seg = x->seg;
  y->mapped = x->mapped;
  y->small = x->small;
  y->prev = x->prev;
  y->next = i;
  if (y->prev != NIL) m->b[y->prev].next = n;
  x->prev = n;
  x->addr += size;
  x->size -= size;
  return n;
}

/* ---- expandable segments ---- */

static inline uint64_t page_of(int small) { return small ? K_SMALL_BUFFER : K_LARGE_BUFFER; }

static inline bool allocatable(const sim* m, int32_t i) {
  return i != NIL && !m->b[i].allocated;
}

static bool has_room(const sim* m, int32_t i, uint64_t size) {
  uint64_t bytes = 0;
  while (bytes < size && allocatable(m, i)) {
    bytes += m->b[i].size;
    i = m->b[i].next;
  }
  return bytes >= size;
}

/* Where an expandable block for `size` starts: an unmapped block (or the free block right
 * before it) with enough free and unmapped room after it, or a new segment's range. */
static int32_t find_expandable(sim* m, int small, uint64_t stream, uint64_t size) {
  int32_t root = m->unmapped_root[small];
  for (int32_t it = treap_lower_bound(m, true, root, stream, 0, 0);
       it != NIL && m->b[it].stream == stream; it = treap_successor(m, true, root, it)) {
    int32_t c = it;
    if (allocatable(m, m->b[c].prev)) c = m->b[c].prev;
    if (has_room(m, c, size)) return c;
  }
  int32_t si = seg_new(m, m->range, true);
  int32_t i = si == NIL ? NIL : blk_new(m);
  if (i == NIL) return NIL;
  blk* x = &m->b[i];
  x->addr = m->s[si].base;
  x->size = m->range;
  x->stream = stream;
  x->seg = si;
  x->small = (uint8_t)small;
  unmapped_insert(m, i);
  return i;
}

/* Maps the pages covering the first `size` bytes of unmapped block i; returns the free mapped
 * block that now holds them (merged with free mapped neighbours, in the free set), or NIL when
 * the memory limit refuses. */
static int32_t map_block(sim* m, int32_t i, uint64_t size) {
  uint64_t page = page_of(m->b[i].small);
  uint64_t bytes = (size + page - 1) / page * page;
  if (bytes > m->b[i].size) bytes = m->b[i].size;
  if (m->limit && (m->reserved > m->limit || bytes > m->limit - m->reserved)) return NIL;
  unmapped_erase(m, i);
  int32_t n = i;
  if (bytes < m->b[i].size) {
    n = split_low(m, i, bytes);
    if (n == NIL) {
      unmapped_insert(m, i);
      return NIL;
    }
    unmapped_insert(m, i);
  }
  m->b[n].mapped = 1;
  m->r->segment_allocs++;
  set_reserved(m, m->reserved + bytes);
  try_merge(m, n, m->b[n].prev);
  try_merge(m, n, m->b[n].next);
  free_insert(m, n);
  return n;
}

static int32_t alloc_expandable(sim* m, int small, uint64_t stream, uint64_t size) {
  int32_t c = find_expandable(m, small, stream, size);
  if (c == NIL) return NIL;
  if (!m->b[c].mapped) {
    uint64_t want = ST_MIN(m->b[c].size, size);
    c = map_block(m, c, want);
    if (c == NIL) return NIL;
  }
  while (m->b[c].size < size) {
    int32_t nx = m->b[c].next; /* unmapped, by has_room and merging */
    if (nx == NIL || m->b[nx].mapped || m->b[nx].allocated) return NIL;
    uint64_t want = ST_MIN(size - m->b[c].size, m->b[nx].size);
    c = map_block(m, nx, want);
    if (c == NIL) return NIL;
  }
  free_erase(m, c);
  return c;
}

/* Unmaps the whole pages inside free mapped block i (in the free set). */
static void unmap_block(sim* m, int32_t i) {
  blk* x = &m->b[i];
  uint64_t page = page_of(x->small), base = m->s[x->seg].base;
  uint64_t lo = base + (x->addr - base + page - 1) / page * page; /* 20 MiB: not a power of 2 */
  uint64_t hi = base + (x->addr + x->size - base) / page * page;
  if (hi <= lo) return;
  free_erase(m, i);
  if (lo > x->addr) {
    int32_t before = split_low(m, i, lo - x->addr);
    if (before == NIL) {
      free_insert(m, i);
      return;
    }
    free_insert(m, before);
    x = &m->b[i];
  }
  if (x->addr + x->size > hi) {
    int32_t mid = split_low(m, i, hi - x->addr);
    if (mid == NIL) {
      free_insert(m, i);
      return;
    }
    free_insert(m, i); /* i keeps the tail above hi, still mapped */
    i = mid;
    x = &m->b[i];
  }
  x->mapped = 0;
  set_reserved(m, m->reserved - x->size);
  try_merge(m, i, x->prev);
  try_merge(m, i, m->b[i].next);
  x = &m->b[i];
  if (x->prev == NIL && x->next == NIL) { /* the whole range is unmapped: drop the segment */
    m->s[x->seg].live = false;
    m->live_segments--;
    blk_release(m, i);
    return;
  }
  unmapped_insert(m, i);
}

/* ---- releasing cached memory ---- */

/* Frees cached oversize segments (>= max_split_size) of the stream until `size` bytes are
 * released, or the one smallest segment that covers it. */
static bool release_available(sim* m, int small, uint64_t stream, uint64_t size) {
  if (m->max_split == UINT64_MAX || m->expandable) return false;
  uint64_t key = size < m->max_split ? m->max_split : size;
  int32_t root = m->free_root[small];
  int32_t it = treap_lower_bound(m, false, root, stream, key, 0);
  if (it != NIL && m->b[it].stream == stream) {
    if (m->b[it].prev != NIL || m->b[it].next != NIL) return false;
    release_segment_block(m, it);
    return true;
  }
  uint64_t released = 0;
  it = treap_before(m, root, stream, key, 0);
  while (released < key && it != NIL && m->b[it].stream == stream &&
         m->b[it].size >= m->max_split) {
    int32_t cur = it;
    it = treap_before(m, m->free_root[small], m->b[cur].stream, m->b[cur].size, m->b[cur].addr);
    if (m->b[cur].prev == NIL && m->b[cur].next == NIL) {
      released += m->b[cur].size;
      release_segment_block(m, cur);
    }
  }
  return released >= key;
}

/* empty_cache(): frees every cached unsplit segment and unmaps free expandable pages. */
static void release_cached(sim* m) {
  m->r->cache_flushes++;
  /* Collect free mapped blocks of both pools (in order) first: releasing changes the sets. */
  for (int p = 0; p < 2; p++) {
    size_t count = 0, cap = 0;
    int32_t* list = NULL;
    int32_t root = m->free_root[p];
    for (int32_t it = treap_lower_bound(m, false, root, 0, 0, 0); it != NIL;
         it = treap_successor(m, false, root, it)) {
      if (count == cap) {
        cap = cap ? cap * 2 : 64;
        int32_t* q = realloc(list, cap * sizeof *q);
        if (!q) {
          m->oom_host = true;
          free(list);
          return;
        }
        list = q;
      }
      list[count++] = it;
    }
    for (size_t k = 0; k < count; k++) {
      int32_t i = list[k];
      if (m->s[m->b[i].seg].expandable)
        unmap_block(m, i);
      else if (m->b[i].prev == NIL && m->b[i].next == NIL)
        release_segment_block(m, i);
    }
    free(list);
  }
}

/* ---- malloc and free ---- */

static int32_t try_alloc_new(sim* m, int small, uint64_t stream, uint64_t size) {
  if (m->expandable) return alloc_expandable(m, small, stream, size);
  return alloc_segment(m, small, stream, allocation_size(size));
}

/* The block for a request of `size` bytes on `stream`, allocated; NIL on OOM. */
static int32_t sim_malloc(sim* m, uint64_t stream, uint64_t requested) {
  uint64_t size = round_size(requested);
  int small = size <= K_SMALL_SIZE;
  int32_t i = get_free_block(m, small, stream, size);
  if (i == NIL) {
    i = try_alloc_new(m, small, stream, size);
    if (i == NIL && !m->oom_host && release_available(m, small, stream, size))
      i = try_alloc_new(m, small, stream, size);
    if (i == NIL && !m->oom_host) {
      release_cached(m);
      i = try_alloc_new(m, small, stream, size);
    }
    if (i == NIL) return NIL;
  }
  if (should_split(m, &m->b[i], size)) {
    int32_t lo = split_low(m, i, size);
    if (lo == NIL) return NIL;
    free_insert(m, i); /* the remainder goes back to the pool */
    i = lo;
  }
  m->b[i].allocated = 1;
  return i;
}

static void sim_free(sim* m, int32_t i) {
  m->b[i].allocated = 0;
  try_merge(m, i, m->b[i].prev);
  try_merge(m, i, m->b[i].next);
  free_insert(m, i);
}

/* The books must balance: mapped bytes of live blocks == reserved, every block in a live
 * segment, neighbours linked both ways. A cheap end-of-run check of the whole model. */
static bool consistent(const sim* m) {
  uint64_t mapped = 0;
  for (size_t i = 0; i < m->nb; i++) {
    const blk* x = &m->b[i];
    if (!x->used) continue;
    if (x->seg < 0 || (size_t)x->seg >= m->ns || !m->s[x->seg].live) return false;
    if (x->prev != NIL && (m->b[x->prev].next != (int32_t)i ||
                           m->b[x->prev].addr + m->b[x->prev].size != x->addr))
      return false;
    if (x->mapped) mapped += x->size;
  }
  return mapped == m->reserved;
}

/* ---- the public entry points ---- */

void stalloc_sim_params_init(stalloc_sim_params_t* p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->kind = STALLOC_SIM_TORCH;
}

void stalloc_sim_result_init(stalloc_sim_result_t* r) {
  if (!r) return;
  memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
}

/* Streams of different devices must not share pools: fold the device into the stream key. */
static inline uint64_t stream_key(const stalloc_event_t* e) {
  return e->stream ^ ((uint64_t)(uint16_t)e->device << 48);
}

stalloc_status_t stalloc_simulate(const stalloc_trace_t* trace, const stalloc_sim_params_t* params,
                                  stalloc_sim_result_t* result, uint64_t* tl_event,
                                  uint64_t* tl_allocated, uint64_t* tl_reserved) {
  if (!trace || !params || !result)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "simulate: NULL argument");
  stalloc_sim_params_t prm;
  stalloc_sim_params_init(&prm);
  stalloc_status_t s = st_struct_read(&prm, sizeof prm, params, "simulate: params");
  if (!s) s = st_struct_check(result, "simulate: result");
  if (s) return s;
  params = &prm;
  if (params->kind != STALLOC_SIM_TORCH && params->kind != STALLOC_SIM_TORCH_EXPANDABLE)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "simulate: unknown simulator kind %d",
                   (int)params->kind);
  if (params->max_split_size && params->max_split_size <= K_LARGE_BUFFER)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                   "simulate: max_split_size %llu B must be above 20 MiB (as PyTorch's "
                   "max_split_size_mb > 20)",
                   (unsigned long long)params->max_split_size);
  uint64_t points = params->timeline_points;
  if (points && (!tl_event || !tl_allocated || !tl_reserved))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                   "simulate: timeline_points is %llu but a timeline array is NULL",
                   (unsigned long long)points);

  stalloc_sim_result_t res;
  memset(&res, 0, sizeof res);
  res.struct_size = sizeof res;
  sim m;
  memset(&m, 0, sizeof m);
  m.spare = NIL;
  m.free_root[0] = m.free_root[1] = m.unmapped_root[0] = m.unmapped_root[1] = NIL;
  m.rng = 0x9e3779b9u;
  m.expandable = params->kind == STALLOC_SIM_TORCH_EXPANDABLE;
  m.max_split = params->max_split_size ? params->max_split_size : UINT64_MAX;
  m.limit = params->memory_limit;
  m.range = EXPANDABLE_RANGE;
  if (m.limit) m.range = (m.limit + m.limit / 8 + K_LARGE_BUFFER - 1) / K_LARGE_BUFFER * K_LARGE_BUFFER;
  m.next_base = K_ROUND_LARGE;
  m.r = &res;

  const stalloc_event_t* ev = trace->events;
  size_t n = trace->event_count;
  u64map live; /* request id -> block index, or UINT64_MAX for a size-0 request */
  u64map_init(&live);
  stalloc_status_t status = STALLOC_OK;
  if (!u64map_reserve(&live, 1024)) status = STALLOC_ERR_OUT_OF_MEMORY;

  uint64_t allocated = 0, bucket_alloc = 0, bucket_res = 0;
  for (size_t k = 0; k < n && !status; k++) {
    const stalloc_event_t* e = &ev[k];
    if (e->kind == STALLOC_EVENT_ALLOC) {
      uint64_t slot = UINT64_MAX;
      if (e->size) {
        int32_t i = sim_malloc(&m, stream_key(e), e->size);
        if (m.oom_host) break;
        if (i == NIL) {
          res.ooms++;
          slot = UINT64_MAX - 1; /* failed: its free is ignored */
        } else {
          slot = (uint64_t)i;
        }
      }
      if (slot != UINT64_MAX - 1) {
        allocated += e->size;
        if (allocated > res.peak_allocated) res.peak_allocated = allocated;
      }
      if (!u64map_put(&live, e->id, slot)) status = STALLOC_ERR_OUT_OF_MEMORY;
    } else if (e->kind == STALLOC_EVENT_FREE && !(e->flags & STALLOC_EVENT_FLAG_UNMATCHED)) {
      uint64_t slot;
      if (u64map_remove(&live, e->id, &slot) && slot != UINT64_MAX - 1) {
        allocated -= e->size;
        if (slot != UINT64_MAX) sim_free(&m, (int32_t)slot);
      }
    }
    if (points) {
      /* event k falls in bucket k * points / n; a bucket's entry is written at its last event */
      if (allocated > bucket_alloc) bucket_alloc = allocated;
      if (m.reserved > bucket_res) bucket_res = m.reserved;
      uint64_t b = (uint64_t)(((unsigned __int128)k * points) / n);
      uint64_t b_next = (uint64_t)(((unsigned __int128)(k + 1) * points) / n);
      if (k + 1 == n || b_next != b) {
        tl_event[res.timeline_count] = k;
        tl_allocated[res.timeline_count] = bucket_alloc;
        tl_reserved[res.timeline_count] = bucket_res;
        res.timeline_count++;
        bucket_alloc = allocated;
        bucket_res = m.reserved;
      }
    }
  }
  if (m.oom_host) status = STALLOC_ERR_OUT_OF_MEMORY;
  if (!status && !consistent(&m)) status = STALLOC_ERR_INTERNAL;
  res.final_reserved = m.reserved;
  res.waste = res.peak_reserved > res.peak_allocated ? res.peak_reserved - res.peak_allocated : 0;
  res.fragmentation =
      res.peak_reserved ? 1.0 - (double)res.peak_allocated / (double)res.peak_reserved : 0.0;
  u64map_destroy(&live);
  free(m.b);
  free(m.s);
  if (status == STALLOC_ERR_INTERNAL)
    return st_fail(status, "simulate: the simulated allocator's books do not balance");
  if (status) return st_fail(status, "simulate: no host memory for the simulation");
  st_struct_write(result, &res, sizeof res);
  return STALLOC_OK;
}
