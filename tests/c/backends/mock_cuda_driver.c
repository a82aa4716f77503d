/* mock_cuda_driver.c - a fake libcuda for the cuda backend's tests, built as a shared library
 * and loaded through STALLOC_CUDA_DRIVER. It implements the driver entry points the backend
 * uses on host memory, as strictly as the real driver where the backend could go wrong:
 * - every memory, event and stream call needs a current context (else CUDA_ERROR_INVALID_CONTEXT)
 *   and remembers which device's context made an allocation;
 * - device memory is real host memory (readable by the test), counted against a capacity;
 *   going past it gives CUDA_ERROR_OUT_OF_MEMORY;
 * - virtual memory: reserved ranges are PROT_NONE until a granule is mapped (cuMemMap) AND
 *   given access (cuMemSetAccess); cuMemUnmap takes whole mappings only;
 * - streams run "work" the test queues with mockcu_launch and completes with mockcu_finish;
 *   an event is done once the work queued on its stream before cuEventRecord has finished.
 * Switches (mockcu_*) simulate OOM, missing VMM support, init failures and injected errors.
 * Built with MOCKCU_NO_VMM_SYMBOLS it lacks the VMM entry points, as an old driver does. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  OK = 0, E_INVALID_VALUE = 1, E_OOM = 2, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100,
  E_INVALID_DEVICE = 101, E_INVALID_CONTEXT = 201, E_INVALID_HANDLE = 400, E_NOT_READY = 600,
  E_ILLEGAL_ADDRESS = 700, E_NOT_SUPPORTED = 801, E_UNKNOWN = 999
};

typedef struct ctx {
  int device;
} ctx;

typedef struct stream_work {
  void* key; /* the CUstream value */
  unsigned long long submitted, done;
} stream_work;

typedef struct event {
  unsigned flags;
  stream_work* stream; /* NULL until recorded */
  unsigned long long target;
} event;

typedef struct dalloc {
  CUdeviceptr ptr;
  void* map_base;
  size_t map_len, size;
  int device;
} dalloc;

typedef struct handle {
  size_t size;
  int device, mappings, refs; /* refs: cuMemCreate's and cuMemRetainAllocationHandle's */
} handle;

typedef struct reservation {
  CUdeviceptr base;
  size_t size;
  void* map_base;
  size_t map_len;
} reservation;

typedef struct mapping {
  CUdeviceptr ptr;
  size_t size;
  handle* h;
} mapping;

typedef struct injection {
  char name[48];
  CUresult code;
  int times;
} injection;

#define MAX_DEVICES 8
#define MAX_ITEMS 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized, init_error, devices = 2, vmm_supported = 1, misalign;
static size_t granularity = 2u << 20;
static unsigned long long capacity = 1ull << 30, used;
static ctx primaries[MAX_DEVICES];
static int primary_refs[MAX_DEVICES];
static stream_work streams[64];
static int stream_count;
static dalloc allocs[MAX_ITEMS];
static int alloc_count;
static reservation reservations[64];
static int reservation_count;
static mapping mappings[MAX_ITEMS];
static int mapping_count;
static injection injections[16];
static long long events_live, events_created, timing_events, handles_live, context_errors,
    unsafe_unmaps, alloc_calls, mem_creates, retains, set_access_calls, ctx_syncs;

static __thread ctx* ctx_stack[16];
static __thread int ctx_depth;

/* ---- switches and observations for the tests ---- */

API void mockcu_set_devices(int n) { devices = n; }
API void mockcu_set_vmm(int supported) { vmm_supported = supported; }
API void mockcu_set_capacity(unsigned long long bytes) { capacity = bytes; }
API void mockcu_set_misalign(int on) { misalign = on; }
API void mockcu_set_init_error(int code) { init_error = code; }
/* The next `times` calls of the entry point `name` return `code`. */
API void mockcu_fail(const char* name, int code, int times) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < 16; i++)
    if (!injections[i].times) {
      strncpy(injections[i].name, name, sizeof injections[i].name - 1);
      injections[i].code = code;
      injections[i].times = times;
      break;
    }
  pthread_mutex_unlock(&lock);
}

static stream_work* stream_of(void* key) {
  for (int i = 0; i < stream_count; i++)
    if (streams[i].key == key) return &streams[i];
  if (stream_count == 64) return NULL;
  streams[stream_count].key = key;
  return &streams[stream_count++];
}

