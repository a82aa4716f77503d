/* allocator.c - the allocator's entry points: argument checks, locking, the pointer table and
 * statistics, dispatch to the pools. No placement algorithm lives here. */
#include <stdlib.h>
#include <string.h>

#include "backends/virtual.h"
#include "base/struct_size.h"
#include "runtime/allocator.h"
#include "runtime/record.h"

#define LOCK(a) pthread_mutex_lock(&(a)->lock)
#define UNLOCK(a) pthread_mutex_unlock(&(a)->lock)

static stalloc_status_t check_alignment(const char* name, uint64_t value) {
  if (!st_is_pow2(value) || value > (1ull << 30))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "%s %llu is not a power of two up to 1 GiB", name,
                   (unsigned long long)value);
  return STALLOC_OK;
}

/* The caller's options over the defaults (the versioned-struct rule), then checked. */
static stalloc_status_t read_options(const stalloc_options_t* in, stalloc_options_t* out) {
  stalloc_options_init(out);
  stalloc_status_t s = st_struct_read(out, sizeof *out, in, "options");
  if (s) return s;
  s = check_alignment("alignment", out->alignment);
  if (s) return s;
  if (out->tiny_alignment == 0) out->tiny_alignment = out->alignment;
  if ((s = check_alignment("tiny_alignment", out->tiny_alignment))) return s;
  if (!st_backend_get(out->backend))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "unknown backend kind %d", (int)out->backend);
  if (out->device < 0) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "device %d is negative", (int)out->device);
  return STALLOC_OK;
}

/* Address space for the growable pool: plenty, since only what is mapped costs memory. */
static uint64_t arena_capacity(const stalloc_allocator_t* a) {
  if (a->options.backend == STALLOC_BACKEND_VIRTUAL) {
    uint64_t v = a->options.virtual_capacity ? a->options.virtual_capacity : 1ull << 40;
    return ST_MAX(v / 4, 2ull << 20);
  }
  return a->options.memory_limit ? 2 * a->options.memory_limit : 1ull << 38;
}

stalloc_status_t stalloc_allocator_create(const stalloc_options_t* options, stalloc_allocator_t** out) {
  if (!out) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "allocator_create: NULL out-parameter");
  *out = NULL;
  stalloc_allocator_t* a = calloc(1, sizeof *a);
  if (!a) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "allocator_create: no host memory");
  stalloc_status_t s = read_options(options, &a->options);
  if (s) {
    free(a);
    return s;
  }
  const char* record_path = a->options.record_path; /* read as far as struct_size reaches */
  a->options.record_path = NULL; /* not kept: the caller owns that string */
  a->ops = st_backend_get(a->options.backend);
  if (a->options.backend == STALLOC_BACKEND_VIRTUAL && a->options.virtual_lag > 0) a->ops = &st_backend_virtual_lagged;
  s = a->ops->create(&a->options, &a->backend, &a->caps);
  if (s) {
    free(a);
    return s;
  }
  a->budget.limit = a->options.memory_limit;
  s = st_fallback_create(a->ops, a->backend, &a->caps, a->options.alignment, &a->budget, &a->fallback);
  if (!s && a->options.growable_pool && a->caps.can_grow) {
    s = st_arena_create(a->ops, a->backend, &a->caps, a->options.alignment, arena_capacity(a),
                        &a->budget, &a->arena);
    if (s) st_fallback_destroy(a->fallback);
  }
  if (s) {
    a->ops->destroy(a->backend);
    free(a);
    return s;
  }
  /* The critical section is short (tens of ns): spin a little before sleeping in the kernel;
   * bench/c/bench_hot_path.c measures the difference under contention. */
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_mutex_init(&a->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  u64map_init(&a->live);
  stalloc_stats_init(&a->stats);
  a->next_id = 1;
  if (record_path) {
    s = stalloc_allocator_record_start(a, record_path);
    if (s) {
      stalloc_allocator_destroy(a);
      return s;
    }
  }
  *out = a;
  return STALLOC_OK;
}

stalloc_status_t stalloc_allocator_destroy(stalloc_allocator_t* a) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "allocator_destroy: NULL allocator");
  stalloc_status_t s = stalloc_allocator_record_stop(a);
  for (size_t i = 0; i < a->live.capacity; i++) {
    if (!a->live.slots[i].key) continue;
    live_block* r = (live_block*)(uintptr_t)a->live.slots[i].value;
    free(r->used_on);
    free(r);
  }
  for (live_block *r = a->spare_records, *next; r; r = next) {
    next = r->next_spare;
    free(r);
  }
  st_deferred_destroy(&a->deferred, a->ops, a->backend); /* their blocks go with the pools */
  u64map_destroy(&a->live);
  st_online_destroy(a->online);
  st_hints_destroy(a->hints);
  for (size_t i = 0; i < a->retired_count; i++) st_runtime_destroy(a->retired[i]);
  free(a->retired);
  for (int k = 0; k < ST_ONLINE_KINDS; k++) st_runtime_destroy(a->kinds[k]);
  st_slab_destroy(a->slab);
  st_arena_destroy(a->arena);
  st_fallback_destroy(a->fallback);
  a->ops->destroy(a->backend);
  pthread_mutex_destroy(&a->lock);
  free(a);
  return s;
}

static void collect_deferred(stalloc_allocator_t* a);

static live_block* new_record(stalloc_allocator_t* a) {
  live_block* r = a->spare_records;
  if (r) {
    a->spare_records = r->next_spare; /* drop_record left it without used_on */
  } else if ((r = malloc(sizeof *r))) {
    r->used_on = NULL; /* a record dropped unused must not free garbage */
  }
  return r;
}

static void drop_record(stalloc_allocator_t* a, live_block* r) {
  if (r->used_on) {
    free(r->used_on);
    r->used_on = NULL;
  }
  r->next_spare = a->spare_records;
  a->spare_records = r;
}

