/* test_backend_cuda.c - the cuda backend without a GPU: no driver, a library that is not a
 * driver, and the whole backend logic through the public allocator API over a mock driver
 * (tests/c/mock_cuda_driver.c): contexts and devices, OOM, driver errors with their messages,
 * stream-ordered reuse with events that complete when the test says so, record_stream's
 * held-back frees, the device's total memory, the growable path on and off. The driver is loaded once per process, so each case runs in a forked child.
 * Where a real cuda.h is found at build time, cuda_driver.h's layouts are checked against it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"
#include "check.h"
#include "backends/cuda_driver.h"

#if defined(STALLOC_HAVE_CUDA_H)
#include <cuda.h>
/* The ABI stalloc assumes, checked against the toolkit's header. */
_Static_assert(sizeof(cu_mem_allocation_prop) == sizeof(CUmemAllocationProp), "CUmemAllocationProp size");
_Static_assert(offsetof(cu_mem_allocation_prop, location) == offsetof(CUmemAllocationProp, location), "location");
_Static_assert(offsetof(cu_mem_allocation_prop, win32_handle_meta_data) ==
                   offsetof(CUmemAllocationProp, win32HandleMetaData), "win32HandleMetaData");
_Static_assert(offsetof(cu_mem_allocation_prop, alloc_flags) == offsetof(CUmemAllocationProp, allocFlags), "allocFlags");
_Static_assert(sizeof(cu_mem_access_desc) == sizeof(CUmemAccessDesc), "CUmemAccessDesc size");
_Static_assert(offsetof(cu_mem_access_desc, flags) == offsetof(CUmemAccessDesc, flags), "flags");
_Static_assert(sizeof(cu_deviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
_Static_assert(sizeof(cu_mem_handle) == sizeof(CUmemGenericAllocationHandle), "handle");
_Static_assert(sizeof(cu_device) == sizeof(CUdevice), "CUdevice");
_Static_assert(ST_CU_ERROR_OUT_OF_MEMORY == CUDA_ERROR_OUT_OF_MEMORY, "OOM");
_Static_assert(ST_CU_ERROR_NOT_READY == CUDA_ERROR_NOT_READY, "NOT_READY");
_Static_assert(ST_CU_ERROR_NO_DEVICE == CUDA_ERROR_NO_DEVICE, "NO_DEVICE");
_Static_assert(ST_CU_ERROR_INVALID_DEVICE == CUDA_ERROR_INVALID_DEVICE, "INVALID_DEVICE");
_Static_assert(ST_CU_ERROR_STUB_LIBRARY == CUDA_ERROR_STUB_LIBRARY, "STUB_LIBRARY");
_Static_assert(ST_CU_ERROR_DEVICE_UNAVAILABLE == CUDA_ERROR_DEVICE_UNAVAILABLE, "DEVICE_UNAVAILABLE");
_Static_assert(ST_CU_ERROR_SYSTEM_DRIVER_MISMATCH == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "DRIVER_MISMATCH");
_Static_assert(ST_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "COMPAT");
_Static_assert(ST_CU_ERROR_INVALID_CONTEXT == CUDA_ERROR_INVALID_CONTEXT, "INVALID_CONTEXT");
_Static_assert(ST_CU_ERROR_ILLEGAL_ADDRESS == CUDA_ERROR_ILLEGAL_ADDRESS, "ILLEGAL_ADDRESS");
_Static_assert(ST_CU_ERROR_UNKNOWN == CUDA_ERROR_UNKNOWN, "UNKNOWN");
_Static_assert(ST_CU_EVENT_DISABLE_TIMING == CU_EVENT_DISABLE_TIMING, "DISABLE_TIMING");
_Static_assert(ST_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ==
                   CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "VMM attribute");
_Static_assert(ST_CU_MEM_ALLOCATION_TYPE_PINNED == CU_MEM_ALLOCATION_TYPE_PINNED, "PINNED");
_Static_assert(ST_CU_MEM_LOCATION_TYPE_DEVICE == CU_MEM_LOCATION_TYPE_DEVICE, "DEVICE");
_Static_assert(ST_CU_MEM_ACCESS_FLAGS_PROT_READWRITE == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "READWRITE");
_Static_assert(ST_CU_MEM_ALLOC_GRANULARITY_MINIMUM == CU_MEM_ALLOC_GRANULARITY_MINIMUM, "MINIMUM");
#endif

#ifndef MOCK_CUDA_PATH
#define MOCK_CUDA_PATH ""
#endif
#ifndef MOCK_CUDA_NOVMM_PATH
#define MOCK_CUDA_NOVMM_PATH ""
#endif

static const uint64_t MiB = 1ull << 20;

/* ---- the mock's switches, reached with dlsym on the same loaded library ---- */

static void* mock;
static void (*mock_set_vmm)(int);
static void (*mock_set_capacity)(unsigned long long);
static void (*mock_set_misalign)(int);
static void (*mock_set_init_error)(int);
static void (*mock_fail)(const char*, int, int);
static void (*mock_launch)(void*);
static void (*mock_finish)(void*);
static long long (*mock_pending)(void*);
static int (*mock_device_of)(unsigned long long);
static void* (*mock_primary)(int);
static long long (*mock_stat)(const char*);
static int (*mock_ctx_get)(void**);
static int (*mock_ctx_set)(void*);
static int (*mock_retain)(void**, int);
static int (*mock_init)(unsigned);

static const char* mock_path(const char* env, const char* built) {
  const char* p = getenv(env);
  return p && *p ? p : built;
}

#define BIND(var, sym)                                    \
  do {                                                    \
    *(void**)&(var) = dlsym(mock, sym);                   \
    CHECK((var) != NULL);                                 \
  } while (0)

/* Loads the mock (before stalloc does, so its switches can be set) and points stalloc at it. */
static void use_mock(const char* path) {
  CHECK(path && *path);
  mock = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!mock) fprintf(stderr, "cannot load the mock driver %s: %s\n", path, dlerror());
  CHECK(mock != NULL);
  BIND(mock_set_vmm, "mockcu_set_vmm");
  BIND(mock_set_capacity, "mockcu_set_capacity");
  BIND(mock_set_misalign, "mockcu_set_misalign");
  BIND(mock_set_init_error, "mockcu_set_init_error");
  BIND(mock_fail, "mockcu_fail");
  BIND(mock_launch, "mockcu_launch");
  BIND(mock_finish, "mockcu_finish");
  BIND(mock_pending, "mockcu_pending");
  BIND(mock_device_of, "mockcu_device_of");
  BIND(mock_primary, "mockcu_primary");
  BIND(mock_stat, "mockcu_stat");
  BIND(mock_ctx_get, "cuCtxGetCurrent");
  BIND(mock_ctx_set, "cuCtxSetCurrent");
  BIND(mock_retain, "cuDevicePrimaryCtxRetain");
  BIND(mock_init, "cuInit");
  setenv("STALLOC_CUDA_DRIVER", path, 1);
}

static void use_default_mock(void) { use_mock(mock_path("STALLOC_TEST_MOCK_CUDA", MOCK_CUDA_PATH)); }

static stalloc_status_t try_make(int32_t device, uint64_t alignment, uint64_t limit, stalloc_allocator_t** a) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_CUDA;
  o.growable_pool = 0; /* these cases check segments from cuMemAlloc; case_arena checks the other path */
  o.device = device;
  if (alignment) o.alignment = alignment;
  o.memory_limit = limit;
  return stalloc_allocator_create(&o, a);
}

