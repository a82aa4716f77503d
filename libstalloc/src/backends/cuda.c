/* cuda.c - device memory through the CUDA driver API, loaded at run time.
 *
 * The driver (libcuda.so.1, or the file STALLOC_CUDA_DRIVER names) is opened with dlopen the
 * first time a cuda allocator is created, once per process; without it creation fails with
 * STALLOC_ERR_NO_DEVICE and nothing else in the library notices. Nothing here needs a CUDA
 * toolkit: cuda_driver.h declares the few entry points used.
 *
 * - Context: the one current on the creating thread if it belongs to options->device (what
 *   PyTorch and the CUDA runtime use: the device's primary context); otherwise the device's
 *   primary context, retained, and made current on the creating thread if it had none. Every
 *   op makes that context current around its driver calls, so frees may come from any thread.
 * - Segments (alloc/free): cuMemAlloc/cuMemFree. cuMemFree waits for the device like cudaFree,
 *   so a segment is never returned while queued work may still use it.
 * - Growable ranges (reserve/release/map/unmap), where the device supports virtual memory
 *   management: address space from cuMemAddressReserve, backed one granule at a time by
 *   cuMemCreate + cuMemMap + cuMemSetAccess, so any granule-aligned tail can be unmapped again.
 * - Stream order: event_record records a pooled CUevent (timing disabled) on the stream;
 *   event_done is cuEventQuery, and a driver error there counts as done only after waiting.
 *
 * Like every backend, the ops are called under the owning allocator's lock. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cuda_driver.h"
#include "base/grow.h"

/* ---- the driver, loaded once per process ---- */

typedef struct cu_driver {
#define ST_CU_FIELD(name, params, symbol, required) cu_result(*name) params;
  ST_CU_FUNCTIONS(ST_CU_FIELD)
#undef ST_CU_FIELD
  bool has_vmm_api; /* every optional (virtual memory) entry point was found */
} cu_driver;

static cu_driver D;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static stalloc_status_t load_status;
static char load_message[768];

/* The CUDA driver library to load instead of libcuda.so.1 (tests point it at a mock). One per
 * process and loaded once, so it is not a per-allocator option; NULL when unset. */
static const char* driver_path_from_env(void) {
  const char* v = getenv("STALLOC_CUDA_DRIVER");
  return v && *v ? v : NULL;
}

static void load_driver(void) {
  const char* path = driver_path_from_env();
  const char* from = " (named by STALLOC_CUDA_DRIVER)";
  if (!path) {
    path = "libcuda.so.1";
    from = "";
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    load_status = STALLOC_ERR_NO_DEVICE;
    snprintf(load_message, sizeof load_message,
             "cuda backend: no CUDA driver: cannot load %s%s: %s", path, from, why ? why : "unknown error");
    return;
  }
  cu_driver d = {.has_vmm_api = true};
#define ST_CU_LOAD(name, params, symbol, required)                                             \
  d.name = (cu_result(*) params)dlsym(lib, symbol);                                            \
  if (!d.name && required == 1) {                                                              \
    load_status = STALLOC_ERR_NO_DEVICE;                                                       \
    snprintf(load_message, sizeof load_message,                                                \
             "cuda backend: %s%s is not a usable CUDA driver: it lacks %s", path, from, symbol); \
    dlclose(lib);                                                                              \
    return;                                                                                    \
  }                                                                                            \
  if (!d.name && required == 0) d.has_vmm_api = false;
  ST_CU_FUNCTIONS(ST_CU_LOAD)
#undef ST_CU_LOAD
  cu_result r = d.cuInit(0);
  if (r != ST_CU_SUCCESS) {
    const char *name = NULL, *text = NULL;
    if (d.cuGetErrorName(r, &name) != ST_CU_SUCCESS || !name) name = "unknown CUresult";
    if (d.cuGetErrorString(r, &text) != ST_CU_SUCCESS || !text) text = "no description";
    /* No device, a busy one, a stub library, or a library that does not match the kernel
     * module: nothing to allocate on. Anything else is the driver failing. */
    load_status = r == ST_CU_ERROR_NO_DEVICE || r == ST_CU_ERROR_DEVICE_UNAVAILABLE || r == ST_CU_ERROR_STUB_LIBRARY ||
                          r == ST_CU_ERROR_SYSTEM_DRIVER_MISMATCH || r == ST_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
                      ? STALLOC_ERR_NO_DEVICE
                      : STALLOC_ERR_BACKEND;
    snprintf(load_message, sizeof load_message, "cuda backend: cuInit failed (driver %s%s): %s (%d): %s",
             path, from, name, r, text);
    dlclose(lib);
    return;
  }
  D = d; /* the library stays loaded for the life of the process, as the runtime keeps it */
}