static void count_alloc(stalloc_allocator_t* a, uint64_t size) {
  stalloc_stats_t* st = &a->stats;
  st->allocated_bytes += size;
  if (st->allocated_bytes > st->peak_allocated_bytes) st->peak_allocated_bytes = st->allocated_bytes;
  st->active_blocks++;
  if (st->active_blocks > st->peak_active_blocks) st->peak_active_blocks = st->active_blocks;
  st->alloc_count++;
}

static void online_event(stalloc_allocator_t* a, uint8_t kind, uint64_t id, uint64_t size,
                         const void* ptr, uint64_t stream, uint8_t flags) {
  stalloc_event_t e = {.id = id, .size = size, .address = (uint64_t)(uintptr_t)ptr,
                       .stream = stream, .device = (int16_t)a->options.device, .kind = kind,
                       .flags = flags};
  st_online_event(a->online, &e);
}

/* Tells the arena the layout the step follows when a plan serves it: the plan's pool, whose
 * granules its blocks come back to. Two plans served by turns (a training step, an evaluation
 * pass of another shape) then move granules from the other's pool and not from under their
 * own later blocks: the Llama GPU run with two plans moved 169 granules into the eval pass's
 * pool and 397 back, now 169 and 169. With no plan serving, none (the hints tell theirs).
 * Lock held. */
static void tell_plan_layout(stalloc_allocator_t* a) {
  if (!a->arena) return;
  const void* base;
  uint64_t size;
  if (a->runtime && st_runtime_span(a->runtime, &base, &size)) {
    uint64_t offset = st_arena_offset(a->arena, base);
    st_arena_want(a->arena, &offset, &size, 1);
  } else {
    st_arena_want(a->arena, NULL, NULL, 0);
  }
  a->want_version = 0; /* the hints' layout, if they serve, is told again */
}

/* The step's first requests, while several kinds have plans: when the plan serving it does not
 * begin with these sizes and another kind's does, the step is of that kind (the guess from the
 * kinds before was wrong), and that plan takes it over from here. Lock held. */
static void recognise_kind(stalloc_allocator_t* a, uint64_t size) {
  a->probe[a->probe_count++] = size;
  if (a->probe_count == KIND_PROBE) a->probing = false;
  if (st_runtime_step_begins(a->runtime, a->probe, a->probe_count)) return;
  for (int k = 0; k < ST_ONLINE_KINDS; k++) {
    st_runtime* rt = a->kinds[k];
    if (!rt || rt == a->runtime || !st_runtime_step_begins(rt, a->probe, a->probe_count)) continue;
    st_runtime_pause(a->runtime);
    a->runtime = rt;
    tell_plan_layout(a);
    st_runtime_join_step(rt, a->probe_count - 1);
    if (a->hints_follow) { /* recorded since it outgrew one plan: this one's hits go unseen */
      st_hints_spoil(a->hints);
      a->hints_follow = false;
    }
    st_online_serving(a->online, k);
    return;
  }
}

/* The step under way outgrew its plan: the layout hints record it from here, with its requests
 * so far, so the next step (of the new shape, served by the growable pool) gets a layout made
 * from it rather than best fit alone. Only when each of those requests is still live (a new
 * shape shows from a step's first inputs): a freed one's size and free are gone. Lock held. */
static void follow_outgrown_step(stalloc_allocator_t* a) {
  a->hints_tried = true;
  uint64_t k = a->next_id - a->step_first_id, found = 0;
  uint64_t* asked = malloc((k ? k : 1) * sizeof *asked);
  for (size_t i = 0; asked && i < a->live.capacity && found < k; i++) {
    if (!a->live.slots[i].key) continue;
    const live_block* r = (const live_block*)(uintptr_t)a->live.slots[i].value;
    if (r->id < a->step_first_id || r->id >= a->next_id) continue;
    asked[r->id - a->step_first_id] = r->size; /* ids are unique: k found fill all k */
    found++;
  }
  a->hints_follow = asked && found == k && st_hints_follow(a->hints, asked, k);
  if (a->hints_follow) { /* their frees are told to the hints by id (release_live) */
    a->follow_first_id = a->step_first_id;
    a->follow_count = k;
    a->follow_step = st_hints_step(a->hints);
  }
  free(asked);
}

/* Tells the arena which layout the step under way follows, when the hints' layout changed (or
 * stopped serving), so that the granules it moves at the peak are ones that layout leaves
 * alone. Lock held. */
static void tell_layout(stalloc_allocator_t* a) {
  const uint64_t *offsets = NULL, *sizes = NULL;
  size_t n = 0;
  uint64_t version;
  bool serving = st_hints_layout(a->hints, &offsets, &sizes, &n, &version);
  if (version == a->want_version) return;
  a->want_version = version;
  st_arena_want(a->arena, offsets, sizes, serving ? n : 0);
}

/* Picks the pool: in plan mode the runtime decides (planned offset, reusable space, slab or
 * fallback); otherwise the fallback pool serves everything. Lock held. */