static stalloc_allocator_t* make(int32_t device, uint64_t alignment, uint64_t limit) {
  stalloc_allocator_t* a = NULL;
  CHECK_OK(try_make(device, alignment, limit, &a));
  return a;
}

static bool contains(const char* text, const char* part) {
  if (!strstr(text, part)) {
    fprintf(stderr, "message \"%s\" lacks \"%s\"\n", text, part);
    return false;
  }
  return true;
}

/* Everything the mock handed out is back. */
static void check_all_returned(void) {
  CHECK(mock_stat("device_bytes") == 0);
  CHECK(mock_stat("allocs_live") == 0);
  CHECK(mock_stat("handles_live") == 0);
  CHECK(mock_stat("mappings_live") == 0);
  CHECK(mock_stat("reservations_live") == 0);
  CHECK(mock_stat("events_live") == 0);
  CHECK(mock_stat("context_errors") == 0);
}

/* ---- no driver ---- */

static void case_missing_driver(void) {
  setenv("STALLOC_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  stalloc_allocator_t* a = (stalloc_allocator_t*)1;
  CHECK_STATUS(try_make(0, 0, 0, &a), STALLOC_ERR_NO_DEVICE);
  CHECK(a == NULL);
  CHECK(contains(stalloc_last_error(), "no CUDA driver"));
  CHECK(contains(stalloc_last_error(), "/nonexistent/libcuda.so.1"));
  CHECK(contains(stalloc_last_error(), "STALLOC_CUDA_DRIVER"));
  CHECK_STATUS(try_make(0, 0, 0, &a), STALLOC_ERR_NO_DEVICE); /* the same answer again */
  /* Nothing else in the library is affected. */
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_HOST;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  void* p;
  CHECK_OK(stalloc_allocator_alloc(a, 1000, 0, 0, &p));
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void case_default_driver(void) {
  unsetenv("STALLOC_CUDA_DRIVER");
  void* real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  stalloc_allocator_t* a = NULL;
  stalloc_status_t s = try_make(0, 0, 0, &a);
  if (real) { /* a machine with a driver: a GPU works, a driver without one says so */
    fprintf(stderr, "  (libcuda.so.1 present: create gave %s: %s)\n", stalloc_status_string(s), stalloc_last_error());
    CHECK(s == STALLOC_OK || s == STALLOC_ERR_NO_DEVICE);
    if (!a) return;
    /* A GPU: the same paths on the real driver (its memory is not host-readable, so statuses
     * only; scripts/gpu/check_cuda_backend.py checks the bytes). */
    void* p[3];
    for (int i = 0; i < 3; i++) CHECK_OK(stalloc_allocator_alloc(a, (size_t)(i + 1) * 5 * MiB, 0, 0, &p[i]));
    for (int i = 0; i < 3; i++) CHECK_OK(stalloc_allocator_free(a, p[i]));
    CHECK_OK(stalloc_allocator_release_cached(a));
    CHECK_OK(stalloc_allocator_destroy(a));
    backend_caps caps;
    stalloc_options_t o;
    stalloc_options_init(&o);
    void* b;
    CHECK_OK(st_backend_cuda.create(&o, &b, &caps));
    fprintf(stderr, "  (real driver: granularity %llu, can_grow %d)\n", (unsigned long long)caps.granularity, caps.can_grow);
    if (caps.can_grow) {
      void* base;
      CHECK_OK(st_backend_cuda.reserve(b, 64 * caps.granularity, &base));
      CHECK_OK(st_backend_cuda.map(b, base, 8 * caps.granularity));
      CHECK_OK(st_backend_cuda.unmap(b, (char*)base + 4 * caps.granularity, 4 * caps.granularity));
      CHECK_OK(st_backend_cuda.release(b, base, 64 * caps.granularity));
    }
    void* ev;
    CHECK_OK(st_backend_cuda.event_record(b, 0, &ev));
    while (!st_backend_cuda.event_done(b, ev)) usleep(100);
    st_backend_cuda.event_destroy(b, ev);
    st_backend_cuda.destroy(b);
    return;
  }
  CHECK(s == STALLOC_ERR_NO_DEVICE);
  CHECK(contains(stalloc_last_error(), "libcuda.so.1"));
}

static void case_not_a_driver(void) {
  setenv("STALLOC_CUDA_DRIVER", "libc.so.6", 1);
  stalloc_allocator_t* a = NULL;
  CHECK_STATUS(try_make(0, 0, 0, &a), STALLOC_ERR_NO_DEVICE);
  CHECK(contains(stalloc_last_error(), "lacks cuInit"));
}

static void case_init_no_device(void) {
  use_default_mock();
  mock_set_init_error(ST_CU_ERROR_NO_DEVICE);
  stalloc_allocator_t* a = NULL;
  CHECK_STATUS(try_make(0, 0, 0, &a), STALLOC_ERR_NO_DEVICE);
  CHECK(contains(stalloc_last_error(), "cuInit"));
  CHECK(contains(stalloc_last_error(), "CUDA_ERROR_NO_DEVICE"));
}

static void case_init_error(void) {
  use_default_mock();
  mock_set_init_error(ST_CU_ERROR_UNKNOWN);
  stalloc_allocator_t* a = NULL;
  CHECK_STATUS(try_make(0, 0, 0, &a), STALLOC_ERR_BACKEND);
  CHECK(contains(stalloc_last_error(), "CUDA_ERROR_UNKNOWN"));
  CHECK(contains(stalloc_last_error(), "unknown error"));
}

static void case_invalid_device(void) {
  use_default_mock();
  stalloc_allocator_t* a = NULL;
  CHECK_STATUS(try_make(5, 0, 0, &a), STALLOC_ERR_NO_DEVICE);
  CHECK(contains(stalloc_last_error(), "no CUDA device 5"));
  CHECK(mock_stat("primary_refs0") == 0);
}

/* ---- the allocator over the mock ---- */

static void case_alloc_free_stats(void) {
  use_default_mock();
  void* cur = NULL;
  mock_ctx_get(&cur);
  CHECK(cur == NULL);
  stalloc_allocator_t* a = make(0, 0, 0);
  /* No context was current: the backend made device 0's primary context current, as cudart. */
  mock_ctx_get(&cur);
  CHECK(cur == mock_primary(0));
  CHECK(mock_stat("primary_refs0") == 1);

  enum { N = 64 };
  void* ptrs[N];
  size_t sizes[N];
  uint64_t requested = 0;
  for (int i = 0; i < N; i++) {
    sizes[i] = 1 + (size_t)(i * 104729) % (3 * MiB);
    CHECK_OK(stalloc_allocator_alloc(a, sizes[i], 0, 0, &ptrs[i]));
    CHECK(ptrs[i] && (uintptr_t)ptrs[i] % 512 == 0);
    CHECK(mock_device_of((uintptr_t)ptrs[i]) == 0);
    memset(ptrs[i], i, sizes[i]); /* the mock's device memory is host memory */
    requested += sizes[i];
  }
  for (int i = 0; i < N; i++) {
    const unsigned char* p = ptrs[i];
    CHECK(p[0] == i && p[sizes[i] - 1] == i);
  }
  stalloc_stats_t s = stats_of(a);
  CHECK(s.allocated_bytes == requested && s.active_blocks == N);
  CHECK(s.reserved_bytes % (2 * MiB) == 0 && s.reserved_bytes >= requested);
  CHECK((long long)s.reserved_bytes == mock_stat("device_bytes"));
  CHECK((long long)s.segment_count == mock_stat("allocs_live"));
  for (int i = 0; i < N; i++) CHECK_OK(stalloc_allocator_free(a, ptrs[i]));
  s = stats_of(a);
  CHECK(s.allocated_bytes == 0 && s.free_count == N);
  CHECK(s.reserved_bytes > 0); /* cached */
  CHECK_OK(stalloc_allocator_release_cached(a));
  CHECK(stats_of(a).reserved_bytes == 0 && mock_stat("device_bytes") == 0);
  CHECK(mock_stat("timing_events") == 0);
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
  CHECK(mock_stat("primary_refs0") == 0);
}

static void case_out_of_memory(void) {
  use_default_mock();
  mock_set_capacity(64 * MiB);
  stalloc_allocator_t* a = make(0, 0, 0);
  void* p = (void*)1;
  CHECK_STATUS(stalloc_allocator_alloc(a, 100 * MiB, 0, 0, &p), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(p == NULL);
  CHECK(contains(stalloc_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK(contains(stalloc_last_error(), "cuMemAlloc_v2"));
  CHECK(contains(stalloc_last_error(), "bytes free"));
  /* Fill the device, then fail cleanly again; everything allocated stays usable. */
  void* held[8];
  int n = 0;
  stalloc_status_t st;
  while (n < 8 && (st = stalloc_allocator_alloc(a, 20 * MiB, 0, 0, &held[n])) == STALLOC_OK) n++;
  CHECK(n == 3 && st == STALLOC_ERR_OUT_OF_MEMORY);
  stalloc_stats_t s = stats_of(a);
  CHECK(s.failed_allocs == 2 && s.active_blocks == 3);
  for (int i = 0; i < n; i++) CHECK_OK(stalloc_allocator_free(a, held[i]));
  CHECK_OK(stalloc_allocator_alloc(a, 60 * MiB, 0, 0, &p)); /* after giving the cache back */
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

static void case_driver_errors(void) {
  use_default_mock();
  stalloc_allocator_t* a = make(0, 0, 0);
  void* p = (void*)1;
  mock_fail("cuMemAlloc_v2", ST_CU_ERROR_UNKNOWN, 1);
  CHECK_STATUS(stalloc_allocator_alloc(a, 4096, 0, 0, &p), STALLOC_ERR_BACKEND);
  CHECK(p == NULL);
  CHECK(contains(stalloc_last_error(), "cuMemAlloc_v2"));
  CHECK(contains(stalloc_last_error(), "CUDA_ERROR_UNKNOWN (999): unknown error"));
  CHECK_OK(stalloc_allocator_alloc(a, 4096, 0, 0, &p)); /* transient: the next call works */
  CHECK_OK(stalloc_allocator_free(a, p));
  /* A context that cannot be made current is reported, not crashed on. */
  mock_fail("cuCtxGetCurrent", ST_CU_ERROR_ILLEGAL_ADDRESS, 1);
  CHECK_STATUS(stalloc_allocator_alloc(a, 64 * MiB, 0, 0, &p), STALLOC_ERR_BACKEND);
  CHECK(contains(stalloc_last_error(), "CUDA_ERROR_ILLEGAL_ADDRESS"));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

static void case_alignment(void) {
  use_default_mock();
  mock_set_misalign(1); /* cuMemAlloc gives 256-byte aligned addresses only */
  const uint64_t aligns[] = {512, 1 << 16, 4 * MiB};
  for (int k = 0; k < 3; k++) {
    stalloc_allocator_t* a = make(0, aligns[k], 0);
    void* p[4];
    for (int i = 0; i < 4; i++) {
      CHECK_OK(stalloc_allocator_alloc(a, 3000 + (size_t)i * 5 * MiB, 0, 0, &p[i]));
      CHECK((uintptr_t)p[i] % aligns[k] == 0);
      memset(p[i], 7, 3000 + (size_t)i * 5 * MiB);
    }
    for (int i = 0; i < 4; i++) CHECK_OK(stalloc_allocator_free(a, p[i]));
    CHECK_OK(stalloc_allocator_destroy(a));
    check_all_returned();
  }
}

/* A block freed on stream A is reused on A at once, but by stream B only after the work queued
 * on A before the free has finished. */
static void case_stream_order(void) {
  use_default_mock();
  stalloc_allocator_t* a = make(0, 0, 0);
  void* A = (void*)0x1000;
  void* B = (void*)0x2000;
  const size_t size = 8 * MiB; /* one 20 MiB segment */
  void* p;
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  mock_launch(A); /* a kernel on A still uses p */
  CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A));
  void* again;
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &again));
  CHECK(again == p); /* same stream: ordered after the kernel anyway */
  CHECK_OK(stalloc_allocator_free_sized(a, again, size, 0, (uintptr_t)A));

  /* B must not get any byte of p while A is busy, whatever it asks for. */
  void* q[3];
  const size_t qs[3] = {size, 4 * MiB, 12 * MiB};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(stalloc_allocator_alloc(a, qs[i], 0, (uintptr_t)B, &q[i]));
    bool overlaps = (char*)q[i] < (char*)p + size && (char*)p < (char*)q[i] + qs[i];
    CHECK(!overlaps);
  }
  CHECK(mock_pending(A) == 1); /* and nobody waited for A to get there */
  for (int i = 0; i < 3; i++) CHECK_OK(stalloc_allocator_free_sized(a, q[i], qs[i], 0, (uintptr_t)B));

  mock_finish(A); /* A's kernel is done: its block is free for everyone */
  stalloc_stats_t before = stats_of(a);
  void* chunks[64];
  uint64_t n = before.reserved_bytes / (2 * MiB);
  bool got_p = false;
  CHECK(n <= 64);
  for (uint64_t i = 0; i < n; i++) { /* all cached memory, on B, without a new segment */
    CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)B, &chunks[i]));
    got_p |= (char*)chunks[i] < (char*)p + size && (char*)p < (char*)chunks[i] + 2 * MiB;
  }
  CHECK(got_p && stats_of(a).backend_allocs == before.backend_allocs);
  for (uint64_t i = 0; i < n; i++) CHECK_OK(stalloc_allocator_free(a, chunks[i]));
  void* r;

  /* Events are pooled: many frees create only a few. */
  long long created = mock_stat("events_created");
  for (int i = 0; i < 1000; i++) {
    CHECK_OK(stalloc_allocator_alloc(a, 4096, 0, (uintptr_t)A, &r));
    CHECK_OK(stalloc_allocator_free(a, r));
  }
  CHECK(mock_stat("events_created") - created <= 2);
  CHECK(mock_stat("timing_events") == 0);
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* An allocator on the default mock with the growable pool on (make() turns it off). */
static stalloc_allocator_t* make_growable(void) {
  use_default_mock();
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_CUDA;
  stalloc_allocator_t* a = NULL;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  return a;
}

