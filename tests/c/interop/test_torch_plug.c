/* test_torch_plug.c - the PyTorch-signature entry points: per-device registration, errors kept
 * for the adapter, bad frees counted instead of crashing, and each hook PyTorch's allocator
 * object takes (init, reset, memory fraction, base allocation, record_stream); record_stream
 * also over the mock CUDA driver, whose events complete when the test says so. */
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#ifndef MOCK_CUDA_PATH
#define MOCK_CUDA_PATH ""
#endif

#define ST_MAX_U64(x, y) ((x) > (y) ? (x) : (y))

static bool overlaps(const void* p, const void* q, size_t n) {
  return (const char*)p < (const char*)q + n && (const char*)q < (const char*)p + n;
}

static stalloc_allocator_t* make(stalloc_backend_kind_t backend, uint64_t limit) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = backend;
  o.growable_pool = 0; /* segments: base_alloc has one backend allocation to report */
  o.memory_limit = limit;
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  return a;
}

static void test_hooks_on_host(void) {
  stalloc_allocator_t* a = make(STALLOC_BACKEND_HOST, 0);
  CHECK_OK(stalloc_torch_register(0, a));
  CHECK(stalloc_torch_device_count() == -1);
  stalloc_torch_init(3);
  CHECK(stalloc_torch_device_count() == 3);

  /* reset = empty_cache: cached segments go back. */
  void* p = stalloc_torch_malloc(3 << 20, 0, NULL);
  CHECK(p != NULL);
  stalloc_torch_free(p, 3 << 20, 0, NULL);
  CHECK(stats_of(a).reserved_bytes > 0);
  stalloc_torch_reset();
  CHECK(stats_of(a).reserved_bytes == 0);

  /* memory fraction = a limit of that share of the device's memory. */
  uint64_t total;
  CHECK_OK(stalloc_allocator_device_memory(a, &total));
  stalloc_torch_set_memory_fraction(0.25, 0);
  CHECK(stats_of(a).memory_limit == (uint64_t)(0.25 * (double)total));
  stalloc_torch_set_memory_fraction(1e-9, 0); /* a few bytes: every new segment is refused */
  CHECK(stalloc_torch_malloc(1 << 20, 0, NULL) == NULL);
  stalloc_status_t status;
  CHECK(strstr(stalloc_torch_last_error(&status), "out of memory") != NULL && status == STALLOC_ERR_OUT_OF_MEMORY);
  stalloc_torch_set_memory_fraction(1.5, 0); /* refused, kept, limit unchanged */
  CHECK(strstr(stalloc_torch_last_error(&status), "outside 0..1") != NULL);
  CHECK(stats_of(a).memory_limit == ST_MAX_U64(1, (uint64_t)(1e-9 * (double)total)));
  stalloc_torch_set_memory_fraction(0.5, 7); /* no allocator there */
  CHECK(strstr(stalloc_torch_last_error(NULL), "device 7") != NULL);
  stalloc_torch_set_memory_fraction(1.0, 0); /* the whole device: no limit */
  CHECK(stats_of(a).memory_limit == 0);

  /* base allocation: the segment that holds the block. */
  p = stalloc_torch_malloc(1000, 0, NULL);
  void* q = stalloc_torch_malloc(1000, 0, NULL);
  size_t size = 0;
  void* base = stalloc_torch_base_alloc(q, &size);
  CHECK(base != NULL && (char*)base <= (char*)q && (char*)q + 1000 <= (char*)base + size);
  CHECK(stalloc_torch_base_alloc(p, &size) == base);
  CHECK(stalloc_torch_base_alloc((void*)0x10, &size) == NULL && size == 0);
  CHECK(strstr(stalloc_torch_last_error(&status), "not a live block") != NULL);
  CHECK(status == STALLOC_ERR_UNKNOWN_POINTER);

  /* record_stream on host memory: synchronous, so the block is reusable at once. */
  stalloc_torch_record_stream(q, (void*)0x2000);
  CHECK(stalloc_torch_failed_record_streams() == 0);
  stalloc_torch_free(q, 1000, 0, NULL);
  CHECK(stats_of(a).deferred_frees == 0);
  stalloc_torch_record_stream(q, (void*)0x2000); /* freed: counted, said */
  CHECK(stalloc_torch_failed_record_streams() == 1);
  stalloc_torch_free(p, 1000, 0, NULL);
  CHECK_OK(stalloc_torch_register(0, NULL));
  CHECK_OK(stalloc_allocator_destroy(a));
}

