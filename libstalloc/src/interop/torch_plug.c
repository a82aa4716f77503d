/* torch_plug.c - the functions PyTorch's CUDAPluggableAllocator calls: malloc and free, and the
 * hooks its allocator object takes as C function pointers (init, reset, memory fraction, base
 * allocation, record_stream), each with the signature of torch/csrc/cuda/
 * CUDAPluggableAllocator.h. PyTorch hands them no context, so this file holds the one piece of
 * process-wide state the design allows: a table of the allocator registered per device.
 * Failures cannot be returned to PyTorch except as NULL, so the last one is kept (process-wide,
 * under a lock) for the adapter to turn into a clear error. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/internal.h"

#define MAX_DEVICES 64

static _Atomic(stalloc_allocator_t*) registered[MAX_DEVICES];
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_message[1024];
static stalloc_status_t last_status;
static atomic_uint_fast64_t failed_frees;
static atomic_uint_fast64_t failed_record_streams;
static atomic_int warned_free;
static atomic_int torch_device_count = -1;

static void keep_error(stalloc_status_t status) {
  pthread_mutex_lock(&error_lock);
  last_status = status;
  snprintf(last_message, sizeof last_message, "%s", stalloc_last_error());
  pthread_mutex_unlock(&error_lock);
}

stalloc_status_t stalloc_torch_register(int32_t device, stalloc_allocator_t* allocator) {
  if (device < 0 || device >= MAX_DEVICES)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "torch_register: device %d outside 0..%d", (int)device, MAX_DEVICES - 1);
  atomic_store(&registered[device], allocator);
  return STALLOC_OK;
}

void* stalloc_torch_malloc(size_t size, int device, void* stream) {
  stalloc_allocator_t* a = device >= 0 && device < MAX_DEVICES ? atomic_load(&registered[device]) : NULL;
  if (!a) {
    keep_error(st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                       "no stalloc allocator is registered for device %d (call torch_backend.enable())", device));
    return NULL;
  }
  void* p = NULL;
  stalloc_status_t s = stalloc_allocator_alloc(a, size, device, (uint64_t)(uintptr_t)stream, &p);
  if (s) {
    keep_error(s);
    return NULL;
  }
  return p;
}

void stalloc_torch_free(void* ptr, size_t size, int device, void* stream) {
  stalloc_allocator_t* a = device >= 0 && device < MAX_DEVICES ? atomic_load(&registered[device]) : NULL;
  stalloc_status_t s = a ? stalloc_allocator_free_sized(a, ptr, size, device, (uint64_t)(uintptr_t)stream)
                         : st_fail(STALLOC_ERR_INVALID_ARGUMENT, "free on device %d, which has no stalloc allocator", device);
  if (s == STALLOC_OK) return;
  keep_error(s);
  atomic_fetch_add(&failed_frees, 1);
  if (!atomic_exchange(&warned_free, 1))
    fprintf(stderr, "stalloc: a free from PyTorch failed and was ignored (memory kept, nothing corrupted): %s\n",
            stalloc_last_error());
}

const char* stalloc_torch_last_error(stalloc_status_t* status) {
  /* Copied per thread so the caller's string does not change under it. */
  static _Thread_local char copy[1024];
  pthread_mutex_lock(&error_lock);
  memcpy(copy, last_message, sizeof copy);
  if (status) *status = last_status;
  pthread_mutex_unlock(&error_lock);
  return copy;
}

uint64_t stalloc_torch_failed_frees(void) { return atomic_load(&failed_frees); }

static stalloc_allocator_t* allocator_of(int device) {
  return device >= 0 && device < MAX_DEVICES ? atomic_load(&registered[device]) : NULL;
}

void stalloc_torch_init(int device_count) { atomic_store(&torch_device_count, device_count); }

int stalloc_torch_device_count(void) { return atomic_load(&torch_device_count); }

void stalloc_torch_reset(void) {
  for (int d = 0; d < MAX_DEVICES; d++) {
    stalloc_allocator_t* a = allocator_of(d);
    if (a) (void)stalloc_allocator_release_cached(a); /* fails only for a NULL allocator */
  }
}

void stalloc_torch_set_memory_fraction(double fraction, int device) {
  stalloc_allocator_t* a = allocator_of(device);
  uint64_t total = 0;
  stalloc_status_t s;
  if (!a)
    s = st_fail(STALLOC_ERR_INVALID_ARGUMENT, "memory fraction for device %d, which has no stalloc allocator", device);
  else if (!(fraction >= 0.0 && fraction <= 1.0)) /* also refuses NaN */
    s = st_fail(STALLOC_ERR_INVALID_ARGUMENT, "memory fraction %g is outside 0..1", fraction);
  else if (!(s = stalloc_allocator_device_memory(a, &total))) {
    /* stalloc's limit 0 means "none": fraction 1 (the whole device) maps to it, and fraction 0
     * (PyTorch then refuses every new segment) to a limit of one byte. */
    uint64_t limit = fraction >= 1.0 ? 0 : ST_MAX((uint64_t)1, (uint64_t)(fraction * (double)total));
    s = stalloc_allocator_set_memory_limit(a, limit);
  }
  if (s) {
    keep_error(s);
    fprintf(stderr, "stalloc: set_per_process_memory_fraction was not applied: %s\n", stalloc_last_error());
  }
}

/* Runs op on the allocator that owns ptr. Returns its status, or STALLOC_ERR_UNKNOWN_POINTER
 * (with a message) when no registered allocator has ptr live. */
static stalloc_status_t on_owner(void* ptr, stalloc_status_t (*op)(stalloc_allocator_t*, void*, void*), void* arg) {
  for (int d = 0; d < MAX_DEVICES; d++) {
    stalloc_allocator_t* a = allocator_of(d);
    if (!a) continue;
    stalloc_status_t s = op(a, ptr, arg);
    if (s != STALLOC_ERR_UNKNOWN_POINTER && s != STALLOC_ERR_DOUBLE_FREE) return s;
  }
  return st_fail(STALLOC_ERR_UNKNOWN_POINTER, "%p is not a live block of any registered stalloc allocator", ptr);
}

typedef struct base_query {
  void* base;
  size_t size;
} base_query;

static stalloc_status_t base_op(stalloc_allocator_t* a, void* ptr, void* arg) {
  base_query* q = arg;
  return stalloc_allocator_block_base(a, ptr, &q->base, &q->size);
}

void* stalloc_torch_base_alloc(void* ptr, size_t* size) {
  base_query q = {NULL, 0};
  stalloc_status_t s = on_owner(ptr, base_op, &q);
  if (s) {
    /* NULL makes the caller's CUDA call (cudaIpcGetMemHandle) fail loudly, where handing back
     * the block itself would give another process wrong offsets. */
    keep_error(s);
    *size = 0;
    return NULL;
  }
  *size = q.size;
  return q.base;
}

static stalloc_status_t record_op(stalloc_allocator_t* a, void* ptr, void* stream) {
  return stalloc_allocator_record_stream(a, ptr, (uint64_t)(uintptr_t)stream);
}

void stalloc_torch_record_stream(void* ptr, void* stream) {
  stalloc_status_t s = on_owner(ptr, record_op, stream);
  if (s == STALLOC_OK) return;
  /* The block cannot be tracked on that stream: said loudly, the caller's data is at stake. */
  keep_error(s);
  atomic_fetch_add(&failed_record_streams, 1);
  fprintf(stderr, "stalloc: record_stream failed: %s\n", stalloc_last_error());
}

uint64_t stalloc_torch_failed_record_streams(void) { return atomic_load(&failed_record_streams); }