/* The growable pool (the path a first run takes): a block freed on stream A serves A again at
 * once, with no event and no waiting (the GPU on A is still busy), while B gets none of its
 * bytes until A's work before the free is done; on one stream it makes no event call at all. */
static void case_arena_stream_order(void) {
  stalloc_allocator_t* a = make_growable();
  void* A = (void*)0x1000;
  void* B = (void*)0x2000;
  const size_t size = 8 * MiB;
  void *p, *again;
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  for (int i = 0; i < 1000; i++) { /* a training loop on one stream, the GPU behind the host */
    mock_launch(A);
    CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A));
    CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &again));
    CHECK(again == p);
  }
  CHECK(mock_stat("events_created") == 0);
  uint64_t reserved = stats_of(a).reserved_bytes;
  CHECK(reserved == 8 * MiB); /* four granules, mapped once */
  CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A));

  void* q[3];
  const size_t qs[3] = {size, 4 * MiB, 2 * MiB};
  for (int i = 0; i < 3; i++) { /* B gets none of p's bytes while A is busy */
    CHECK_OK(stalloc_allocator_alloc(a, qs[i], 0, (uintptr_t)B, &q[i]));
    bool overlaps = (char*)q[i] < (char*)p + size && (char*)p < (char*)q[i] + qs[i];
    CHECK(!overlaps);
  }
  CHECK(mock_pending(A) == 1000); /* and nobody waited for A */
  for (int i = 0; i < 3; i++) CHECK_OK(stalloc_allocator_free_sized(a, q[i], qs[i], 0, (uintptr_t)B));
  mock_finish(A);
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)B, &again)); /* A is done: B may */
  CHECK(again == p);
  CHECK(mock_stat("events_created") <= 2);
  CHECK_OK(stalloc_allocator_free_sized(a, again, size, 0, (uintptr_t)B));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

