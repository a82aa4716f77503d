/* slab.c - tiny requests (<= 512 B, DESIGN.md) in fixed-size slots, O(1) both ways.
 *
 * Slot sizes are powers of two from the allocator's tiny_alignment (at least 16 B) up to 512 B
 * (or that alignment, if larger), each slot aligned to its size: a 4-byte tensor holds 16 B,
 * not the 512 B a planned block's alignment would cost, and no vector load of a tensor can be
 * wider than its slot's alignment. Each class takes chunks straight from the
 * backend: 16 chunks of one granule (or 8 slots), then doubling up to 1 MiB, so a run with a
 * few tiny tensors reserves a few KiB, not a 2 MiB segment. Chunks live until the allocator is destroyed.
 *
 * Streams: free slots are kept in one list per stream. A slot freed on stream S is reused at
 * once on S; another stream takes it only once the event recorded at the free is done (no
 * event ops: at once). */
#include <stdlib.h>
#include <string.h>

#include "runtime/slab.h"

#define CLASSES 6        /* 16, 32, ..., 512 */
#define STREAM_LISTS 8   /* streams with their own free list; more share the last one */
#define CHUNK_MAX (1ull << 20)

struct st_slot {
  uint8_t* ptr;
  st_slot* next;
  uint64_t stream;
  void* event;
  uint8_t cls;
};

typedef struct chunk {
  uint8_t* base;
  uint64_t size;
  st_slot* slots;
  size_t count;
  struct chunk* next;
  bool in_arena;
} chunk;

typedef struct free_list {
  uint64_t stream;
  st_slot* head;
  bool used;
} free_list;

typedef struct slab_class {
  uint64_t slot_size;
  free_list lists[STREAM_LISTS];
  chunk* current;    /* slots not yet handed out: current->slots[carved..] */
  size_t carved, slots_in_current;
  uint64_t next_chunk;
  uint32_t chunks_made;
} slab_class;

struct st_slab {
  const backend_ops* ops;
  void* backend;
  st_budget* budget;
  st_arena* arena; /* chunks come from the growable pool when there is one */
  uint64_t granularity;
  int class_count;
  slab_class classes[CLASSES];
  chunk* chunks;
};

stalloc_status_t st_slab_create(const backend_ops* ops, void* backend, const backend_caps* caps,
                                st_budget* budget, st_arena* arena, uint64_t alignment, st_slab** out) {
  st_slab* s = calloc(1, sizeof *s);
  if (!s) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "slab: no host memory");
  s->ops = ops;
  s->backend = backend;
  s->budget = budget;
  s->arena = arena;
  s->granularity = ST_MAX(caps->granularity, 1);
  uint64_t size = ST_MAX(alignment, 16);
  for (; s->class_count < CLASSES; size *= 2) {
    slab_class* c = &s->classes[s->class_count++];
    c->slot_size = size;
    c->next_chunk = st_align_up(ST_MAX(size * 8, s->granularity), s->granularity);
    if (size >= ST_TINY_MAX) break;
  }
  *out = s;
  return STALLOC_OK;
}

void st_slab_destroy(st_slab* s) {
  if (!s) return;
  for (chunk *c = s->chunks, *next; c; c = next) {
    next = c->next;
    for (size_t i = 0; i < c->count; i++)
      if (c->slots[i].event) s->ops->event_destroy(s->backend, c->slots[i].event);
    if (!c->in_arena) { /* the arena's blocks go with the arena */
      s->ops->free(s->backend, c->base, c->size);
      st_budget_sub(s->budget, c->size);
    }
    free(c->slots);
    free(c);
  }
  free(s);
}