/* A driver failure as a stalloc status: out of memory stays out of memory, the rest is a
 * backend error; the message carries the call and the driver's name and text for r. */
static stalloc_status_t fail_cu(cu_result r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static stalloc_status_t fail_cu(cu_result r, const char* fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const char *name = NULL, *text = NULL;
  if (D.cuGetErrorName(r, &name) != ST_CU_SUCCESS || !name) name = "unknown CUresult";
  if (D.cuGetErrorString(r, &text) != ST_CU_SUCCESS || !text) text = "no description";
  return st_fail(r == ST_CU_ERROR_OUT_OF_MEMORY ? STALLOC_ERR_OUT_OF_MEMORY : STALLOC_ERR_BACKEND,
                 "cuda backend: %s failed: %s (%d): %s", what, name, r, text);
}

/* ---- state ---- */

typedef struct cu_ev { /* a recorded point in a stream, pooled */
  cu_event event;     /* NULL when cuEventCreate failed */
  cu_stream stream;
  bool completed;     /* known to be reached: no need to ask the driver */
  struct cu_ev* next; /* in the spare list */
} cu_ev;

enum { SPARE_EVENTS_MAX = 1024 };

typedef struct shifted { /* a cuMemAlloc result moved up to a larger alignment */
  cu_deviceptr ptr, base;
} shifted;

typedef struct reservation {
  cu_deviceptr base;
  uint64_t size;
  uint8_t* mapped; /* one flag per granule */
} reservation;

typedef struct cuda_state {
  int ordinal;
  cu_device device;
  cu_context ctx;
  bool retained; /* ctx is the primary context we retained */
  bool vmm;      /* reserve/map/unmap are available */
  uint64_t granularity;
  cu_mem_allocation_prop prop;
  cu_mem_access_desc access;
  cu_ev* spare_events;
  size_t spare_count;
  shifted* shifted;
  size_t shifted_count, shifted_cap;
  reservation* reservations;
  size_t reservation_count, reservation_cap;
  /* Between access_begin and access_end, access to new mappings is granted per contiguous run
   * (grant_access): a block mapped granule by granule (moved granules) would otherwise pay a
   * cuMemSetAccess per granule. On an H200 a call costs about 14 us plus 20 us per granule
   * (scripts/gpu/bench_vmm_calls.py), so a run saves the 14 us for all but one granule. */
  bool deferring;
  cu_deviceptr pend_at, pend_end; /* the run waiting for access; empty when equal */
  cu_result pend_error;           /* the first failed grant since access_begin */
} cuda_state;

/* Makes s->ctx current on this thread for the duration of an op; *pushed says whether it has
 * to be popped afterwards (the caller's own context is left as it was). */
static cu_result ctx_enter(const cuda_state* s, bool* pushed) {
  *pushed = false;
  cu_context cur = NULL;
  cu_result r = D.cuCtxGetCurrent(&cur);
  if (r != ST_CU_SUCCESS || cur == s->ctx) return r;
  r = D.cuCtxPushCurrent(s->ctx);
  *pushed = r == ST_CU_SUCCESS;
  return r;
}

static void ctx_leave(bool pushed) {
  cu_context popped;
  if (pushed) D.cuCtxPopCurrent(&popped);
}

#define ENTER(s, pushed, what)                                                        \
  do {                                                                                \
    cu_result enter_r_ = ctx_enter((s), &(pushed));                                   \
    if (enter_r_ != ST_CU_SUCCESS)                                                    \
      return fail_cu(enter_r_, "making device %d's context current for %s", (s)->ordinal, what); \
  } while (0)

/* ---- access to new mappings ---- */

/* Grants access to the pending run, if any; context current. */
static void flush_access(cuda_state* s) {
  if (s->pend_end == s->pend_at) return;
  cu_result r = D.cuMemSetAccess(s->pend_at, s->pend_end - s->pend_at, &s->access, 1);
  if (r != ST_CU_SUCCESS && s->pend_error == ST_CU_SUCCESS) s->pend_error = r;
  s->pend_at = s->pend_end = 0;
}

/* Gives the device access to a range just mapped, now or (deferring) with the run it extends;
 * a deferred grant's failure is reported by access_end. Context current. */
static cu_result grant_access(cuda_state* s, cu_deviceptr at, uint64_t size) {
  if (!s->deferring) return D.cuMemSetAccess(at, size, &s->access, 1);
  if (s->pend_end != s->pend_at && at == s->pend_end) {
    s->pend_end += size;
  } else if (s->pend_end != s->pend_at && at + size == s->pend_at) {
    s->pend_at = at;
  } else {
    flush_access(s);
    s->pend_at = at;
    s->pend_end = at + size;
  }
  return ST_CU_SUCCESS;
}

static void cuda_access_begin(void* state) {
  cuda_state* s = state;
  s->deferring = true;
  s->pend_at = s->pend_end = 0;
  s->pend_error = ST_CU_SUCCESS;
}

static stalloc_status_t cuda_access_end(void* state) {
  cuda_state* s = state;
  s->deferring = false;
  if (s->pend_end != s->pend_at) {
    bool pushed;
    cu_result enter_r = ctx_enter(s, &pushed);
    if (enter_r == ST_CU_SUCCESS) {
      flush_access(s);
      ctx_leave(pushed);
    } else if (s->pend_error == ST_CU_SUCCESS) {
      s->pend_error = enter_r;
    }
  }
  s->pend_at = s->pend_end = 0;
  cu_result r = s->pend_error;
  s->pend_error = ST_CU_SUCCESS;
  return r == ST_CU_SUCCESS ? STALLOC_OK : fail_cu(r, "cuMemSetAccess for memory mapped on device %d", s->ordinal);
}

/* ---- lifecycle ---- */

static void cuda_destroy(void* state);

static stalloc_status_t cuda_create(const stalloc_options_t* options, void** state, backend_caps* caps) {
  pthread_once(&load_once, load_driver);
  if (load_status != STALLOC_OK) return st_fail(load_status, "%s", load_message);

  cu_device device;
  cu_result r = D.cuDeviceGet(&device, options->device);
  if (r == ST_CU_ERROR_INVALID_DEVICE || r == ST_CU_ERROR_NO_DEVICE) {
    const char* name = NULL;
    if (D.cuGetErrorName(r, &name) != ST_CU_SUCCESS || !name) name = "unknown CUresult";
    return st_fail(STALLOC_ERR_NO_DEVICE, "cuda backend: there is no CUDA device %d (%s)", (int)options->device, name);
  }
  if (r != ST_CU_SUCCESS) return fail_cu(r, "cuDeviceGet(%d)", (int)options->device);

  cuda_state* s = calloc(1, sizeof *s);
  if (!s) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "cuda backend: no host memory");
  s->ordinal = options->device;
  s->device = device;

  cu_context cur = NULL;
  r = D.cuCtxGetCurrent(&cur);
  if (r != ST_CU_SUCCESS) {
    free(s);
    return fail_cu(r, "cuCtxGetCurrent");
  }
  cu_device cur_device;
  if (cur && D.cuCtxGetDevice(&cur_device) == ST_CU_SUCCESS && cur_device == device) s->ctx = cur;
  if (!s->ctx) {
    r = D.cuDevicePrimaryCtxRetain(&s->ctx, device);
    if (r != ST_CU_SUCCESS) {
      free(s);
      return fail_cu(r, "cuDevicePrimaryCtxRetain(device %d)", (int)options->device);
    }
    s->retained = true;
    /* A thread with no context gets the one the CUDA runtime would give it. */
    if (!cur && (r = D.cuCtxSetCurrent(s->ctx)) != ST_CU_SUCCESS) {
      cuda_destroy(s);
      return fail_cu(r, "cuCtxSetCurrent(primary context of device %d)", (int)options->device);
    }
  }

  s->granularity = 2ull << 20; /* what cuMemAlloc rounds large requests to */
  s->prop.type = ST_CU_MEM_ALLOCATION_TYPE_PINNED;
  s->prop.requested_handle_types = ST_CU_MEM_HANDLE_TYPE_NONE;
  s->prop.location.type = ST_CU_MEM_LOCATION_TYPE_DEVICE;
  s->prop.location.id = device;
  s->access.location = s->prop.location;
  s->access.flags = ST_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  int vmm = 0;
  size_t granularity = 0;
  if (D.has_vmm_api &&
      D.cuDeviceGetAttribute(&vmm, ST_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) == ST_CU_SUCCESS &&
      vmm &&
      D.cuMemGetAllocationGranularity(&granularity, &s->prop, ST_CU_MEM_ALLOC_GRANULARITY_MINIMUM) == ST_CU_SUCCESS &&
      st_is_pow2(granularity)) {
    s->vmm = true;
    s->granularity = granularity;
  }
  *state = s;
  *caps = (backend_caps){.granularity = s->granularity, .device_accessible = true, .can_grow = s->vmm};
  return STALLOC_OK;
}