static void fill_check(void* at, size_t size, int value, bool write);

/* A granule the growable pool gives back to map another moves there (the same physical memory,
 * no cuMemCreate), once the device is done with it; a busy one stays and a new one is made. */
static void case_arena_moves_granules(void) {
  stalloc_allocator_t* a = make_growable();
  void* A = (void*)0x1000;
  void* B = (void*)0x2000;
  void *p1, *p2, *p3, *p4;
  CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)A, &p1));
  CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)A, &p2));
  CHECK(mock_stat("mem_creates") == 2);
  CHECK_OK(stalloc_allocator_free_sized(a, p1, 2 * MiB, 0, (uintptr_t)A)); /* A is idle */
  CHECK_OK(stalloc_allocator_alloc(a, 4 * MiB, 0, (uintptr_t)A, &p3));     /* two granules above */
  CHECK(mock_stat("mem_creates") == 3 && mock_stat("retains") == 1); /* p1's granule moved */
  CHECK(stats_of(a).reserved_bytes == 6 * MiB && mock_stat("device_bytes") == (long long)(6 * MiB));
  fill_check(p3, 4 * MiB, 7, true);

  mock_launch(A); /* A still uses p3 when it is freed */
  CHECK_OK(stalloc_allocator_free_sized(a, p3, 4 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)B, &p4)); /* p1's bytes, unmapped */
  CHECK(p4 == p1 && mock_stat("retains") == 1 && mock_stat("mem_creates") == 4);
  CHECK(mock_stat("unsafe_unmaps") == 0 && mock_pending(A) == 1);
  fill_check(p4, 2 * MiB, 8, true);
  mock_finish(A);
  CHECK_OK(stalloc_allocator_free_sized(a, p4, 2 * MiB, 0, (uintptr_t)B));

  /* A move that fails halfway (its cuMemMap) gives that granule back and maps a new one. */
  long long creates = mock_stat("mem_creates"), retains = mock_stat("retains");
  void* p5;
  mock_fail("cuMemMap", ST_CU_ERROR_UNKNOWN, 1);
  /* [4, 12) MiB: p3's two granules again, and two new ones, the first to be p4's moved */
  CHECK_OK(stalloc_allocator_alloc(a, 8 * MiB, 0, (uintptr_t)A, &p5));
  CHECK(mock_stat("retains") - retains == 1 && mock_stat("mem_creates") - creates == 2);
  CHECK(stats_of(a).reserved_bytes == 10 * MiB && mock_stat("device_bytes") == (long long)(10 * MiB));
  fill_check(p5, 8 * MiB, 9, true);
  CHECK_OK(stalloc_allocator_free_sized(a, p5, 8 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_free_sized(a, p2, 2 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* Giving the pool's idle granules back (release_cached, or a plan switched to) waits for the
 * work queued before their frees on those frees' stream, once, not for the whole device once
 * per granule (on an H200 a plan's switch unmapped hundreds, each after a cuCtxSynchronize). */
static void case_arena_trim_waits_once(void) {
  stalloc_allocator_t* a = make_growable();
  void* A = (void*)0x1000;
  void* p[8];
  for (int i = 0; i < 8; i++) CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)A, &p[i]));
  mock_launch(A); /* work that uses them, still queued at their frees */
  for (int i = 0; i < 8; i++) CHECK_OK(stalloc_allocator_free_sized(a, p[i], 2 * MiB, 0, (uintptr_t)A));
  CHECK(mock_pending(A) == 1 && stats_of(a).reserved_bytes == 16 * MiB);
  long long syncs = mock_stat("ctx_syncs"), unsafe = mock_stat("unsafe_unmaps");
  CHECK_OK(stalloc_allocator_release_cached(a));
  CHECK(stats_of(a).reserved_bytes == 0 && mock_stat("device_bytes") == 0);
  CHECK(mock_stat("unsafe_unmaps") == unsafe && mock_pending(A) == 0); /* it did wait */
  CHECK(mock_stat("ctx_syncs") == syncs);                              /* on A, not the device */
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* The online lifecycle on the CUDA backend, where the pool moves a cached granule to where it is
 * needed (cuMemRetainAllocationHandle, cuMemUnmap, cuMemMap) rather than mapping a new one: those
 * moves count as the churn that lets a plan a granule larger than the run has needed be used
 * (they make no cuMemCreate, so counting backend allocations saw none, and the plan was
 * declined). Each step: eight 6 MiB activations, a 1 MiB gradient kept to the next step, then a
 * 64 MiB block where the activations were. */
static void case_online_counts_moves_as_churn(void) {
  stalloc_allocator_t* a = make_growable();
  mock_set_capacity(1ull << 30);
  void* A = (void*)0x1000;
  stalloc_online_params_t params;
  stalloc_online_params_init(&params);
  params.wait_for_plan = 1;
  CHECK_OK(stalloc_allocator_online_start(a, &params));
  void *weights, *grad = NULL, *acts[8], *big;
  CHECK_OK(stalloc_allocator_alloc(a, 16 * MiB, 0, (uintptr_t)A, &weights));
  long long retains = 0;
  for (uint64_t n = 1; n <= 12; n++) {
    CHECK_OK(stalloc_allocator_step_begin(a, n));
    if (n == 9) retains = mock_stat("retains");
    if (grad) CHECK_OK(stalloc_allocator_free_sized(a, grad, 1 * MiB, 0, (uintptr_t)A));
    for (int i = 0; i < 8; i++) CHECK_OK(stalloc_allocator_alloc(a, 6 * MiB, 0, (uintptr_t)A, &acts[i]));
    CHECK_OK(stalloc_allocator_alloc(a, 1 * MiB, 0, (uintptr_t)A, &grad));
    for (int i = 0; i < 8; i++) CHECK_OK(stalloc_allocator_free_sized(a, acts[i], 6 * MiB, 0, (uintptr_t)A));
    CHECK_OK(stalloc_allocator_alloc(a, 64 * MiB, 0, (uintptr_t)A, &big));
    CHECK_OK(stalloc_allocator_free_sized(a, big, 64 * MiB, 0, (uintptr_t)A));
  }
  long long retains_late = mock_stat("retains") - retains;
  stalloc_online_plan_record_t rec[4];
  size_t count = 0;
  CHECK_OK(stalloc_allocator_online_plans(a, rec, 4, &count));
  CHECK(count >= 1 && rec[0].switched_step == 5 && !rec[0].declined);
  CHECK(retains_late == 0); /* the plan serves: no granule moves in the last steps */
  CHECK_OK(stalloc_allocator_free_sized(a, grad, 1 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_free_sized(a, weights, 16 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* Granules moved one by one into a block get the device's access in one cuMemSetAccess per run;
 * if that grant fails, the block is refused, the granules it mapped go back, and the pool is
 * whole again for the next request. */
static void case_arena_grants_runs(void) {
  stalloc_allocator_t* a = make_growable();
  void* A = (void*)0x1000;
  void* p[4];
  for (int i = 0; i < 4; i++) CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)A, &p[i]));
  CHECK_OK(stalloc_allocator_free_sized(a, p[0], 2 * MiB, 0, (uintptr_t)A)); /* two holes, */
  CHECK_OK(stalloc_allocator_free_sized(a, p[2], 2 * MiB, 0, (uintptr_t)A)); /* not adjacent */
  long long grants = mock_stat("set_access_calls"), retains = mock_stat("retains");
  long long creates = mock_stat("mem_creates");
  void* big;
  CHECK_OK(stalloc_allocator_alloc(a, 4 * MiB, 0, (uintptr_t)A, &big)); /* above the top: both move */
  CHECK(mock_stat("retains") - retains == 2 && mock_stat("mem_creates") == creates);
  CHECK(mock_stat("set_access_calls") - grants == 1);
  CHECK(stats_of(a).reserved_bytes == 8 * MiB && mock_stat("device_bytes") == (long long)(8 * MiB));
  fill_check(big, 4 * MiB, 3, true); /* readable and writable: access was granted */

  /* The grant fails: the pool refuses the block, gives back the granules it mapped, and the
   * request is served by a segment of its own (cuMemAlloc) instead. */
  CHECK_OK(stalloc_allocator_free_sized(a, big, 4 * MiB, 0, (uintptr_t)A));
  void *left, *q, *r;
  CHECK_OK(stalloc_allocator_alloc(a, 2 * MiB, 0, (uintptr_t)A, &left)); /* a hole below is taken */
  long long segments = mock_stat("alloc_calls");
  mock_fail("cuMemSetAccess", ST_CU_ERROR_UNKNOWN, 1);
  CHECK_OK(stalloc_allocator_alloc(a, 6 * MiB, 0, (uintptr_t)A, &q));
  CHECK(mock_stat("alloc_calls") - segments == 1); /* the pool did refuse it */
  CHECK(stats_of(a).reserved_bytes == (uint64_t)mock_stat("device_bytes"));
  fill_check(q, 6 * MiB, 4, true);
  CHECK_OK(stalloc_allocator_alloc(a, 6 * MiB, 0, (uintptr_t)A, &r)); /* the pool serves again */
  CHECK(mock_stat("alloc_calls") - segments == 1);
  fill_check(r, 6 * MiB, 6, true);
  fill_check(left, 2 * MiB, 5, true);
  CHECK(stats_of(a).reserved_bytes == (uint64_t)mock_stat("device_bytes"));
  CHECK_OK(stalloc_allocator_free_sized(a, q, 6 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_free_sized(a, r, 6 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_free_sized(a, left, 2 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_free_sized(a, p[1], 2 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_free_sized(a, p[3], 2 * MiB, 0, (uintptr_t)A));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* A request the growable pool cannot serve leaves it as it found it: a full device's partial
 * maps are given back (not kept as cached granules that other processes then lack), and one
 * the memory limit could never let in fails before anything is mapped (the eighth GPU session
 * saw 3 GB held after one refused 7.5 GB request). Then the pool serves as before. */
static void case_arena_refusal_maps_nothing(void) {
  use_default_mock();
  mock_set_capacity(64 * MiB);
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_CUDA;
  o.memory_limit = 48 * MiB;
  stalloc_allocator_t* a = NULL;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  void *held, *p = (void*)1;
  CHECK_OK(stalloc_allocator_alloc(a, 4 * MiB, 0, 0, &held));
  long long creates = mock_stat("mem_creates");
  uint64_t reserved = stats_of(a).reserved_bytes;
  CHECK_STATUS(stalloc_allocator_alloc(a, 100 * MiB, 0, 0, &p), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(p == NULL && contains(stalloc_last_error(), "limit"));
  CHECK(mock_stat("mem_creates") == creates); /* refused up front */
  CHECK(stats_of(a).reserved_bytes == reserved && mock_stat("device_bytes") == (long long)reserved);
  CHECK_OK(stalloc_allocator_destroy(a));

  o.memory_limit = 0; /* the device itself is full halfway through the request */
  CHECK_OK(stalloc_allocator_create(&o, &a));
  CHECK_OK(stalloc_allocator_alloc(a, 4 * MiB, 0, 0, &held));
  reserved = stats_of(a).reserved_bytes;
  creates = mock_stat("mem_creates");
  CHECK_STATUS(stalloc_allocator_alloc(a, 100 * MiB, 0, 0, &p), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(mock_stat("mem_creates") > creates); /* it did map part of it */
  CHECK(stats_of(a).reserved_bytes == reserved && mock_stat("device_bytes") == (long long)reserved);
  CHECK_OK(stalloc_allocator_alloc(a, 56 * MiB, 0, 0, &p)); /* what is free on the device fits */
  fill_check(p, 56 * MiB, 9, true);
  fill_check(held, 4 * MiB, 8, true);
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_free(a, held));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* record_stream: a block also used on stream B is reused by nobody, not even its own stream A,
 * until B's work queued before the free is done. */
static void case_record_stream(void) {
  use_default_mock();
  stalloc_allocator_t* a = make(0, 0, 0);
  void* A = (void*)0x1000;
  void* B = (void*)0x2000;
  void* C = (void*)0x3000;
  const size_t size = 8 * MiB;
  void* p;
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  CHECK_OK(stalloc_allocator_record_stream(a, p, (uintptr_t)B));
  CHECK_OK(stalloc_allocator_record_stream(a, p, (uintptr_t)B)); /* twice: one entry */
  CHECK_OK(stalloc_allocator_record_stream(a, p, (uintptr_t)A)); /* its own stream: nothing */
  mock_launch(B); /* B still reads p */
  CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A));
  CHECK(stats_of(a).deferred_frees == 1);
  CHECK(stats_of(a).allocated_bytes == 0); /* freed for the caller; held back from reuse */
  CHECK_STATUS(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A), STALLOC_ERR_DOUBLE_FREE);
  void* q[3];
  void* on[3] = {A, B, C};
  for (int i = 0; i < 3; i++) { /* no stream gets a byte of p while B is busy */
    CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)on[i], &q[i]));
    CHECK(!((char*)q[i] < (char*)p + size && (char*)p < (char*)q[i] + size));
  }
  CHECK(mock_pending(B) == 1); /* and nobody waited for B */
  for (int i = 0; i < 3; i++) CHECK_OK(stalloc_allocator_free_sized(a, q[i], size, 0, (uintptr_t)on[i]));
  mock_finish(B);
  void* again;
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &again));
  CHECK(stats_of(a).deferred_frees == 0);
  bool got_p = again == p;
  void* more[8];
  int n = 0;
  while (!got_p && n < 8) { /* p is back in the pool: some alloc of its size on A gets it */
    CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &more[n]));
    got_p = more[n++] == p;
  }
  CHECK(got_p);
  for (int i = 0; i < n; i++) CHECK_OK(stalloc_allocator_free(a, more[i]));
  CHECK_OK(stalloc_allocator_free(a, again));

  /* A side stream that finished before the free holds nothing back for long. */
  CHECK_OK(stalloc_allocator_alloc(a, 4096, 0, (uintptr_t)A, &p));
  CHECK_OK(stalloc_allocator_record_stream(a, p, (uintptr_t)C));
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_alloc(a, 4096, 0, (uintptr_t)A, &again));
  CHECK(stats_of(a).deferred_frees == 0);
  CHECK_OK(stalloc_allocator_free(a, again));

  CHECK_STATUS(stalloc_allocator_record_stream(a, (void*)0x12345, (uintptr_t)B), STALLOC_ERR_UNKNOWN_POINTER);
  /* Destroyed while a free is still held back: its event is given back too. */
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  CHECK_OK(stalloc_allocator_record_stream(a, p, (uintptr_t)B));
  mock_launch(B);
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK(stats_of(a).deferred_frees == 1);
  mock_finish(B);
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* The device's total memory, which a memory fraction is a fraction of. */
static void case_device_memory(void) {
  use_default_mock();
  mock_set_capacity(96 * MiB);
  stalloc_allocator_t* a = make(0, 0, 0);
  uint64_t total = 0;
  CHECK_OK(stalloc_allocator_device_memory(a, &total));
  CHECK(total == 96 * MiB);
  CHECK_OK(stalloc_allocator_set_memory_limit(a, 30 * MiB));
  void* p;
  CHECK_STATUS(stalloc_allocator_alloc(a, 40 * MiB, 0, 0, &p), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(contains(stalloc_last_error(), "planned"));
  CHECK_OK(stalloc_allocator_set_memory_limit(a, 0));
  CHECK_OK(stalloc_allocator_alloc(a, 40 * MiB, 0, 0, &p));
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

/* A failed cuEventQuery or cuEventRecord never lets another stream in early: the backend waits. */
static void case_event_errors(void) {
  use_default_mock();
  stalloc_allocator_t* a = make(0, 0, 0);
  void* A = (void*)0x1000;
  void* B = (void*)0x2000;
  const size_t size = 20 * MiB;
  void *p, *q;
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  mock_launch(A);
  CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A));
  mock_fail("cuEventQuery", ST_CU_ERROR_ILLEGAL_ADDRESS, 1);
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)B, &q));
  CHECK(q == p);                 /* treated as done ... */
  CHECK(mock_pending(A) == 0);   /* ... only after waiting for A */
  CHECK_OK(stalloc_allocator_free_sized(a, q, size, 0, (uintptr_t)B));

  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  mock_launch(A);
  mock_fail("cuEventRecord", ST_CU_ERROR_UNKNOWN, 1);
  CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A));
  CHECK(mock_pending(A) == 0); /* no event: the free waited for A instead ... */
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)B, &q));
  CHECK(q == p); /* ... so B may have the block at once */
  CHECK_OK(stalloc_allocator_free_sized(a, q, size, 0, (uintptr_t)B));
  CHECK_OK(stalloc_allocator_alloc(a, size, 0, (uintptr_t)A, &p));
  mock_launch(A);
  mock_fail("cuEventRecord", ST_CU_ERROR_UNKNOWN, 1);
  mock_fail("cuStreamSynchronize", ST_CU_ERROR_ILLEGAL_ADDRESS, 1);
  CHECK_OK(stalloc_allocator_free_sized(a, p, size, 0, (uintptr_t)A)); /* free cannot fail */
  CHECK(contains(stalloc_last_error(), "waiting for the stream failed"));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