static stalloc_status_t dispatch_alloc(stalloc_allocator_t* a, uint64_t size, uint64_t stream, void** p,
                                       void** handle, uint8_t* origin) {
  a->allocs_seen++;
  if (a->runtime) {
    if (__builtin_expect(a->probing, 0)) recognise_kind(a, size);
    st_rt_outcome outcome;
    st_range_node* node = NULL;
    stalloc_status_t s = st_runtime_alloc(a->runtime, size, stream, &outcome, p, &node);
    if (s) return s;
    if (outcome == RT_HIT || outcome == RT_DYNAMIC) {
      *handle = node;
      *origin = ORIGIN_PLAN;
      return STALLOC_OK;
    }
    if (__builtin_expect(a->hints != NULL, 0) && !a->hints_tried && st_runtime_outgrown(a->runtime))
      follow_outgrown_step(a);
    /* a recorded step's tiny requests go to the growable pool, as they will under its layout */
    if (outcome == RT_TINY && !a->hints_follow && st_slab_alloc(a->slab, size, stream, p, (st_slot**)handle) == STALLOC_OK) {
      *origin = ORIGIN_SLAB;
      return STALLOC_OK;
    }
  }
  stalloc_status_t s = STALLOC_OK;
  st_arena_block* ablock;
  /* The plan's pool is a region of the arena, so a miss shares its granules: the region lets go
   * of those its live blocks do not touch before the miss is placed, so that at the peak the
   * miss moves one of them rather than map new memory. (Told after the placement, the first
   * miss of a step the plan does not hold, an evaluation pass of another shape, mapped all of
   * its granules on top of the region's.) */
  if (a->runtime && a->arena) st_runtime_missed_into_arena(a->runtime);
  bool hinted = false;
  uint32_t position = UINT32_MAX;
  if (__builtin_expect(a->hints != NULL, 0) && (!a->runtime || a->hints_follow)) { /* a step the growable pool serves */
    uint64_t at;
    position = st_hints_alloc(a->hints, size, &at);
    tell_layout(a);
    /* After a step that asked exactly its kind's sizes of the time before, and while this one
     * asks what its kind asked last, a request of the pool serving for good that would map
     * granules in each of its candidates looks further up the sizes for a free block on mapped
     * ones (a training step and an evaluation pass by turns: the pass's blocks by best fit
     * moved granules from under the training step's layout, and the step moved them back). Not
     * where sizes change: there a block taken further up leaves the next ones less (MoE
     * routing: 2-4 MiB more on three shipped Mixtral runs at 256x; a curriculum's new stage: 8
     * MiB on a held-out convnet). docs/online.md, "A pass finds mapped granules". */
    st_arena_set_look_further(a->arena, st_hints_step_repeated(a->hints));
    if (at != UINT64_MAX) {
      hinted = st_arena_alloc_at(a->arena, at, size, stream, p, &ablock);
      st_hints_outcome(a->hints, hinted, at);
      a->stats.hinted_allocs += hinted;
    }
  }
  if (hinted || (a->arena && (s = st_arena_alloc(a->arena, size, stream, p, &ablock)) == STALLOC_OK)) {
    if (__builtin_expect(position != UINT32_MAX, 0)) { /* where its free is told to the hints */
      *st_arena_tag(ablock) = (uint64_t)st_hints_step(a->hints) << 32 | position;
      st_hints_placed(a->hints, position, st_arena_offset(a->arena, *p));
    }
    *handle = ablock;
    *origin = ORIGIN_ARENA;
  } else { /* a request past the arena's range, or no arena: cached segments */
    st_block* block;
    s = st_fallback_alloc(a->fallback, size, stream, p, &block);
    if (s) return s;
    *handle = block;
    *origin = ORIGIN_FALLBACK;
  }
  a->stats.fallback_allocs++;
  return STALLOC_OK;
}

stalloc_status_t stalloc_allocator_alloc(stalloc_allocator_t* a, size_t size, int32_t device,
                                         uint64_t stream, void** ptr) {
  if (!a || !ptr) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "alloc: NULL argument");
  *ptr = NULL;
  if (size == 0) return STALLOC_OK;
  if (device != a->options.device)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "alloc: device %d, but this allocator serves device %d",
                   (int)device, (int)a->options.device);
  LOCK(a);
  if (a->ops->tick) a->ops->tick(a->backend);
  if (a->deferred.head) collect_deferred(a);
  live_block* r = new_record(a);
  stalloc_status_t s;
  if (!r || !u64map_reserve(&a->live, a->live.count + 1)) {
    if (r) drop_record(a, r);
    s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "alloc: no host memory for bookkeeping");
  } else {
    void* p;
    void* handle;
    uint8_t origin;
    s = dispatch_alloc(a, size, stream, &p, &handle, &origin);
    if (s) {
      drop_record(a, r);
    } else {
      *r = (live_block){.ptr = p, .size = size, .id = a->next_id++, .stream = stream,
                        .recording = a->recorder ? a->recording : 0, .device = (int16_t)device,
                        .origin = origin, .handle = handle};
      u64map_put(&a->live, (uint64_t)(uintptr_t)p, (uint64_t)(uintptr_t)r);
      count_alloc(a, size);
      st_record_event(a, STALLOC_EVENT_ALLOC, r->id, size, p, stream, device, 0);
      if (a->online && st_online_recording(a->online)) {
        r->online_recording = st_online_recording_number(a->online);
        online_event(a, STALLOC_EVENT_ALLOC, r->id, size, p, stream, 0);
      }
      *ptr = p;
    }
  }
  if (s == STALLOC_ERR_OUT_OF_MEMORY) {
    a->stats.failed_allocs++;
    st_record_event(a, STALLOC_EVENT_ALLOC_FAILED, 0, size, NULL, stream, device, 0);
    char detail[1024];
    strncpy(detail, stalloc_last_error(), sizeof detail - 1);
    detail[sizeof detail - 1] = '\0';
    uint64_t reserved = a->budget.reserved, allocated = a->stats.allocated_bytes;
    uint64_t planned = a->runtime ? st_runtime_pool_size(a->runtime) : 0;
    UNLOCK(a);
    return st_fail(s, "out of memory: asked %zu bytes with %llu allocated, %llu reserved and %llu planned (%s)",
                   size, (unsigned long long)allocated, (unsigned long long)reserved,
                   (unsigned long long)planned, detail);
  }
  UNLOCK(a);
  return s;
}

/* Looks up a live block and, if `entry`, its entry in the pointer table; tells a double free
 * from a pointer never given out. Lock held. */