/* Over the mock driver, in a child (the driver is loaded once per process). */
static void record_stream_over_mock(void) {
  void* mock = dlopen(MOCK_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK(mock != NULL);
  void (*launch)(void*);
  void (*finish)(void*);
  *(void**)&launch = dlsym(mock, "mockcu_launch");
  *(void**)&finish = dlsym(mock, "mockcu_finish");
  CHECK(launch && finish);
  setenv("STALLOC_CUDA_DRIVER", MOCK_CUDA_PATH, 1);
  stalloc_allocator_t* a = make(STALLOC_BACKEND_CUDA, 0);
  CHECK_OK(stalloc_torch_register(0, a));
  uint64_t failed_frees = stalloc_torch_failed_frees(), failed_records = stalloc_torch_failed_record_streams();
  void* main_stream = (void*)0x1000;
  void* side = (void*)0x2000; /* NCCL's, say */
  const size_t n = 8 << 20;
  void* p = stalloc_torch_malloc(n, 0, main_stream);
  CHECK(p != NULL);
  stalloc_torch_record_stream(p, side);
  launch(side); /* the side stream still reads p */
  stalloc_torch_free(p, n, 0, main_stream);
  void* q = stalloc_torch_malloc(n, 0, main_stream);
  CHECK(q != NULL && !overlaps(p, q, n)); /* not even the main stream gets it back */
  stalloc_torch_free(q, n, 0, main_stream);
  finish(side);
  bool got_p = false;
  void* r[4];
  for (int i = 0; i < 4; i++) {
    r[i] = stalloc_torch_malloc(n, 0, main_stream);
    got_p |= r[i] == p;
  }
  CHECK(got_p); /* once the side stream is done, the bytes serve again */
  for (int i = 0; i < 4; i++) stalloc_torch_free(r[i], n, 0, main_stream);
  CHECK(stalloc_torch_failed_frees() == failed_frees && stalloc_torch_failed_record_streams() == failed_records);
  CHECK_OK(stalloc_torch_register(0, NULL));
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_record_stream_over_mock(void) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    record_stream_over_mock();
    _exit(0);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_malloc_and_free(void) {
  stalloc_status_t status;
  CHECK(stalloc_torch_malloc(100, 0, NULL) == NULL); /* nothing registered */
  CHECK(strstr(stalloc_torch_last_error(&status), "no stalloc allocator") != NULL);
  CHECK(status == STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_torch_register(64, NULL), STALLOC_ERR_INVALID_ARGUMENT);

  stalloc_options_t o;
  stalloc_options_init(&o);
  o.memory_limit = 8 << 20;
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  CHECK_OK(stalloc_torch_register(0, a));
  void* stream = (void*)0x1234;
  void* p = stalloc_torch_malloc(1000, 0, stream);
  CHECK(p != NULL && (uintptr_t)p % 512 == 0);
  memset(p, 7, 1000);
  CHECK(stalloc_torch_malloc(100, 1, stream) == NULL); /* device 1 has none */
  CHECK(stalloc_torch_malloc((size_t)64 << 20, 0, stream) == NULL);
  CHECK(strstr(stalloc_torch_last_error(&status), "out of memory") != NULL);
  CHECK(status == STALLOC_ERR_OUT_OF_MEMORY);

  stalloc_torch_free(p, 999, 0, stream); /* wrong size: refused, counted, nothing freed */
  CHECK(stalloc_torch_failed_frees() == 1);
  size_t size;
  CHECK_OK(stalloc_allocator_block_size(a, p, &size));
  stalloc_torch_free(p, 1000, 0, stream);
  stalloc_torch_free(p, 1000, 0, stream); /* double free: counted */
  CHECK(stalloc_torch_failed_frees() == 2);
  CHECK(strstr(stalloc_torch_last_error(NULL), "already freed") != NULL);
  stalloc_stats_t s;
  stalloc_stats_init(&s);
  CHECK_OK(stalloc_allocator_stats(a, &s));
  CHECK(s.active_blocks == 0 && s.alloc_count == 1 && s.free_count == 1);
  CHECK_OK(stalloc_torch_register(0, NULL));
  CHECK_OK(stalloc_allocator_destroy(a));
}

int main(void) {
  RUN(test_malloc_and_free);
  RUN(test_hooks_on_host);
  RUN(test_record_stream_over_mock);
  return 0;
}