typedef struct user {
  stalloc_allocator_t* a;
  int32_t device;
} user;

static void* other_thread(void* arg) {
  stalloc_allocator_t* a = ((user*)arg)->a;
  int32_t device = ((user*)arg)->device;
  void* cur = (void*)1;
  mock_ctx_get(&cur);
  CHECK(cur == NULL); /* a fresh thread: no context */
  for (int i = 0; i < 100; i++) {
    void* p;
    CHECK_OK(stalloc_allocator_alloc(a, 1000 + (size_t)i * 30000, device, 0, &p));
    CHECK_OK(stalloc_allocator_free(a, p));
  }
  mock_ctx_get(&cur);
  CHECK(cur == NULL); /* and it stays so */
  return NULL;
}

static void case_threads_and_devices(void) {
  use_default_mock();
  /* The caller works on device 0's primary context (as PyTorch does). */
  void* ctx0;
  CHECK(mock_init(0) == 0);
  CHECK(mock_retain(&ctx0, 0) == 0);
  CHECK(mock_ctx_set(ctx0) == 0);
  stalloc_allocator_t* a0 = make(0, 0, 0);
  CHECK(mock_stat("primary_refs0") == 1); /* used as it is, not retained again */
  stalloc_allocator_t* a1 = make(1, 0, 0);
  CHECK(mock_stat("primary_refs1") == 1);
  void *p0, *p1;
  CHECK_OK(stalloc_allocator_alloc(a0, 1000, 0, 0, &p0));
  CHECK_OK(stalloc_allocator_alloc(a1, 1000, 1, 0, &p1));
  CHECK(mock_device_of((uintptr_t)p0) == 0);
  CHECK(mock_device_of((uintptr_t)p1) == 1);
  void* cur;
  mock_ctx_get(&cur);
  CHECK(cur == ctx0); /* the caller's context is left alone */
  pthread_t t[4];
  user users[2] = {{a0, 0}, {a1, 1}};
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, other_thread, &users[i % 2]) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CHECK_OK(stalloc_allocator_free(a0, p0));
  CHECK_OK(stalloc_allocator_free(a1, p1));
  CHECK_OK(stalloc_allocator_destroy(a1));
  CHECK_OK(stalloc_allocator_destroy(a0));
  CHECK(mock_stat("primary_refs1") == 0 && mock_stat("primary_refs0") == 1);
  check_all_returned();
}