static stalloc_status_t find_live(stalloc_allocator_t* a, const void* ptr, const char* what, live_block** out,
                                  uint64_t** entry) {
  /* NULL is no block (and the freed ring's empty slots hold 0: no "already freed" for it). */
  if (!ptr) return st_fail(STALLOC_ERR_UNKNOWN_POINTER, "%s: NULL is not a block", what);
  uint64_t* v = u64map_get(&a->live, (uint64_t)(uintptr_t)ptr);
  if (v) {
    *out = (live_block*)(uintptr_t)*v;
    if (entry) *entry = v;
    return STALLOC_OK;
  }
  for (size_t i = 0; i < FREED_RING; i++)
    if (a->freed[i] == (uintptr_t)ptr)
      return st_fail(STALLOC_ERR_DOUBLE_FREE, "%s: %p was already freed", what, ptr);
  return st_fail(STALLOC_ERR_UNKNOWN_POINTER, "%s: %p was not given out by this allocator (or not recently)", what, ptr);
}

static bool is_kind(const stalloc_allocator_t* a, const st_runtime* rt) {
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (a->kinds[k] == rt) return true;
  return false;
}

/* A replaced plan's pool goes back once its last block is freed. Lock held. */
static void retire_if_idle(stalloc_allocator_t* a, st_runtime* rt) {
  if (is_kind(a, rt) || !st_runtime_idle(rt)) return;
  for (size_t i = 0; i < a->retired_count; i++)
    if (a->retired[i] == rt) {
      a->retired[i] = a->retired[--a->retired_count];
      st_runtime_destroy(rt);
      return;
    }
}

/* Gives a freed block back to the pool it came from. Lock held. */
static void release_to_pool(void* arg, uint8_t origin, void* handle, uint64_t stream) {
  stalloc_allocator_t* a = arg;
  switch (origin) {
    case ORIGIN_PLAN: { /* its pool may be another kind's, or a replaced plan's */
      st_runtime* rt = st_runtime_of(handle);
      st_runtime_free(rt, handle, stream);
      if (a->retired_count) retire_if_idle(a, rt);
      break;
    }
    case ORIGIN_SLAB: st_slab_free(a->slab, handle, stream); break;
    case ORIGIN_ARENA: st_arena_free(a->arena, handle, stream); break;
    default: st_fallback_free(a->fallback, handle, stream); break;
  }
}

/* Frees held back for record_stream whose streams are done go to their pools. Lock held. */
static void collect_deferred(stalloc_allocator_t* a) {
  st_deferred_collect(&a->deferred, a->ops, a->backend, release_to_pool, a);
}

/* The streams other than the freeing one that the block was recorded on, compacted in place. */
static uint32_t other_streams(live_block* r, uint64_t stream) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < r->used_on_count; i++)
    if (r->used_on[i] != stream) r->used_on[n++] = r->used_on[i];
  return n;
}

/* Frees live block r, `entry` its entry in the pointer table (find_live's). Lock held. */
static void release_live(stalloc_allocator_t* a, live_block* r, uint64_t* entry, uint64_t stream) {
  u64map_remove_found(&a->live, entry);
  if (__builtin_expect(a->hints != NULL, 0)) {
    uint64_t j = r->id - a->follow_first_id; /* a request of a followed step the plan served */
    uint64_t tag = r->origin == ORIGIN_ARENA ? *st_arena_tag(r->handle)
                   : j < a->follow_count ? (uint64_t)a->follow_step << 32 | j : 0;
    if (tag) st_hints_freed(a->hints, (uint32_t)(tag >> 32), (uint32_t)tag);
  }
  uint32_t others = a->ops->event_record ? other_streams(r, stream) : 0;
  if (others == 0) {
    release_to_pool(a, r->origin, r->handle, stream);
  } else if (st_deferred_add(&a->deferred, a->ops, a->backend, r->origin, r->handle, stream,
                             r->used_on, others) != STALLOC_OK) {
    /* No host memory to wait for the other streams: the block is never reused (its bytes
     * return with the pool), which is safe where reusing it might not be. */
    st_clear_error();
  }
  a->freed[a->freed_next] = (uintptr_t)r->ptr;
  a->freed_next = (a->freed_next + 1) % FREED_RING;
  a->stats.allocated_bytes -= r->size;
  a->stats.active_blocks--;
  a->stats.free_count++;
  st_record_event(a, STALLOC_EVENT_FREE, r->id, r->size, r->ptr, stream, r->device,
                  r->recording && r->recording == a->recording ? 0 : STALLOC_EVENT_FLAG_UNMATCHED);
  if (a->online && st_online_recording(a->online)) {
    bool mine = r->online_recording && r->online_recording == st_online_recording_number(a->online);
    online_event(a, STALLOC_EVENT_FREE, r->id, r->size, r->ptr, stream,
                 mine ? 0 : STALLOC_EVENT_FLAG_UNMATCHED);
  }
  drop_record(a, r);
}

