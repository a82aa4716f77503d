/* virtual.c - addresses from one reserved, inaccessible range. Nothing is ever
 * touched, so a trace of a 60 GB GPU run replays on a machine with far less memory; any access
 * to the memory faults, which is the point. Segments are carved with a first-fit free list so
 * freed ranges are reused. It models CUDA's virtual memory too: reserve carves a range, and
 * map/unmap take multiples of 2 MiB (CUDA's granularity), so a replay reserves what a growable
 * pool on a GPU would. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/virtual.h"

typedef struct range {
  uint64_t start, size;
} range;

typedef struct virtual_state {
  uint8_t* base;
  uint64_t capacity;
  range* free_ranges; /* sorted by start, coalesced */
  size_t count, cap;
  /* The lagged model (options.virtual_lag): time is the allocator's call count; work queued at
   * time t is done at t + lag, or when the host waited for the device after t. */
  uint64_t lag, now, caught_up, last_queued, waits;
} virtual_state;

static stalloc_status_t virtual_create(const stalloc_options_t* options, void** state, backend_caps* caps) {
  uint64_t capacity = options->virtual_capacity ? options->virtual_capacity : (1ull << 40);
  capacity = st_align_up(capacity, 1ull << 21);
  if (!capacity) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "virtual backend: capacity too large");
  virtual_state* v = calloc(1, sizeof *v);
  if (!v) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "virtual backend: no host memory");
  void* base = mmap(NULL, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    free(v);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "virtual backend: cannot reserve %llu bytes of address space: %s",
                   (unsigned long long)capacity, strerror(errno));
  }
  v->base = base;
  v->capacity = capacity;
  v->free_ranges = malloc(16 * sizeof *v->free_ranges);
  if (!v->free_ranges) {
    munmap(base, capacity);
    free(v);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "virtual backend: no host memory");
  }
  v->cap = 16;
  v->count = 1;
  /* Offsets start at the first 2 MiB boundary at or after the base so big alignments hold. */
  uint64_t lead = st_align_up((uint64_t)(uintptr_t)base, 1ull << 21) - (uint64_t)(uintptr_t)base;
  v->free_ranges[0] = (range){lead, capacity - lead};
  v->lag = options->virtual_lag > 0 ? (uint64_t)options->virtual_lag : 0;
  *state = v;
  *caps = (backend_caps){.granularity = 4096, .can_grow = true, .map_granularity = ST_VIRTUAL_GRANULE};
  return STALLOC_OK;
}

static void virtual_destroy(void* state) {
  virtual_state* v = state;
  munmap(v->base, v->capacity);
  free(v->free_ranges);
  free(v);
}

static stalloc_status_t virtual_alloc(void* state, uint64_t size, uint64_t alignment, uint64_t stream,
                                      void** ptr) {
  (void)stream;
  virtual_state* v = state;
  for (size_t i = 0; i < v->count; i++) {
    range* r = &v->free_ranges[i];
    uint64_t abs = (uint64_t)(uintptr_t)v->base + r->start;
    uint64_t pad = st_align_up(abs, alignment) - abs;
    if (r->size < pad || r->size - pad < size) continue;
    uint64_t start = r->start + pad;
    if (pad) {
      /* Keep the padding as its own free range in front. */
      if (v->count == v->cap) {
        range* grown = realloc(v->free_ranges, 2 * v->cap * sizeof *grown);
        if (!grown) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "virtual backend: no host memory");
        v->free_ranges = grown;
        v->cap *= 2;
        r = &v->free_ranges[i];
      }
      memmove(&v->free_ranges[i + 1], &v->free_ranges[i], (v->count - i) * sizeof *r);
      v->count++;
      v->free_ranges[i].size = pad;
      r = &v->free_ranges[i + 1];
      r->start = start;
      r->size -= pad;
    }
    r->start += size;
    r->size -= size;
    if (!r->size) {
      size_t j = (size_t)(r - v->free_ranges);
      memmove(r, r + 1, (v->count - j - 1) * sizeof *r);
      v->count--;
    }
    *ptr = v->base + start;
    return STALLOC_OK;
  }
  return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "virtual backend: %llu bytes do not fit in the %llu-byte range",
                 (unsigned long long)size, (unsigned long long)v->capacity);
}