/* ---- plan mode over the cuda backend: the plan's pool comes from reserve + map ---- */

static void append(stalloc_trace_t* t, uint8_t kind, uint64_t id, uint64_t size) {
  stalloc_event_t e = {.id = id, .size = size, .kind = kind};
  CHECK_OK(stalloc_trace_append(t, &e, 1));
}

/* Persistent weights, then iterations that each allocate activations and free them in reverse. */
static stalloc_trace_t* training_trace(void) {
  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_create(&t));
  uint64_t id = 1;
  append(t, STALLOC_EVENT_ALLOC, id++, 6 * MiB);
  const uint64_t sizes[] = {3 * MiB, 1 * MiB + 4096, 5 * MiB, 700 * 1024, 2 * MiB};
  for (uint64_t it = 0; it < 6; it++) {
    append(t, STALLOC_EVENT_STEP, it, 0);
    uint64_t first = id;
    for (int i = 0; i < 5; i++) append(t, STALLOC_EVENT_ALLOC, id++, sizes[i]);
    for (int i = 4; i >= 0; i--) append(t, STALLOC_EVENT_FREE, first + (uint64_t)i, 0);
  }
  return t;
}

/* Runs the trace's events through the allocator, writing each block and checking it at free. */
static void drive(stalloc_allocator_t* a, const stalloc_trace_t* t) {
  const stalloc_event_t* ev;
  size_t n;
  CHECK_OK(stalloc_trace_events(t, &ev, &n));
  void* ptrs[64] = {0};
  for (size_t i = 0; i < n; i++) {
    if (ev[i].kind == STALLOC_EVENT_STEP) {
      CHECK_OK(stalloc_allocator_step_begin(a, ev[i].id));
    } else if (ev[i].kind == STALLOC_EVENT_ALLOC) {
      CHECK(ev[i].id < 64);
      CHECK_OK(stalloc_allocator_alloc(a, ev[i].size, 0, 0, &ptrs[ev[i].id]));
      memset(ptrs[ev[i].id], (int)ev[i].id, ev[i].size);
    } else if (ev[i].kind == STALLOC_EVENT_FREE) {
      size_t size;
      unsigned char* p = ptrs[ev[i].id];
      CHECK_OK(stalloc_allocator_block_size(a, p, &size));
      CHECK(p[0] == ev[i].id && p[size / 2] == ev[i].id && p[size - 1] == ev[i].id); /* no overlap */
      CHECK_OK(stalloc_allocator_free(a, p));
    }
  }
}