static void unmap_granules(cuda_state* s, reservation* res, uint64_t first, uint64_t count, bool wait);

static void cuda_destroy(void* state) {
  cuda_state* s = state;
  bool pushed = false;
  if (ctx_enter(s, &pushed) == ST_CU_SUCCESS) {
    for (size_t i = 0; i < s->reservation_count; i++) {
      reservation* res = &s->reservations[i];
      unmap_granules(s, res, 0, res->size / s->granularity, true);
      D.cuMemAddressFree(res->base, res->size);
    }
    for (size_t i = 0; i < s->shifted_count; i++) D.cuMemFree(s->shifted[i].base);
    for (cu_ev *e = s->spare_events, *next; e; e = next) {
      next = e->next;
      D.cuEventDestroy(e->event);
      free(e);
    }
    ctx_leave(pushed);
  }
  if (s->retained) D.cuDevicePrimaryCtxRelease(s->device);
  for (size_t i = 0; i < s->reservation_count; i++) free(s->reservations[i].mapped);
  free(s->reservations);
  free(s->shifted);
  free(s);
}

/* ---- segments ---- */

/* A failed cuMemAlloc; out of memory says how much the device had left. */
static stalloc_status_t alloc_failed(cuda_state* s, cu_result r, uint64_t size) {
  size_t free_bytes = 0, total_bytes = 0;
  if (r != ST_CU_ERROR_OUT_OF_MEMORY || D.cuMemGetInfo(&free_bytes, &total_bytes) != ST_CU_SUCCESS)
    return fail_cu(r, "cuMemAlloc_v2(%llu bytes) on device %d", (unsigned long long)size, s->ordinal);
  return fail_cu(r, "cuMemAlloc_v2(%llu bytes) on device %d with %zu of %zu bytes free",
                 (unsigned long long)size, s->ordinal, free_bytes, total_bytes);
}