/* Queues one piece of work (a kernel, say) on the stream; it runs until mockcu_finish. */
API void mockcu_launch(void* stream) {
  pthread_mutex_lock(&lock);
  stream_work* s = stream_of(stream);
  if (s) s->submitted++;
  pthread_mutex_unlock(&lock);
}
API void mockcu_finish(void* stream) {
  pthread_mutex_lock(&lock);
  stream_work* s = stream_of(stream);
  if (s) s->done = s->submitted;
  pthread_mutex_unlock(&lock);
}
API long long mockcu_pending(void* stream) {
  pthread_mutex_lock(&lock);
  stream_work* s = stream_of(stream);
  long long n = s ? (long long)(s->submitted - s->done) : 0;
  pthread_mutex_unlock(&lock);
  return n;
}

/* The device whose context allocated ptr (cuMemAlloc or a mapped granule); -1 if none. */
API int mockcu_device_of(CUdeviceptr ptr) {
  int dev = -1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < alloc_count; i++)
    if (ptr >= allocs[i].ptr && ptr < allocs[i].ptr + allocs[i].size) dev = allocs[i].device;
  for (int i = 0; i < mapping_count; i++)
    if (ptr >= mappings[i].ptr && ptr < mappings[i].ptr + mappings[i].size) dev = mappings[i].h->device;
  pthread_mutex_unlock(&lock);
  return dev;
}

API void* mockcu_primary(int device) { return &primaries[device]; }

/* Counters by name; -1 for an unknown name. */
API long long mockcu_stat(const char* name) {
  struct { const char* name; long long value; } all[] = {
      {"device_bytes", (long long)used},      {"allocs_live", alloc_count},
      {"alloc_calls", alloc_calls},           {"handles_live", handles_live},
      {"mappings_live", mapping_count},       {"reservations_live", reservation_count},
      {"events_live", events_live},           {"events_created", events_created},
      {"timing_events", timing_events},       {"context_errors", context_errors},
      {"unsafe_unmaps", unsafe_unmaps},       {"primary_refs0", primary_refs[0]},
      {"primary_refs1", primary_refs[1]},     {"mem_creates", mem_creates},
      {"retains", retains},                   {"set_access_calls", set_access_calls},
      {"ctx_syncs", ctx_syncs},
  };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(all[i].name, name)) return all[i].value;
  return -1;
}

/* ---- helpers ---- */

static CUresult injected(const char* name) {
  for (int i = 0; i < 16; i++)
    if (injections[i].times && !strcmp(injections[i].name, name)) {
      injections[i].times--;
      return injections[i].code;
    }
  return OK;
}