static stalloc_status_t virtual_free(void* state, void* ptr, uint64_t size) {
  virtual_state* v = state;
  uint64_t start = (uint64_t)((uint8_t*)ptr - v->base);
  size_t i = 0;
  while (i < v->count && v->free_ranges[i].start < start) i++;
  bool join_prev = i > 0 && v->free_ranges[i - 1].start + v->free_ranges[i - 1].size == start;
  bool join_next = i < v->count && start + size == v->free_ranges[i].start;
  if (join_prev && join_next) {
    v->free_ranges[i - 1].size += size + v->free_ranges[i].size;
    memmove(&v->free_ranges[i], &v->free_ranges[i + 1], (v->count - i - 1) * sizeof(range));
    v->count--;
  } else if (join_prev) {
    v->free_ranges[i - 1].size += size;
  } else if (join_next) {
    v->free_ranges[i].start = start;
    v->free_ranges[i].size += size;
  } else {
    if (v->count == v->cap) {
      range* grown = realloc(v->free_ranges, 2 * v->cap * sizeof *grown);
      if (!grown) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "virtual backend: no host memory");
      v->free_ranges = grown;
      v->cap *= 2;
    }
    memmove(&v->free_ranges[i + 1], &v->free_ranges[i], (v->count - i) * sizeof(range));
    v->free_ranges[i] = (range){start, size};
    v->count++;
  }
  return STALLOC_OK;
}

static stalloc_status_t virtual_reserve(void* state, uint64_t size, void** base) {
  if (!size || size % ST_VIRTUAL_GRANULE)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "virtual backend: reserve(%llu): not a multiple of the 2 MiB granularity",
                   (unsigned long long)size);
  return virtual_alloc(state, size, ST_VIRTUAL_GRANULE, 0, base);
}

static stalloc_status_t virtual_release(void* state, void* base, uint64_t size) {
  return virtual_free(state, base, size);
}

/* Nothing is touched, so mapping is only checked: what it costs is counted by the caller. */
static stalloc_status_t virtual_map(void* state, void* at, uint64_t size) {
  virtual_state* v = state;
  uint64_t off = (uint64_t)((uint8_t*)at - v->base);
  if (!size || size % ST_VIRTUAL_GRANULE || (uint64_t)(uintptr_t)at % ST_VIRTUAL_GRANULE || off > v->capacity ||
      size > v->capacity - off)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "virtual backend: map(%p, %llu): not whole 2 MiB granules of the range",
                   at, (unsigned long long)size);
  return STALLOC_OK;
}

/* Both addresses map one granule's memory: nothing to do but check them. */
static stalloc_status_t virtual_alias(void* state, void* from, void* to, uint64_t size) {
  stalloc_status_t s = virtual_map(state, from, size);
  return s ? s : virtual_map(state, to, size);
}

static stalloc_status_t virtual_total_memory(void* state, uint64_t* total) {
  *total = ((virtual_state*)state)->capacity;
  return STALLOC_OK;
}

/* ---- the lagged model: an asynchronous device without one ---- */

/* The host waits until the device has done everything queued so far. */
static void wait_for_device(virtual_state* v) {
  if (v->last_queued >= v->caught_up && v->last_queued + v->lag > v->now) v->waits++;
  v->caught_up = v->now + 1;
}

static void lagged_tick(void* state) {
  virtual_state* v = state;
  v->now++;
}

/* An event is the time it was recorded, plus one so it is never NULL. */
static stalloc_status_t lagged_event_record(void* state, uint64_t stream, void** event) {
  (void)stream;
  virtual_state* v = state;
  v->last_queued = v->now;
  *event = (void*)(uintptr_t)(v->now + 1);
  return STALLOC_OK;
}

static bool lagged_event_done(void* state, void* event) {
  virtual_state* v = state;
  uint64_t at = (uint64_t)(uintptr_t)event - 1;
  return at + v->lag <= v->now || at < v->caught_up;
}

static void lagged_event_wait(void* state, void* event) {
  if (!lagged_event_done(state, event)) wait_for_device(state);
}

static void lagged_event_destroy(void* state, void* event) {
  (void)state;
  (void)event;
}

static stalloc_status_t lagged_unmap(void* state, void* at, uint64_t size) {
  stalloc_status_t s = virtual_map(state, at, size);
  if (!s) wait_for_device(state); /* as cuda.c: queued work may still use the range */
  return s;
}

uint64_t st_virtual_waits(void* state) { return ((virtual_state*)state)->waits; }

const backend_ops st_backend_virtual_lagged = {
    .name = "virtual",
    .create = virtual_create,
    .destroy = virtual_destroy,
    .alloc = virtual_alloc,
    .free = virtual_free,
    .reserve = virtual_reserve,
    .release = virtual_release,
    .map = virtual_map,
    .unmap = lagged_unmap,
    .unmap_unused = virtual_map,
    .alias = virtual_alias,
    .event_record = lagged_event_record,
    .event_done = lagged_event_done,
    .event_destroy = lagged_event_destroy,
    .event_wait = lagged_event_wait,
    .tick = lagged_tick,
    .total_memory = virtual_total_memory,
};

const backend_ops st_backend_virtual = {
    .name = "virtual",
    .create = virtual_create,
    .destroy = virtual_destroy,
    .alloc = virtual_alloc,
    .free = virtual_free,
    .reserve = virtual_reserve,
    .release = virtual_release,
    .map = virtual_map,
    .unmap = virtual_map,
    .alias = virtual_alias,
    .total_memory = virtual_total_memory,
};