static stalloc_status_t cuda_alloc(void* state, uint64_t size, uint64_t alignment, uint64_t stream,
                                   void** ptr) {
  (void)stream;
  cuda_state* s = state;
  if (size > SIZE_MAX - alignment)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "cuda backend: %llu bytes is too large", (unsigned long long)size);
  void* grown = st_room(s->shifted, s->shifted_count, &s->shifted_cap, sizeof *s->shifted, 8);
  if (!grown) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "cuda backend: no host memory");
  s->shifted = grown;
  bool pushed;
  ENTER(s, pushed, "cuMemAlloc_v2");
  cu_deviceptr p = 0;
  cu_result r = D.cuMemAlloc(&p, size);
  stalloc_status_t st = STALLOC_OK;
  if (r != ST_CU_SUCCESS) {
    st = alloc_failed(s, r, size);
  } else if (alignment > 1 && p % alignment) {
    /* cuMemAlloc promises 256 bytes (and gives 2 MiB for big sizes); for a larger alignment
     * take alignment - 1 bytes more and hand out the aligned address inside. */
    D.cuMemFree(p);
    cu_deviceptr base = 0;
    r = D.cuMemAlloc(&base, size + alignment - 1);
    if (r != ST_CU_SUCCESS) {
      st = alloc_failed(s, r, size + alignment - 1);
    } else {
      p = (base + alignment - 1) & ~(cu_deviceptr)(alignment - 1);
      s->shifted[s->shifted_count++] = (shifted){p, base};
    }
  }
  ctx_leave(pushed);
  if (st == STALLOC_OK) *ptr = (void*)(uintptr_t)p;
  return st;
}