static void plan_mode(bool vmm) {
  use_default_mock();
  mock_set_vmm(vmm);
  stalloc_trace_t* t = training_trace();
  stalloc_plan_params_t params;
  stalloc_plan_params_init(&params);
  params.time_limit = 0;
  stalloc_plan_t* plan;
  CHECK_OK(stalloc_plan_create(t, &params, &plan));
  stalloc_plan_info_t info;
  stalloc_plan_info_init(&info);
  CHECK_OK(stalloc_plan_info(plan, &info));
  stalloc_allocator_t* a = make(0, 0, 0);
  CHECK_OK(stalloc_allocator_load_plan(a, plan));
  stalloc_plan_destroy(plan);
  long long pool_bytes = mock_stat("device_bytes");
  CHECK(pool_bytes >= (long long)info.pool_size);
  if (vmm) {
    CHECK(mock_stat("reservations_live") == 1);
    CHECK(mock_stat("mappings_live") == pool_bytes / (long long)(2 * MiB)); /* granule by granule */
  } else {
    CHECK(mock_stat("reservations_live") == 0 && mock_stat("allocs_live") == 1);
  }
  drive(a, t);
  stalloc_stats_t s = stats_of(a);
  CHECK(s.plan_hits >= 25 && s.plan_misses == 0); /* the 6 iterations' activations, planned */
  CHECK(s.active_blocks == 1);
  CHECK(mock_stat("context_errors") == 0);
  CHECK_OK(stalloc_allocator_destroy(a));
  stalloc_trace_destroy(t);
  check_all_returned();
}

static void case_plan_mode_vmm(void) { plan_mode(true); }
static void case_plan_mode_plain(void) { plan_mode(false); }

/* ---- the growable path (backend ops directly: the pools above decide when to use it) ---- */

static void* backend_create(backend_caps* caps) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_CUDA;
  void* state = NULL;
  CHECK_OK(st_backend_cuda.create(&o, &state, caps));
  return state;
}