stalloc_status_t stalloc_allocator_free(stalloc_allocator_t* a, void* ptr) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "free: NULL allocator");
  if (!ptr) return STALLOC_OK;
  LOCK(a);
  if (a->ops->tick) a->ops->tick(a->backend);
  live_block* r = NULL;
  uint64_t* entry = NULL;
  stalloc_status_t s = find_live(a, ptr, "free", &r, &entry);
  if (!s) release_live(a, r, entry, r->stream);
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_free_sized(stalloc_allocator_t* a, void* ptr, size_t size,
                                              int32_t device, uint64_t stream) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "free: NULL allocator");
  if (!ptr) return STALLOC_OK;
  LOCK(a);
  if (a->ops->tick) a->ops->tick(a->backend);
  live_block* r = NULL;
  uint64_t* entry = NULL;
  stalloc_status_t s = find_live(a, ptr, "free", &r, &entry);
  if (!s && (r->size != size || r->device != device))
    s = st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                "free: %p was allocated with %llu bytes on device %d, freed with %zu bytes on device %d",
                ptr, (unsigned long long)r->size, (int)r->device, size, (int)device);
  /* The block's last use may be queued on the stream it is freed on. */
  if (!s) release_live(a, r, entry, stream);
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_block_size(stalloc_allocator_t* a, const void* ptr, size_t* size) {
  if (!a || !size) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "block_size: NULL argument");
  LOCK(a);
  live_block* r = NULL;
  stalloc_status_t s = find_live(a, ptr, "block_size", &r, NULL);
  if (!s) *size = r->size;
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_record_stream(stalloc_allocator_t* a, const void* ptr, uint64_t stream) {
  if (!a || !ptr) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "record_stream: NULL argument");
  LOCK(a);
  live_block* r = NULL;
  stalloc_status_t s = find_live(a, ptr, "record_stream", &r, NULL);
  bool known = false;
  for (uint32_t i = 0; !s && i < r->used_on_count; i++) known |= r->used_on[i] == stream;
  if (!s && !known && stream != r->stream) {
    if (r->used_on_count == r->used_on_cap) {
      uint32_t cap = r->used_on_cap ? 2 * r->used_on_cap : 2;
      uint64_t* grown = realloc(r->used_on, cap * sizeof *grown);
      if (!grown) {
        s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "record_stream: no host memory");
      } else {
        r->used_on = grown;
        r->used_on_cap = cap;
      }
    }
    if (!s) r->used_on[r->used_on_count++] = stream;
  }
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_block_base(stalloc_allocator_t* a, const void* ptr, void** base,
                                              size_t* size) {
  if (!a || !base || !size) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "block_base: NULL argument");
  LOCK(a);
  live_block* r = NULL;
  stalloc_status_t s = find_live(a, ptr, "block_base", &r, NULL);
  void* b = NULL;
  uint64_t n = 0;
  if (!s) {
    if (r->origin == ORIGIN_FALLBACK) st_fallback_block_segment(r->handle, &b, &n);
    else if (r->origin == ORIGIN_PLAN) st_runtime_pool_allocation(st_runtime_of(r->handle), &b, &n);
    if (!b)
      s = st_fail(STALLOC_ERR_UNSUPPORTED, "block_base: %p lies in %s, which is not one backend allocation",
                  ptr, r->origin == ORIGIN_PLAN ? "the plan's pool mapped granule by granule" :
                       r->origin == ORIGIN_ARENA ? "the growable pool, mapped granule by granule" : "a slab chunk");
  }
  UNLOCK(a);
  if (!s) {
    *base = b;
    *size = (size_t)n;
  }
  return s;
}

stalloc_status_t stalloc_allocator_set_memory_limit(stalloc_allocator_t* a, uint64_t bytes) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "set_memory_limit: NULL allocator");
  LOCK(a);
  a->budget.limit = bytes;
  a->options.memory_limit = bytes;
  UNLOCK(a);
  return STALLOC_OK;
}

stalloc_status_t stalloc_allocator_device_memory(stalloc_allocator_t* a, uint64_t* total) {
  if (!a || !total) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "device_memory: NULL argument");
  if (!a->ops->total_memory)
    return st_fail(STALLOC_ERR_UNSUPPORTED, "device_memory: the %s backend does not know its total memory",
                   a->ops->name);
  LOCK(a);
  stalloc_status_t s = a->ops->total_memory(a->backend, total);
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_release_cached(stalloc_allocator_t* a) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "release_cached: NULL allocator");
  LOCK(a);
  collect_deferred(a);
  st_fallback_release_cached(a->fallback);
  if (a->arena) st_arena_trim(a->arena);
  UNLOCK(a);
  return STALLOC_OK;
}

static void add_counters(st_runtime_counters* into, const st_runtime_counters* r) {
  into->hits += r->hits;
  into->misses += r->misses;
  into->resyncs += r->resyncs;
  into->dynamic += r->dynamic;
  into->hit_bytes += r->hit_bytes;
  into->miss_bytes += r->miss_bytes;
}

st_runtime_counters st_allocator_plan_counters(const stalloc_allocator_t* a) {
  st_runtime_counters c = a->past;
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (a->kinds[k]) add_counters(&c, st_runtime_counters_of(a->kinds[k]));
  return c;
}

void stalloc_stats_init(stalloc_stats_t* s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
}

stalloc_status_t stalloc_allocator_stats(stalloc_allocator_t* a, stalloc_stats_t* out) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stats: NULL allocator");
  stalloc_status_t st = st_struct_check(out, "stats");
  if (st) return st;
  LOCK(a);
  stalloc_stats_t s = a->stats;
  s.reserved_bytes = a->budget.reserved;
  s.peak_reserved_bytes = a->budget.peak_reserved;
  s.segment_count = a->budget.segments;
  s.backend_allocs = a->budget.backend_allocs;
  s.backend_frees = a->budget.backend_frees;
  s.deferred_frees = a->deferred.count;
  s.memory_limit = a->budget.limit;
  st_runtime_counters c = st_allocator_plan_counters(a);
  s.plan_hits = c.hits;
  s.plan_misses = c.misses;
  s.resyncs = c.resyncs;
  s.dynamic_allocs = c.dynamic;
  UNLOCK(a);
  st_struct_write(out, &s, sizeof s);
  return STALLOC_OK;
}

stalloc_status_t stalloc_allocator_reset_peaks(stalloc_allocator_t* a) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "reset_peaks: NULL allocator");
  LOCK(a);
  stalloc_stats_t* s = &a->stats;
  s->peak_allocated_bytes = s->allocated_bytes;
  s->peak_active_blocks = s->active_blocks;
  a->budget.peak_reserved = a->budget.reserved;
  s->alloc_count = s->free_count = s->failed_allocs = 0;
  s->plan_hits = s->plan_misses = s->resyncs = s->dynamic_allocs = s->fallback_allocs = s->hinted_allocs = 0;
  s->steps = 0;
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (a->kinds[k]) st_runtime_reset_counters(a->kinds[k]);
  a->past = (st_runtime_counters){0};
  a->step_hit_bytes = a->step_miss_bytes = 0;
  a->budget.backend_allocs = a->budget.backend_frees = 0;
  UNLOCK(a);
  return STALLOC_OK;
}