static stalloc_status_t new_chunk(st_slab* s, slab_class* c, int cls, uint64_t stream) {
  uint64_t size = c->next_chunk;
  if (!st_budget_allows(s->budget, size))
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "slab: a %llu-byte chunk passes the memory limit of %llu",
                   (unsigned long long)size, (unsigned long long)s->budget->limit);
  chunk* ch = calloc(1, sizeof *ch);
  size_t count = (size_t)(size / c->slot_size);
  st_slot* slots = calloc(count, sizeof *slots);
  if (!ch || !slots) {
    free(ch);
    free(slots);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "slab: no host memory");
  }
  void* base;
  st_arena_block* block;
  /* In the arena a chunk shares granules with its neighbours rather than being a segment of
   * its own; its blocks are aligned to the arena's alignment. */
  ch->in_arena = s->arena && st_arena_alignment(s->arena) % c->slot_size == 0;
  stalloc_status_t st = ch->in_arena ? st_arena_alloc(s->arena, size, stream, &base, &block)
                                     : s->ops->alloc(s->backend, size, c->slot_size, stream, &base);
  if (st) {
    free(ch);
    free(slots);
    return st;
  }
  if (!ch->in_arena) st_budget_add(s->budget, size);
  ch->base = base;
  ch->size = size;
  ch->slots = slots;
  ch->count = count;
  for (size_t i = 0; i < count; i++) {
    slots[i].ptr = ch->base + i * c->slot_size;
    slots[i].cls = (uint8_t)cls;
  }
  ch->next = s->chunks;
  s->chunks = ch;
  c->current = ch;
  c->carved = 0;
  c->slots_in_current = count;
  /* Small steps first (a run with few tiny tensors holds little), then doubling. */
  if (++c->chunks_made >= 16 && c->next_chunk < CHUNK_MAX) c->next_chunk *= 2;
  return STALLOC_OK;
}

static free_list* list_for(slab_class* c, uint64_t stream) {
  for (int i = 0; i < STREAM_LISTS; i++) {
    free_list* l = &c->lists[i];
    if (!l->used) {
      l->used = true;
      l->stream = stream;
      return l;
    }
    if (l->stream == stream) return l;
  }
  return &c->lists[STREAM_LISTS - 1]; /* shared: its slots carry their own stream */
}

static bool ready_for(st_slab* s, st_slot* slot, uint64_t stream) {
  if (slot->stream == stream || !s->ops->event_record) return true;
  if (!slot->event) return false; /* its free recorded no event: own stream only */
  if (!s->ops->event_done(s->backend, slot->event)) return false;
  s->ops->event_destroy(s->backend, slot->event);
  slot->event = NULL;
  return true;
}

stalloc_status_t st_slab_alloc(st_slab* s, uint64_t size, uint64_t stream, void** ptr, st_slot** out) {
  int cls = 0;
  while (cls < s->class_count - 1 && s->classes[cls].slot_size < size) cls++;
  slab_class* c = &s->classes[cls];
  st_slot* slot = NULL;
  /* Own stream first, then the head of every other list whose work is done. */
  for (int pass = 0; pass < 2 && !slot; pass++) {
    for (int i = 0; i < STREAM_LISTS && !slot; i++) {
      free_list* l = &c->lists[i];
      if (!l->used || !l->head || (pass == 0) != (l->stream == stream)) continue;
      if (!ready_for(s, l->head, stream)) continue;
      slot = l->head;
      l->head = slot->next;
    }
  }
  if (!slot) {
    if (!c->current || c->carved == c->slots_in_current) {
      stalloc_status_t st = new_chunk(s, c, cls, stream);
      if (st) return st;
    }
    slot = &c->current->slots[c->carved++];
  }
  if (slot->event) {
    s->ops->event_destroy(s->backend, slot->event);
    slot->event = NULL;
  }
  slot->stream = stream;
  slot->next = NULL;
  *ptr = slot->ptr;
  *out = slot;
  return STALLOC_OK;
}

void st_slab_free(st_slab* s, st_slot* slot, uint64_t stream) {
  slot->stream = stream;
  slot->event = NULL;
  if (s->ops->event_record && s->ops->event_record(s->backend, stream, &slot->event) != STALLOC_OK)
    slot->event = NULL; /* no event: only its own stream may take it again */
  free_list* l = list_for(&s->classes[slot->cls], stream);
  slot->next = l->head;
  l->head = slot;
}