static ctx* current(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

/* The common prologue: lock, injected error, initialised, context current. */
#define ENTER_CTX(name)                  \
  pthread_mutex_lock(&lock);             \
  CUresult r_ = injected(name);          \
  if (!r_ && !initialized) r_ = E_NOT_INITIALIZED; \
  if (!r_ && !current()) {               \
    context_errors++;                    \
    r_ = E_INVALID_CONTEXT;              \
  }                                      \
  if (r_) {                              \
    pthread_mutex_unlock(&lock);         \
    return r_;                           \
  }
#define ENTER_NOCTX(name)                \
  pthread_mutex_lock(&lock);             \
  CUresult r_ = injected(name);          \
  if (!r_ && !initialized) r_ = E_NOT_INITIALIZED; \
  if (r_) {                              \
    pthread_mutex_unlock(&lock);         \
    return r_;                           \
  }
#define RETURN(code)             \
  do {                           \
    pthread_mutex_unlock(&lock); \
    return (code);               \
  } while (0)

/* ---- init, errors, devices, contexts ---- */

API CUresult cuInit(unsigned flags) {
  pthread_mutex_lock(&lock);
  CUresult r = flags ? E_INVALID_VALUE : init_error ? init_error : injected("cuInit");
  if (!r) initialized = 1;
  RETURN(r);
}

static const struct { CUresult code; const char *name, *text; } ERRORS[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {E_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {E_OOM, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {E_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {E_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {E_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {E_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {E_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {E_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {E_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {E_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {E_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_text(CUresult code, const char** out, int want_name) {
  for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
    if (ERRORS[i].code == code) {
      *out = want_name ? ERRORS[i].name : ERRORS[i].text;
      return OK;
    }
  *out = NULL;
  return E_INVALID_VALUE;
}
API CUresult cuGetErrorName(CUresult code, const char** out) { return error_text(code, out, 1); }
API CUresult cuGetErrorString(CUresult code, const char** out) { return error_text(code, out, 0); }

API CUresult cuDeviceGet(int* dev, int ordinal) {
  ENTER_NOCTX("cuDeviceGet");
  if (ordinal < 0 || ordinal >= devices) RETURN(E_INVALID_DEVICE);
  *dev = ordinal;
  RETURN(OK);
}

API CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
  ENTER_NOCTX("cuDeviceGetAttribute");
  if (dev < 0 || dev >= devices) RETURN(E_INVALID_DEVICE);
  *value = attribute == 102 ? vmm_supported : 0;
  RETURN(OK);
}

API CUresult cuDevicePrimaryCtxRetain(ctx** out, int dev) {
  ENTER_NOCTX("cuDevicePrimaryCtxRetain");
  if (dev < 0 || dev >= devices) RETURN(E_INVALID_DEVICE);
  primaries[dev].device = dev;
  primary_refs[dev]++;
  *out = &primaries[dev];
  RETURN(OK);
}

API CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  ENTER_NOCTX("cuDevicePrimaryCtxRelease_v2");
  if (dev < 0 || dev >= devices) RETURN(E_INVALID_DEVICE);
  if (primary_refs[dev] == 0) RETURN(E_INVALID_CONTEXT);
  primary_refs[dev]--;
  RETURN(OK);
}

API CUresult cuCtxGetCurrent(ctx** out) {
  ENTER_NOCTX("cuCtxGetCurrent");
  *out = current();
  RETURN(OK);
}

API CUresult cuCtxSetCurrent(ctx* c) {
  ENTER_NOCTX("cuCtxSetCurrent");
  if (ctx_depth) ctx_stack[ctx_depth - 1] = c;
  else if (c) ctx_stack[ctx_depth++] = c;
  if (!c && ctx_depth) ctx_depth--;
  RETURN(OK);
}

API CUresult cuCtxPushCurrent_v2(ctx* c) {
  ENTER_NOCTX("cuCtxPushCurrent_v2");
  if (!c || ctx_depth == 16) RETURN(E_INVALID_VALUE);
  ctx_stack[ctx_depth++] = c;
  RETURN(OK);
}

API CUresult cuCtxPopCurrent_v2(ctx** out) {
  ENTER_CTX("cuCtxPopCurrent_v2");
  *out = ctx_stack[--ctx_depth];
  RETURN(OK);
}

API CUresult cuCtxGetDevice(int* dev) {
  ENTER_CTX("cuCtxGetDevice");
  *dev = current()->device;
  RETURN(OK);
}

/* ---- plain memory ---- */

API CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t size) {
  ENTER_CTX("cuMemAlloc_v2");
  alloc_calls++;
  if (!size) RETURN(E_INVALID_VALUE);
  if (size > capacity - used || alloc_count == MAX_ITEMS) RETURN(E_OOM);
  size_t len = ((size + 4095) & ~(size_t)4095) + 4096;
  void* base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) RETURN(E_OOM);
  /* The driver promises 256-byte alignment only; misalign shows what a caller sees then. */
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)base + (misalign ? 256 : 0);
  allocs[alloc_count++] = (dalloc){p, base, len, size, current()->device};
  used += size;
  *out = p;
  RETURN(OK);
}

API CUresult cuMemFree_v2(CUdeviceptr p) {
  ENTER_CTX("cuMemFree_v2");
  for (int i = 0; i < alloc_count; i++)
    if (allocs[i].ptr == p) {
      munmap(allocs[i].map_base, allocs[i].map_len);
      used -= allocs[i].size;
      allocs[i] = allocs[--alloc_count];
      RETURN(OK);
    }
  RETURN(E_INVALID_VALUE);
}

API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  ENTER_CTX("cuMemGetInfo_v2");
  *free_bytes = capacity - used;
  *total = capacity;
  RETURN(OK);
}

/* ---- streams and events ---- */

API CUresult cuEventCreate(event** out, unsigned flags) {
  ENTER_CTX("cuEventCreate");
  event* e = calloc(1, sizeof *e);
  if (!e) RETURN(E_OOM);
  e->flags = flags;
  events_live++;
  events_created++;
  if (!(flags & 2)) timing_events++;
  *out = e;
  RETURN(OK);
}

API CUresult cuEventRecord(event* e, void* stream) {
  ENTER_CTX("cuEventRecord");
  if (!e) RETURN(E_INVALID_HANDLE);
  e->stream = stream_of(stream);
  e->target = e->stream ? e->stream->submitted : 0;
  RETURN(OK);
}

API CUresult cuEventQuery(event* e) {
  ENTER_CTX("cuEventQuery");
  if (!e) RETURN(E_INVALID_HANDLE);
  RETURN(!e->stream || e->stream->done >= e->target ? OK : E_NOT_READY);
}

API CUresult cuEventSynchronize(event* e) {
  ENTER_CTX("cuEventSynchronize");
  if (!e) RETURN(E_INVALID_HANDLE);
  if (e->stream && e->stream->done < e->target) e->stream->done = e->target; /* waited for it */
  RETURN(OK);
}

API CUresult cuEventDestroy_v2(event* e) {
  ENTER_CTX("cuEventDestroy_v2");
  if (!e) RETURN(E_INVALID_HANDLE);
  free(e);
  events_live--;
  RETURN(OK);
}

API CUresult cuStreamSynchronize(void* stream) {
  ENTER_CTX("cuStreamSynchronize");
  stream_work* s = stream_of(stream);
  if (s) s->done = s->submitted;
  RETURN(OK);
}

API CUresult cuCtxSynchronize(void) {
  ENTER_CTX("cuCtxSynchronize");
  ctx_syncs++;
  for (int i = 0; i < stream_count; i++) streams[i].done = streams[i].submitted;
  RETURN(OK);
}

/* ---- virtual memory management ---- */
#ifndef MOCKCU_NO_VMM_SYMBOLS

typedef struct prop {
  int type, handle_types, location_type, location_id;
  void* win32;
  unsigned char flags[8];
} prop;
typedef struct access_desc {
  int location_type, location_id, flags;
} access_desc;

static int prop_ok(const prop* p) {
  return p && p->type == 1 && p->location_type == 1 && p->location_id >= 0 && p->location_id < devices;
}

API CUresult cuMemGetAllocationGranularity(size_t* out, const prop* p, int option) {
  ENTER_NOCTX("cuMemGetAllocationGranularity");
  if (!prop_ok(p) || (option != 0 && option != 1)) RETURN(E_INVALID_VALUE);
  if (!vmm_supported) RETURN(E_NOT_SUPPORTED);
  *out = granularity;
  RETURN(OK);
}

API CUresult cuMemAddressReserve(CUdeviceptr* out, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags) {
  ENTER_CTX("cuMemAddressReserve");
  if (!size || size % granularity || (alignment & (alignment - 1)) || addr || flags) RETURN(E_INVALID_VALUE);
  if (reservation_count == 64) RETURN(E_OOM);
  size_t align = alignment > granularity ? alignment : granularity;
  size_t len = size + align;
  void* base = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) RETURN(E_OOM);
  CUdeviceptr p = ((CUdeviceptr)(uintptr_t)base + align - 1) & ~(CUdeviceptr)(align - 1);
  reservations[reservation_count++] = (reservation){p, size, base, len};
  *out = p;
  RETURN(OK);
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  ENTER_CTX("cuMemAddressFree");
  for (int i = 0; i < reservation_count; i++)
    if (reservations[i].base == p && reservations[i].size == size) {
      for (int m = 0; m < mapping_count; m++)
        if (mappings[m].ptr >= p && mappings[m].ptr < p + size) RETURN(E_INVALID_VALUE); /* still mapped */
      munmap(reservations[i].map_base, reservations[i].map_len);
      reservations[i] = reservations[--reservation_count];
      RETURN(OK);
    }
  RETURN(E_INVALID_VALUE);
}

static void drop_handle_if_unused(handle* h) {
  if (!h->refs && !h->mappings) {
    used -= h->size;
    handles_live--;
    free(h);
  }
}

API CUresult cuMemCreate(handle** out, size_t size, const prop* p, unsigned long long flags) {
  ENTER_NOCTX("cuMemCreate");
  if (!prop_ok(p) || !size || size % granularity || flags) RETURN(E_INVALID_VALUE);
  if (!vmm_supported) RETURN(E_NOT_SUPPORTED);
  if (size > capacity - used) RETURN(E_OOM);
  handle* h = calloc(1, sizeof *h);
  if (!h) RETURN(E_OOM);
  h->size = size;
  h->device = p->location_id;
  h->refs = 1;
  used += size;
  handles_live++;
  mem_creates++;
  *out = h;
  RETURN(OK);
}

API CUresult cuMemRelease(handle* h) {
  ENTER_NOCTX("cuMemRelease");
  if (!h || !h->refs) RETURN(E_INVALID_VALUE);
  h->refs--;
  drop_handle_if_unused(h);
  RETURN(OK);
}

static int in_reservation(CUdeviceptr p, size_t size) {
  for (int i = 0; i < reservation_count; i++)
    if (p >= reservations[i].base && p + size <= reservations[i].base + reservations[i].size) return 1;
  return 0;
}

API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, handle* h, unsigned long long flags) {
  ENTER_CTX("cuMemMap");
  if (!h || !h->refs || offset || flags || size != h->size || !in_reservation(p, size)) RETURN(E_INVALID_VALUE);
  if (mapping_count == MAX_ITEMS) RETURN(E_OOM);
  for (int m = 0; m < mapping_count; m++)
    if (p < mappings[m].ptr + mappings[m].size && mappings[m].ptr < p + size) RETURN(E_INVALID_VALUE);
  /* Fresh zeroed pages, still without access until cuMemSetAccess. */
  if (mmap((void*)(uintptr_t)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    RETURN(E_OOM);
  mappings[mapping_count++] = (mapping){p, size, h};
  h->mappings++;
  RETURN(OK);
}

/* The handle of the mapping at p, one more reference to it (released with cuMemRelease). */
API CUresult cuMemRetainAllocationHandle(handle** out, void* p) {
  ENTER_NOCTX("cuMemRetainAllocationHandle");
  CUdeviceptr at = (CUdeviceptr)(uintptr_t)p;
  for (int m = 0; m < mapping_count; m++)
    if (at >= mappings[m].ptr && at < mappings[m].ptr + mappings[m].size) {
      mappings[m].h->refs++;
      *out = mappings[m].h;
      retains++;
      RETURN(OK);
    }
  RETURN(E_INVALID_VALUE);
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const access_desc* desc, size_t count) {
  ENTER_CTX("cuMemSetAccess");
  set_access_calls++;
  if (!desc || count != 1 || desc->location_type != 1 || desc->flags != 3) RETURN(E_INVALID_VALUE);
  /* The whole range must be mapped, by mappings of the device access is granted to. */
  for (CUdeviceptr at = p; at < p + size;) {
    int found = -1;
    for (int m = 0; m < mapping_count; m++)
      if (at >= mappings[m].ptr && at < mappings[m].ptr + mappings[m].size) found = m;
    if (found < 0 || mappings[found].h->device != desc->location_id) RETURN(E_INVALID_VALUE);
    at = mappings[found].ptr + mappings[found].size;
  }
  mprotect((void*)(uintptr_t)p, size, PROT_READ | PROT_WRITE);
  RETURN(OK);
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  ENTER_CTX("cuMemUnmap");
  /* Only whole mappings: a range that cuts one is an error, as in the driver. */
  for (int m = 0; m < mapping_count; m++) {
    CUdeviceptr a = mappings[m].ptr, b = a + mappings[m].size;
    if (a < p + size && p < b && (a < p || b > p + size)) RETURN(E_INVALID_VALUE);
  }
  for (int i = 0; i < stream_count; i++)
    if (streams[i].done < streams[i].submitted) unsafe_unmaps++;
  for (int m = 0; m < mapping_count;) {
    if (mappings[m].ptr >= p && mappings[m].ptr < p + size) {
      mmap((void*)(uintptr_t)mappings[m].ptr, mappings[m].size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
      handle* h = mappings[m].h;
      h->mappings--;
      drop_handle_if_unused(h);
      mappings[m] = mappings[--mapping_count];
    } else {
      m++;
    }
  }
  RETURN(OK);
}

#endif