/* Room for `more` retired pools. Lock held. */
static bool retired_room(stalloc_allocator_t* a, size_t more) {
  if (a->retired_count + more <= a->retired_cap) return true;
  size_t cap = ST_MAX(2 * a->retired_cap, a->retired_count + more);
  st_runtime** r = realloc(a->retired, cap * sizeof *r);
  if (!r) return false;
  a->retired = r;
  a->retired_cap = cap;
  return true;
}

/* Stops serving kind k's plan: its pool goes back once its last block is freed. Lock held;
 * retired_room(a, 1) was true. */
static void drop_kind(stalloc_allocator_t* a, int k) {
  st_runtime* old = a->kinds[k];
  if (!old) return;
  add_counters(&a->past, st_runtime_counters_of(old));
  a->retired[a->retired_count++] = old;
  a->kinds[k] = NULL;
  if (a->runtime == old) a->runtime = NULL;
  st_runtime_retire(old);
  retire_if_idle(a, old);
}

/* Stops serving every plan. False (and the plans still served) when there is no host memory
 * to remember their pools. Lock held. */
static bool drop_plans(stalloc_allocator_t* a) {
  if (!retired_room(a, ST_ONLINE_KINDS)) return false;
  for (int k = 0; k < ST_ONLINE_KINDS; k++) drop_kind(a, k);
  return true;
}

/* Serves `plan` for kind k from now on, its position `position` (the number of the run's
 * allocs it has seen). A plan that kind already had is replaced: its pool stays until its last
 * block is freed, its counters add to the allocator's. Lock held. */
static stalloc_status_t install_plan(stalloc_allocator_t* a, int k, const stalloc_plan* plan,
                                     uint64_t position, bool shaped) {
  /* Another kind's plan, served by turns with this one (the one with the largest pool): their
   * pools share its region where it is large enough or grows in place, so a change of kind
   * moves no granules. */
  const st_runtime* share = NULL;
  for (int j = 0; j < ST_ONLINE_KINDS; j++)
    if (j != k && a->kinds[j] && (!share || st_runtime_pool_size(a->kinds[j]) > st_runtime_pool_size(share)))
      share = a->kinds[j];
  st_runtime* rt = NULL;
  stalloc_status_t s = st_runtime_create(a->ops, a->backend, &a->caps, &a->budget, a->arena, a->options.alignment,
                                         plan, position, shaped, share, &rt);
  if (!s && !a->slab)
    s = st_slab_create(a->ops, a->backend, &a->caps, &a->budget, a->arena, a->options.tiny_alignment, &a->slab);
  if (!s && a->kinds[k] && !retired_room(a, 1)) s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "load_plan: no host memory");
  if (s) {
    st_runtime_destroy(rt);
    return s;
  }
  drop_kind(a, k);
  a->kinds[k] = rt;
  st_fallback_exact_segments(a->fallback, true);
  return STALLOC_OK;
}

/* Kind k's plan serves the next step (k < 0: none does). The one that served before lets its
 * idle granules go (its blocks keep only theirs) until it serves again. Lock held. */
static void serve_kind(stalloc_allocator_t* a, int k) {
  st_runtime* next = k >= 0 ? a->kinds[k] : NULL;
  if (a->runtime && a->runtime != next) st_runtime_pause(a->runtime);
  a->runtime = next;
  tell_plan_layout(a);
}

/* A growable pool that mapped at least CHURN_GRANULES granules in a step (moves included: about
 * 0.5 ms of driver calls on an H200, README "On a GPU") churns: then a plan that would hold up
 * to a granule, or 1/CHURN_SLACK of the peak reserved if that is more, above what the run has
 * needed is used rather than declined, for a plan's region keeps its granules mapped. */
#define CHURN_GRANULES 16
#define CHURN_HELD_STEPS 2 /* steps the pool's peak held before a churning pool places at the ends */
#define CHURN_MOVES 512    /* granules mapped in a step (about 40 ms of driver calls on an H200) from
                              which a pool of any size churns */
#define CHURN_KEEP 8       /* a churning pool goes on churning while a step maps CHURN_MOVES / CHURN_KEEP */
#define CHURN_SLACK 1024

/* What freeing the growable pool's live blocks allocated since request id `first` would give
 * back, at most: the granules only they hold, and no more than their bytes in whole granules
 * (a small block alone in a granule frees it, but its successor in the plan's pool may as well
 * need one). Lock held. */
static uint64_t arena_held_since(const stalloc_allocator_t* a, uint64_t first) {
  size_t n = 0;
  uint64_t bytes = 0;
  st_arena_block** blocks = malloc((a->live.count ? a->live.count : 1) * sizeof *blocks);
  if (!blocks) return 0; /* no host memory: assume nothing would go */
  for (size_t i = 0; i < a->live.capacity; i++) {
    if (!a->live.slots[i].key) continue;
    const live_block* r = (const live_block*)(uintptr_t)a->live.slots[i].value;
    if (r->origin != ORIGIN_ARENA || r->id < first || n >= a->live.count) continue;
    blocks[n++] = r->handle;
    bytes += r->size;
  }
  uint64_t g = st_arena_granule(a->arena);
  uint64_t released = ST_MIN(st_arena_released_by(a->arena, blocks, n), bytes / g * g);
  free(blocks);
  return released;
}

/* The online lifecycle at a step boundary: a plan ready for some kind is switched to (or
 * declined), a drifting run goes back to the growable pool, and the plan of the kind expected
 * next serves. Lock held. */