static stalloc_status_t cuda_free(void* state, void* ptr, uint64_t size) {
  (void)size;
  cuda_state* s = state;
  cu_deviceptr base = (cu_deviceptr)(uintptr_t)ptr;
  size_t shifted_at = s->shifted_count;
  for (size_t i = 0; i < s->shifted_count; i++)
    if (s->shifted[i].ptr == base) {
      base = s->shifted[i].base;
      shifted_at = i;
      break;
    }
  bool pushed;
  ENTER(s, pushed, "cuMemFree_v2");
  cu_result r = D.cuMemFree(base);
  ctx_leave(pushed);
  if (r != ST_CU_SUCCESS) return fail_cu(r, "cuMemFree_v2(%p)", ptr);
  if (shifted_at < s->shifted_count) s->shifted[shifted_at] = s->shifted[--s->shifted_count];
  return STALLOC_OK;
}

/* ---- growable ranges ---- */

static stalloc_status_t need_vmm(const cuda_state* s, const char* op) {
  if (s->vmm) return STALLOC_OK;
  return st_fail(STALLOC_ERR_UNSUPPORTED,
                 "cuda backend: %s needs the virtual memory management API, which device %d or its driver lacks (caps.can_grow is false)",
                 op, s->ordinal);
}

/* The reservation holding [at, at + size) with both ends on granule boundaries, or NULL after
 * reporting why not. */
static reservation* find_range(cuda_state* s, const char* op, void* at, uint64_t size) {
  cu_deviceptr p = (cu_deviceptr)(uintptr_t)at;
  if (!size || p % s->granularity || size % s->granularity) {
    st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: %s(%p, %llu): address and size must be non-zero multiples of the %llu-byte granularity",
            op, at, (unsigned long long)size, (unsigned long long)s->granularity);
    return NULL;
  }
  for (size_t i = 0; i < s->reservation_count; i++) {
    reservation* res = &s->reservations[i];
    if (p >= res->base && p - res->base <= res->size && size <= res->size - (p - res->base)) return res;
  }
  st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: %s(%p, %llu): the range is not inside one reserved range", op, at,
          (unsigned long long)size);
  return NULL;
}

static stalloc_status_t cuda_reserve(void* state, uint64_t size, void** base) {
  cuda_state* s = state;
  stalloc_status_t st = need_vmm(s, "reserve");
  if (st) return st;
  if (!size || size % s->granularity)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: reserve(%llu): size must be a non-zero multiple of the %llu-byte granularity",
                   (unsigned long long)size, (unsigned long long)s->granularity);
  void* grown = st_room(s->reservations, s->reservation_count, &s->reservation_cap, sizeof *s->reservations, 8);
  if (!grown) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "cuda backend: no host memory");
  s->reservations = grown;
  uint8_t* mapped = calloc(size / s->granularity, 1);
  if (!mapped) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "cuda backend: no host memory");
  bool pushed;
  cu_result r = ctx_enter(s, &pushed);
  cu_deviceptr p = 0;
  if (r == ST_CU_SUCCESS) {
    r = D.cuMemAddressReserve(&p, size, s->granularity, 0, 0);
    ctx_leave(pushed);
  }
  if (r != ST_CU_SUCCESS) {
    free(mapped);
    return fail_cu(r, "cuMemAddressReserve(%llu bytes)", (unsigned long long)size);
  }
  s->reservations[s->reservation_count++] = (reservation){p, size, mapped};
  *base = (void*)(uintptr_t)p;
  return STALLOC_OK;
}

/* Unmaps the mapped granules among [first, first + count) of res; context current. Queued work
 * may still read them and cuMemUnmap does not wait for it (unlike cuMemFree), so wait first
 * unless the caller knows none does. */
static void unmap_granules(cuda_state* s, reservation* res, uint64_t first, uint64_t count, bool wait) {
  bool any = false;
  for (uint64_t g = first; g < first + count && !any; g++) any = res->mapped[g];
  if (!any) return;
  cu_deviceptr lo = res->base + first * s->granularity, hi = lo + count * s->granularity;
  if (s->deferring && s->pend_at < hi && lo < s->pend_end) flush_access(s); /* while all mapped */
  if (wait) D.cuCtxSynchronize();
  for (uint64_t g = first; g < first + count; g++) {
    if (!res->mapped[g]) continue;
    D.cuMemUnmap(res->base + g * s->granularity, s->granularity);
    res->mapped[g] = 0;
  }
}

