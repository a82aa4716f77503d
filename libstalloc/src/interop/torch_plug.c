/* torch_plug.c - the functions PyTorch's CUDAPluggableAllocator calls. PyTorch hands them no
 * context, so this file holds the one piece of process-wide state the design allows: a table
 * of the allocator registered per device. Failures cannot be returned to PyTorch except as
 * NULL, so the last one is kept (process-wide, under a lock) for the Python adapter to turn
 * into a clear error. */
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
static atomic_int warned_free;

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