static void fill_check(void* at, size_t size, int value, bool write) {
  unsigned char* p = at;
  for (size_t i = 0; i < size; i += 4096) {
    if (write) p[i] = (unsigned char)value;
    else CHECK(p[i] == (unsigned char)value);
  }
}

static void case_vmm(void) {
  use_default_mock();
  mock_set_capacity(64 * MiB);
  backend_caps caps;
  void* b = backend_create(&caps);
  CHECK(caps.can_grow && caps.granularity == 2 * MiB && caps.device_accessible && !caps.host_accessible);
  const backend_ops* ops = &st_backend_cuda;
  void* base;
  CHECK_OK(ops->reserve(b, 256 * MiB, &base)); /* address space: more than the device holds */
  CHECK((uintptr_t)base % (2 * MiB) == 0 && mock_stat("device_bytes") == 0);
  char* at = base;
  CHECK_OK(ops->map(b, at, 8 * MiB));
  fill_check(at, 8 * MiB, 1, true);
  CHECK_OK(ops->map(b, at + 8 * MiB, 8 * MiB)); /* grow */
  fill_check(at + 8 * MiB, 8 * MiB, 2, true);
  CHECK(mock_stat("device_bytes") == (long long)(16 * MiB));
  void* stream = (void*)0x3000;
  mock_launch(stream);
  CHECK_OK(ops->unmap(b, at + 12 * MiB, 4 * MiB)); /* shrink: give back an unused tail */
  CHECK(mock_stat("unsafe_unmaps") == 0);           /* it waited for queued work first */
  CHECK(mock_stat("device_bytes") == (long long)(12 * MiB));
  fill_check(at, 8 * MiB, 1, false);
  fill_check(at + 8 * MiB, 4 * MiB, 2, false);

  /* Misuse is refused with a reason, and changes nothing. */
  CHECK_STATUS(ops->map(b, at + 4 * MiB, 2 * MiB), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(contains(stalloc_last_error(), "already mapped"));
  CHECK_STATUS(ops->unmap(b, at + 12 * MiB, 2 * MiB), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(contains(stalloc_last_error(), "not mapped"));
  CHECK_STATUS(ops->map(b, at + 4096, 2 * MiB), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(contains(stalloc_last_error(), "granularity"));
  CHECK_STATUS(ops->map(b, at + 256 * MiB, 2 * MiB), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(ops->reserve(b, 3 * MiB, &base), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(ops->release(b, at, 2 * MiB), STALLOC_ERR_INVALID_ARGUMENT);

  /* Out of device memory midway: nothing of that map stays. */
  CHECK_STATUS(ops->map(b, at + 12 * MiB, 60 * MiB), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(contains(stalloc_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK(mock_stat("device_bytes") == (long long)(12 * MiB) && mock_stat("mappings_live") == 6);
  mock_fail("cuMemSetAccess", ST_CU_ERROR_UNKNOWN, 1);
  CHECK_STATUS(ops->map(b, at + 12 * MiB, 4 * MiB), STALLOC_ERR_BACKEND);
  CHECK(contains(stalloc_last_error(), "cuMemSetAccess"));
  CHECK(mock_stat("device_bytes") == (long long)(12 * MiB) && mock_stat("mappings_live") == 6);
  CHECK_OK(ops->map(b, at + 12 * MiB, 4 * MiB)); /* and then it works */
  fill_check(at + 12 * MiB, 4 * MiB, 3, true);

  /* Release unmaps whatever is still mapped. */
  CHECK_OK(ops->release(b, base, 256 * MiB));
  CHECK(mock_stat("device_bytes") == 0 && mock_stat("reservations_live") == 0);
  void* kept;
  CHECK_OK(ops->reserve(b, 32 * MiB, &kept));
  CHECK_OK(ops->map(b, kept, 4 * MiB));
  ops->destroy(b); /* destroy returns a reservation left behind too */
  check_all_returned();
}

static void check_no_growth(void) {
  backend_caps caps;
  void* b = backend_create(&caps);
  CHECK(!caps.can_grow && caps.granularity == 2 * MiB);
  void* base;
  CHECK_STATUS(st_backend_cuda.reserve(b, 2 * MiB, &base), STALLOC_ERR_UNSUPPORTED);
  CHECK(contains(stalloc_last_error(), "virtual memory management"));
  st_backend_cuda.destroy(b);
  /* The allocator does not need it. */
  stalloc_allocator_t* a = make(0, 0, 0);
  void* p;
  CHECK_OK(stalloc_allocator_alloc(a, 5 * MiB, 0, 0, &p));
  CHECK_OK(stalloc_allocator_free(a, p));
  CHECK_OK(stalloc_allocator_destroy(a));
  check_all_returned();
}

static void case_vmm_unsupported(void) {
  use_default_mock();
  mock_set_vmm(0);
  check_no_growth();
}

static void case_vmm_symbols_missing(void) {
  use_mock(mock_path("STALLOC_TEST_MOCK_CUDA_NOVMM", MOCK_CUDA_NOVMM_PATH));
  CHECK(dlsym(mock, "cuMemCreate") == NULL);
  check_no_growth();
}

/* ---- driver ---- */

static int failures;

static void run_child(const char* name, void (*fn)(void)) {
  fprintf(stderr, "- %s\n", name);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    fn();
    exit(0); /* not _exit: leak checkers run at exit */
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "  FAILED: %s\n", name);
    failures++;
  }
}

#define CASE(fn) run_child(#fn, fn)

int main(void) {
#if defined(STALLOC_HAVE_CUDA_H)
  fprintf(stderr, "cuda_driver.h layouts checked against cuda.h at build time\n");
#else
  fprintf(stderr, "no cuda.h at build time: layout check skipped\n");
#endif
  CASE(case_missing_driver);
  CASE(case_default_driver);
  CASE(case_not_a_driver);
  CASE(case_init_no_device);
  CASE(case_init_error);
  CASE(case_invalid_device);
  CASE(case_alloc_free_stats);
  CASE(case_out_of_memory);
  CASE(case_driver_errors);
  CASE(case_alignment);
  CASE(case_stream_order);
  CASE(case_record_stream);
  CASE(case_arena_stream_order);
  CASE(case_arena_moves_granules);
  CASE(case_arena_grants_runs);
  CASE(case_arena_refusal_maps_nothing);
  CASE(case_arena_trim_waits_once);
  CASE(case_online_counts_moves_as_churn);
  CASE(case_device_memory);
  CASE(case_event_errors);
  CASE(case_threads_and_devices);
  CASE(case_plan_mode_vmm);
  CASE(case_plan_mode_plain);
  CASE(case_vmm);
  CASE(case_vmm_unsupported);
  CASE(case_vmm_symbols_missing);
  if (failures) fprintf(stderr, "%d case(s) failed\n", failures);
  return failures ? 1 : 0;
}