static stalloc_status_t cuda_release(void* state, void* base, uint64_t size) {
  cuda_state* s = state;
  stalloc_status_t st = need_vmm(s, "release");
  if (st) return st;
  size_t i = 0;
  while (i < s->reservation_count &&
         !(s->reservations[i].base == (cu_deviceptr)(uintptr_t)base && s->reservations[i].size == size))
    i++;
  if (i == s->reservation_count)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: release(%p, %llu): not a range reserve returned", base,
                   (unsigned long long)size);
  reservation* res = &s->reservations[i];
  bool pushed;
  ENTER(s, pushed, "release");
  unmap_granules(s, res, 0, size / s->granularity, true); /* whatever the caller left mapped */
  cu_result r = D.cuMemAddressFree(res->base, res->size);
  ctx_leave(pushed);
  free(res->mapped);
  s->reservations[i] = s->reservations[--s->reservation_count];
  if (r != ST_CU_SUCCESS) return fail_cu(r, "cuMemAddressFree(%p, %llu)", base, (unsigned long long)size);
  return STALLOC_OK;
}

/* Maps one granule at g, with its own physical allocation so it can be unmapped alone. */
static cu_result map_granule(cuda_state* s, reservation* res, uint64_t g, const char** call) {
  cu_mem_handle h;
  *call = "cuMemCreate";
  cu_result r = D.cuMemCreate(&h, s->granularity, &s->prop, 0);
  if (r != ST_CU_SUCCESS) return r;
  *call = "cuMemMap";
  r = D.cuMemMap(res->base + g * s->granularity, s->granularity, 0, h, 0);
  /* The mapping holds the memory from here on; our handle is not needed either way. */
  D.cuMemRelease(h);
  if (r == ST_CU_SUCCESS) res->mapped[g] = 1;
  return r;
}

static stalloc_status_t cuda_map(void* state, void* at, uint64_t size) {
  cuda_state* s = state;
  stalloc_status_t st = need_vmm(s, "map");
  if (st) return st;
  reservation* res = find_range(s, "map", at, size);
  if (!res) return STALLOC_ERR_INVALID_ARGUMENT;
  uint64_t first = ((cu_deviceptr)(uintptr_t)at - res->base) / s->granularity, count = size / s->granularity;
  for (uint64_t g = first; g < first + count; g++)
    if (res->mapped[g])
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: map(%p, %llu): granule at %p is already mapped", at,
                     (unsigned long long)size, (void*)(uintptr_t)(res->base + g * s->granularity));
  bool pushed;
  ENTER(s, pushed, "map");
  cu_result r = ST_CU_SUCCESS;
  const char* call = "";
  for (uint64_t g = first; g < first + count && r == ST_CU_SUCCESS; g++) r = map_granule(s, res, g, &call);
  if (r == ST_CU_SUCCESS) {
    call = "cuMemSetAccess";
    r = grant_access(s, (cu_deviceptr)(uintptr_t)at, size);
  }
  if (r != ST_CU_SUCCESS) unmap_granules(s, res, first, count, false); /* all or nothing: never used */
  ctx_leave(pushed);
  if (r != ST_CU_SUCCESS)
    return fail_cu(r, "%s while mapping %llu bytes at %p on device %d", call, (unsigned long long)size, at, s->ordinal);
  return STALLOC_OK;
}

static stalloc_status_t unmap_range(void* state, void* at, uint64_t size, bool wait) {
  cuda_state* s = state;
  stalloc_status_t st = need_vmm(s, "unmap");
  if (st) return st;
  reservation* res = find_range(s, "unmap", at, size);
  if (!res) return STALLOC_ERR_INVALID_ARGUMENT;
  uint64_t first = ((cu_deviceptr)(uintptr_t)at - res->base) / s->granularity, count = size / s->granularity;
  for (uint64_t g = first; g < first + count; g++)
    if (!res->mapped[g])
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: unmap(%p, %llu): granule at %p is not mapped", at,
                     (unsigned long long)size, (void*)(uintptr_t)(res->base + g * s->granularity));
  bool pushed;
  ENTER(s, pushed, "unmap");
  unmap_granules(s, res, first, count, wait);
  ctx_leave(pushed);
  return STALLOC_OK;
}

static stalloc_status_t cuda_unmap(void* state, void* at, uint64_t size) { return unmap_range(state, at, size, true); }

static stalloc_status_t cuda_unmap_unused(void* state, void* at, uint64_t size) {
  return unmap_range(state, at, size, false);
}