static void online_step(stalloc_allocator_t* a, uint64_t step) {
  st_runtime_counters c = st_allocator_plan_counters(a);
  uint64_t missed = c.miss_bytes - a->step_miss_bytes, served = c.hit_bytes - a->step_hit_bytes;
  a->step_miss_bytes = c.miss_bytes;
  a->step_hit_bytes = c.hit_bytes;
  uint64_t step_allocs = a->allocs_seen - a->step_allocs_at;
  a->step_allocs_at = a->allocs_seen;
  uint64_t moved = a->arena ? st_arena_maps(a->arena) - a->step_arena_maps : 0; /* granules the step mapped */
  stalloc_event_t marker = {.id = step, .device = (int16_t)a->options.device, .kind = STALLOC_EVENT_STEP};
  bool drop = false;
  int k = -1;
  const stalloc_plan* plan = st_online_step(a->online, &marker, step_allocs, missed, served, &drop, &k);
  if (drop) drop_plans(a);
  if (plan) {
    /* The recording's cached segments go back first, so the pool does not stack on them;
     * the growable pool's idle granules go only if the plan is used (unmapping them for a plan
     * declined would have the next step map them all again, each a GPU call of tens of us).
     * The plan's iteration begins at a step marker: the next alloc is its first position. */
    st_fallback_release_cached(a->fallback);
    uint64_t idle = a->arena ? st_arena_idle_bytes(a->arena) : 0;
    /* A plan that would hold more than the run has needed so far stays unused: the pool it
     * needs comes on top of what lives outside it (weights, optimizer state). With a growable
     * pool, a declined plan takes the other plans with it: the growable pool serves from now
     * on. Without one, the first plan is always used (cached segments serve changing shapes
     * no better), and a plan for another kind of step only when its pool, a segment of its
     * own, fits under that peak: else the plans already there serve that kind too. */
    bool others = false;
    for (int j = 0; j < ST_ONLINE_KINDS; j++) others |= j != k && a->kinds[j];
    /* Under the plan the run would hold what is mapped now, less the idle granules (trimmed on
     * the switch) and the granules only the blocks the last step left live hold (the plan's
     * pool holds their successors, and they go during the next step as theirs did), plus the
     * pool. */
    uint64_t g = a->arena ? st_arena_granule(a->arena) : 1; /* in the arena's granules */
    uint64_t kept = a->budget.reserved - idle;
    uint64_t carried = a->arena ? ST_MIN(arena_held_since(a, a->step_first_id), kept) : 0;
    uint64_t need = kept - carried + st_align_up(plan->pool_size, g);
    /* A growable pool that moved granules in the last step pays the driver calls of each move
     * (tens of us on a GPU) every step, where a plan's region holds its granules: then a plan
     * that needs a little more memory is used all the same. */
    uint64_t slack = a->arena && moved >= CHURN_GRANULES ? ST_MAX(g, a->budget.peak_reserved / CHURN_SLACK) : 0;
    bool declined = (a->arena || others) && need > a->budget.peak_reserved + slack;
    if (declined && a->arena && !drop_plans(a)) declined = false; /* no memory to drop them */
    if (!declined && a->arena) st_arena_trim(a->arena);
    stalloc_status_t s = declined ? STALLOC_OK : install_plan(a, k, plan, plan->prologue_count, true);
    st_online_switched(a->online, s, declined, s || declined ? 0 : st_runtime_pool_size(a->kinds[k]));
    st_clear_error();
  }
  serve_kind(a, st_online_next_kind(a->online));
  /* Once the growable pool serves for good (its plans declined or dropped: shapes that vary, as
   * with MoE routing or dynamic padding, or a pool that needs less), each request weighs a few
   * free blocks for the one needing the fewest granules mapped (on the recorded GPU Mixtral run
   * 40% fewer moves a step, no more memory); not before: the first full steps set the peak,
   * and there it costs memory (docs/online.md). */
  if (a->arena)
    st_arena_set_fit_candidates(a->arena, st_online_in_pool(a->online)
                                              ? st_online_params(a->online)->pool_fit_candidates : 1);
  /* And once that pool's peak has held for pool_at_ends_after steps, a request may also go at
   * either end of its free block: where a routed step's sizes land on other addresses each step,
   * one end often has granules still mapped (Mixtral runs repeated eight times at 32x: moves in
   * the steady state 21 -> 2 a step, median over the full-size recordings).
   * Not while the peak still grows: placed so, the step that sets it needs a granule or two
   * more (docs/online.md, "Moves at the pool's peak"). */
  a->peak_held_steps = a->budget.peak_reserved != a->peak_at_marker ? 0 : a->peak_held_steps + (a->peak_held_steps < UINT32_MAX);
  a->peak_at_marker = a->budget.peak_reserved;
  uint32_t after = st_online_params(a->online)->pool_at_ends_after;
  /* A pool whose step, at a peak that held, moved half as many granules as it holds or more
   * places at the ends of free blocks whatever pool_at_ends_after says (a U-Net trained at
   * several image sizes, at 256x: 2,400-5,700 moves a step, tens of us each on a GPU; at the
   * ends, none). So does a pool of any size whose step moved CHURN_MOVES granules: at a GPU
   * run's size (a 28 GiB Mixtral pool routing other sizes each step, 3,000 moves of its 14,000
   * granules) the moves cost tens of ms a step and a granule more is nothing; once on, it stays
   * on while a step moves an eighth of that, for at the ends the moves halve and would turn it
   * off by turns. docs/online.md, "A pool that churns places at the ends all the same". */
  bool churns = a->arena && a->peak_held_steps >= CHURN_HELD_STEPS &&
                (moved * 2 * st_arena_granule(a->arena) >= a->budget.reserved || moved >= CHURN_MOVES ||
                 (a->churning && moved * CHURN_KEEP >= CHURN_MOVES));
  a->churning = churns;
  if (a->arena)
    st_arena_set_at_ends(a->arena, st_online_in_pool(a->online) && ((after && a->peak_held_steps >= after) || churns));
  a->step_first_id = a->next_id; /* for the next boundary's decision, as step_allocs_at */
  if (a->arena) a->step_arena_maps = st_arena_maps(a->arena);
  int planned = 0;
  for (int j = 0; j < ST_ONLINE_KINDS; j++) planned += a->kinds[j] != NULL;
  a->probing = a->runtime && planned >= 2;
  a->probe_count = 0;
}