/* One granule's memory from `from` to `to`, context current: the same physical allocation,
 * mapped at its new address (cuMemRetainAllocationHandle, cuMemMap, cuMemSetAccess), so no
 * cuMemCreate or cuMemRelease of memory. `keep`: `from` stays mapped too (an alias), else it is
 * unmapped first. On failure the caller unmaps what is left. */
static stalloc_status_t map_again(cuda_state* s, reservation* fres, uint64_t f, reservation* tres, uint64_t t,
                                  bool keep) {
  cu_deviceptr from = fres->base + f * s->granularity, to = tres->base + t * s->granularity;
  cu_mem_handle h;
  const char* call = "cuMemRetainAllocationHandle";
  cu_result r = D.cuMemRetainAllocationHandle(&h, (void*)(uintptr_t)from);
  if (r != ST_CU_SUCCESS) return fail_cu(r, "%s(%p)", call, (void*)(uintptr_t)from);
  r = keep ? ST_CU_SUCCESS : D.cuMemUnmap(from, s->granularity);
  if (r == ST_CU_SUCCESS) {
    if (!keep) fres->mapped[f] = 0;
    call = "cuMemMap";
    r = D.cuMemMap(to, s->granularity, 0, h, 0);
  } else {
    call = "cuMemUnmap";
  }
  D.cuMemRelease(h); /* the mappings hold the memory from here on, or nothing does */
  if (r != ST_CU_SUCCESS)
    return fail_cu(r, "%s while mapping a granule of %p at %p", call, (void*)(uintptr_t)from, (void*)(uintptr_t)to);
  tres->mapped[t] = 1;
  r = grant_access(s, to, s->granularity);
  if (r != ST_CU_SUCCESS) return fail_cu(r, "cuMemSetAccess while mapping a granule at %p", (void*)(uintptr_t)to);
  return STALLOC_OK;
}

/* move (keep false) and alias (keep true): [from, from + size) is mapped, [to, to + size) not. */
static stalloc_status_t remap(void* state, void* from, void* to, uint64_t size, bool keep) {
  const char* what = keep ? "alias" : "move";
  cuda_state* s = state;
  stalloc_status_t st = need_vmm(s, what);
  if (st) return st;
  if (!D.cuMemRetainAllocationHandle)
    return st_fail(STALLOC_ERR_UNSUPPORTED, "cuda backend: this driver lacks cuMemRetainAllocationHandle");
  reservation* fres = find_range(s, what, from, size);
  reservation* tres = fres ? find_range(s, what, to, size) : NULL;
  if (!tres) return STALLOC_ERR_INVALID_ARGUMENT;
  uint64_t f0 = ((cu_deviceptr)(uintptr_t)from - fres->base) / s->granularity;
  uint64_t t0 = ((cu_deviceptr)(uintptr_t)to - tres->base) / s->granularity, count = size / s->granularity;
  for (uint64_t k = 0; k < count; k++)
    if (!fres->mapped[f0 + k] || tres->mapped[t0 + k])
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "cuda backend: %s(%p, %p, %llu): the source must be mapped and the target not",
                     what, from, to, (unsigned long long)size);
  bool pushed;
  ENTER(s, pushed, what);
  for (uint64_t k = 0; k < count && !st; k++) st = map_again(s, fres, f0 + k, tres, t0 + k, keep);
  if (st) { /* all or nothing: what was mapped at the target goes; a move's source goes too */
    unmap_granules(s, tres, t0, count, false);
    if (!keep) unmap_granules(s, fres, f0, count, false);
  }
  ctx_leave(pushed);
  return st;
}

static stalloc_status_t cuda_move(void* state, void* from, void* to, uint64_t size) {
  return remap(state, from, to, size, false);
}

/* The source's queued work belongs to the stream that will use the target next (the arena's
 * rule), so it runs before any work there; the source is unmapped once it is done. */
static stalloc_status_t cuda_alias(void* state, void* from, void* to, uint64_t size) {
  return remap(state, from, to, size, true);
}

/* ---- stream order ---- */

static void cuda_event_destroy(void* state, void* event);