/* The layout hints at a step boundary: the step that ended is planned around the blocks in
 * use, if the hints want it. Lock held. */
static void hints_step(stalloc_allocator_t* a) {
  uint64_t *starts = NULL, *sizes = NULL, *tags = NULL;
  size_t n = 0;
  if (st_hints_wants_layout(a->hints)) {
    n = st_arena_taken(a->arena, NULL, NULL, NULL, 0);
    starts = malloc((n ? n : 1) * sizeof *starts);
    sizes = malloc((n ? n : 1) * sizeof *sizes);
    tags = malloc((n ? n : 1) * sizeof *tags);
    if (starts && sizes && tags) {
      st_arena_taken(a->arena, starts, sizes, tags, n);
    } else { /* no host memory: no hints from this step */
      free(starts);
      free(sizes);
      free(tags);
      starts = sizes = tags = NULL;
      n = 0;
    }
  }
  st_hints_boundary(a->hints, starts, sizes, tags, n, st_online_expected_allocs(a->online));
  a->hints_follow = a->hints_tried = false;
  if (a->runtime) st_hints_spoil(a->hints); /* a plan serves the step: not one to plan from */
  /* Once steps repeat, what grows the pool's top is a step's own blocks at a new peak (a
   * larger batch, a longer sequence), freed within the step: on a granule boundary each gives
   * back all its granules, where one packed against the block below leaves that granule
   * partly used. Not before (construction and the warm-up make weights and optimizer state
   * end to end, to live on together), nor once sizes change with no rule (the gaps such
   * blocks leave below them then add up). Measured in docs/online.md, "Top growth on
   * granule boundaries, once steps repeat". */
  st_arena_set_top_on_boundary(a->arena, st_hints_steps_repeat(a->hints));
}

stalloc_status_t stalloc_allocator_step_begin(stalloc_allocator_t* a, uint64_t step) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "step_begin: NULL allocator");
  LOCK(a);
  a->stats.steps++;
  st_record_event(a, STALLOC_EVENT_STEP, step, 0, NULL, 0, a->options.device, 0);
  /* A replaced plan whose last block was freed with work still queued (a GPU's), or whose
   * pending blocks a plan sharing its region let go, was not idle at that free: its pool goes
   * back at the first boundary after. */
  for (size_t i = a->retired_count; i-- > 0;) retire_if_idle(a, a->retired[i]);
  if (a->online) online_step(a, step);
  if (a->hints) hints_step(a);
  if (a->runtime) st_runtime_step(a->runtime);
  UNLOCK(a);
  return STALLOC_OK;
}

stalloc_status_t stalloc_allocator_online_start(stalloc_allocator_t* a, const stalloc_online_params_t* params) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_start: NULL allocator");
  LOCK(a);
  stalloc_status_t s = STALLOC_OK;
  if (a->online || a->runtime)
    s = st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_start: this allocator already %s",
                a->online ? "runs the online lifecycle" : "serves a plan");
  else
    s = st_online_create(params, a->options.alignment, a->arena != NULL, &a->online);
  if (!s && a->arena && st_online_params(a->online)->layout_hints &&
      (s = st_hints_create(a->options.alignment, st_online_params(a->online)->wait_for_plan != 0, &a->hints))) {
    st_online_destroy(a->online);
    a->online = NULL;
  }
  if (a->hints) st_arena_index_addresses(a->arena);
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_online_info(stalloc_allocator_t* a, stalloc_online_info_t* info) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_info: NULL allocator");
  stalloc_status_t s = st_struct_check(info, "online_info: info");
  if (s) return s;
  LOCK(a);
  stalloc_online_info_t v; /* off: every field 0 */
  stalloc_online_info_init(&v);
  if (a->online) st_online_info(a->online, &v);
  if (a->hints) st_hints_counts(a->hints, &v.hint_layouts, &v.hint_layouts_kept, &v.hint_seconds_max, &v.hint_seconds_total);
  st_struct_write(info, &v, sizeof v);
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_online_plans(stalloc_allocator_t* a, stalloc_online_plan_record_t* records,
                                                size_t capacity, size_t* count) {
  if (!a || !count || (capacity && !records))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_plans: NULL argument");
  LOCK(a);
  *count = 0;
  stalloc_status_t s = a->online ? st_online_plans(a->online, records, capacity, count) : STALLOC_OK;
  UNLOCK(a);
  return s;
}

stalloc_status_t stalloc_allocator_load_plan(stalloc_allocator_t* a, const struct stalloc_plan* plan) {
  if (!a || !plan) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "load_plan: NULL argument");
  LOCK(a);
  stalloc_status_t s;
  if (a->runtime || a->online)
    s = st_fail(STALLOC_ERR_INVALID_ARGUMENT, "load_plan: this allocator already %s",
                a->runtime ? "serves a plan" : "runs the online lifecycle, which loads its own plans");
  else /* blocks already live stay in the fallback pool; positions count from the run's first alloc */
    if (!(s = install_plan(a, 0, plan, a->allocs_seen, plan->sizes_tolerated != 0))) {
      a->runtime = a->kinds[0];
      tell_plan_layout(a);
    }
  UNLOCK(a);
  return s;
}