static stalloc_status_t cuda_event_record(void* state, uint64_t stream, void** event) {
  cuda_state* s = state;
  cu_stream cs = (cu_stream)(uintptr_t)stream;
  bool pushed;
  ENTER(s, pushed, "cuEventRecord");
  cu_ev* e = s->spare_events;
  if (e) {
    s->spare_events = e->next;
    s->spare_count--;
  } else if ((e = calloc(1, sizeof *e)) == NULL) {
    D.cuStreamSynchronize(cs); /* whoever treats the block as free is then right */
    ctx_leave(pushed);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "cuda backend: no host memory for an event");
  }
  const char* call = "cuEventCreate";
  cu_result r = ST_CU_SUCCESS;
  if (!e->event && (r = D.cuEventCreate(&e->event, ST_CU_EVENT_DISABLE_TIMING)) != ST_CU_SUCCESS) e->event = NULL;
  if (r == ST_CU_SUCCESS) {
    call = "cuEventRecord";
    r = D.cuEventRecord(e->event, cs);
  }
  e->stream = cs;
  e->completed = false;
  if (r != ST_CU_SUCCESS) {
    /* No event to order the block by: wait for the stream now and hand out a point that is
     * already reached, so every stream may reuse the block and none too early. */
    cu_result sync = D.cuStreamSynchronize(cs);
    if (sync != ST_CU_SUCCESS) {
      ctx_leave(pushed);
      cuda_event_destroy(s, e);
      return fail_cu(r, "%s on stream %p (and waiting for the stream failed too)", call, (void*)cs);
    }
    e->completed = true;
  }
  ctx_leave(pushed);
  *event = e;
  return STALLOC_OK;
}

static bool cuda_event_done(void* state, void* event) {
  cuda_state* s = state;
  cu_ev* e = event;
  if (e->completed) return true;
  bool pushed;
  if (ctx_enter(s, &pushed) != ST_CU_SUCCESS) return false; /* cannot tell: never too early */
  cu_result r = D.cuEventQuery(e->event);
  bool done = r == ST_CU_SUCCESS;
  if (r != ST_CU_SUCCESS && r != ST_CU_ERROR_NOT_READY) {
    /* An error (often a fault left by an earlier kernel) says nothing about the work before the
     * event: wait for it. If even waiting fails the context is dead and runs no more work. */
    if (D.cuEventSynchronize(e->event) != ST_CU_SUCCESS && D.cuStreamSynchronize(e->stream) != ST_CU_SUCCESS)
      D.cuCtxSynchronize();
    done = true;
  }
  ctx_leave(pushed);
  if (done) e->completed = true; /* later queries need no driver call */
  return done;
}

static void cuda_event_wait(void* state, void* event) {
  cuda_state* s = state;
  cu_ev* e = event;
  if (e->completed) return;
  bool pushed;
  if (ctx_enter(s, &pushed) != ST_CU_SUCCESS) return;
  if (D.cuEventSynchronize(e->event) != ST_CU_SUCCESS && D.cuStreamSynchronize(e->stream) != ST_CU_SUCCESS)
    D.cuCtxSynchronize();
  ctx_leave(pushed);
  e->completed = true;
}

static void cuda_event_destroy(void* state, void* event) {
  cuda_state* s = state;
  cu_ev* e = event;
  if (!e->event) {
    free(e);
    return;
  }
  if (s->spare_count < SPARE_EVENTS_MAX) {
    /* Re-recording an event, even one still pending, is allowed: keep it for the next free. */
    e->next = s->spare_events;
    s->spare_events = e;
    s->spare_count++;
    return;
  }
  bool pushed;
  if (ctx_enter(s, &pushed) == ST_CU_SUCCESS) {
    D.cuEventDestroy(e->event);
    ctx_leave(pushed);
  }
  free(e);
}

static stalloc_status_t cuda_total_memory(void* state, uint64_t* total) {
  cuda_state* s = state;
  bool pushed;
  ENTER(s, pushed, "cuMemGetInfo_v2");
  size_t free_bytes = 0, total_bytes = 0;
  cu_result r = D.cuMemGetInfo(&free_bytes, &total_bytes);
  ctx_leave(pushed);
  if (r != ST_CU_SUCCESS) return fail_cu(r, "cuMemGetInfo_v2 on device %d", s->ordinal);
  *total = total_bytes;
  return STALLOC_OK;
}

const backend_ops st_backend_cuda = {
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .reserve = cuda_reserve,
    .release = cuda_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .unmap_unused = cuda_unmap_unused,
    .move = cuda_move,
    .alias = cuda_alias,
    .access_begin = cuda_access_begin,
    .access_end = cuda_access_end,
    .event_record = cuda_event_record,
    .event_done = cuda_event_done,
    .event_destroy = cuda_event_destroy,
    .event_wait = cuda_event_wait,
    .total_memory = cuda_total_memory,
};
