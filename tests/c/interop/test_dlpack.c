/* test_dlpack.c - DLPack export: the tensor's fields, the deleter freeing the block, the
 * exporter keeping an owned allocator alive, bad arguments, and deleters from many threads. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "interop/dlpack.h"

static stalloc_allocator_t* make_host(void) {
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(NULL, &a));
  return a;
}

static void test_fields_and_deleter(void) {
  stalloc_allocator_t* a = make_host();
  stalloc_dlpack_exporter_t* e;
  CHECK_OK(stalloc_dlpack_exporter_create(a, 0, &e));
  int64_t shape[3] = {2, 3, 5};
  void* out;
  CHECK_OK(stalloc_dlpack_create(e, shape, 3, ST_DL_FLOAT, 32, 1, ST_DL_CPU, 0, &out));
  st_dl_managed_tensor* m = out;
  CHECK(m->dl_tensor.ndim == 3);
  CHECK(m->dl_tensor.shape[0] == 2 && m->dl_tensor.shape[2] == 5);
  CHECK(m->dl_tensor.strides[0] == 15 && m->dl_tensor.strides[1] == 5 && m->dl_tensor.strides[2] == 1);
  CHECK(m->dl_tensor.dtype.code == ST_DL_FLOAT && m->dl_tensor.dtype.bits == 32);
  CHECK(m->dl_tensor.device.device_type == ST_DL_CPU);
  CHECK((uintptr_t)m->dl_tensor.data % 64 == 0); /* what zero copy into XLA on CPU needs */
  memset(m->dl_tensor.data, 0x5A, 2 * 3 * 5 * 4);
  void* data;
  uint64_t bytes;
  CHECK_OK(stalloc_dlpack_data(out, &data, &bytes));
  CHECK(data == m->dl_tensor.data && bytes == 120);
  CHECK(stats_of(a).allocated_bytes == 120);
  uint64_t live;
  CHECK_OK(stalloc_dlpack_exporter_live(e, &live));
  CHECK(live == 1);
  m->deleter(m);
  CHECK(stats_of(a).allocated_bytes == 0 && stats_of(a).active_blocks == 0);
  CHECK_OK(stalloc_dlpack_exporter_live(e, &live));
  CHECK(live == 0);
  /* A scalar and an empty tensor. */
  CHECK_OK(stalloc_dlpack_create(e, NULL, 0, ST_DL_INT, 64, 1, ST_DL_CPU, 0, &out));
  CHECK(((st_dl_managed_tensor*)out)->dl_tensor.data != NULL);
  CHECK(stats_of(a).allocated_bytes == 8);
  CHECK_OK(stalloc_dlpack_delete(out));
  int64_t empty[2] = {4, 0};
  CHECK_OK(stalloc_dlpack_create(e, empty, 2, ST_DL_FLOAT, 16, 1, ST_DL_CPU, 0, &out));
  CHECK(((st_dl_managed_tensor*)out)->dl_tensor.data != NULL);
  CHECK_OK(stalloc_dlpack_delete(out));
  CHECK(stats_of(a).active_blocks == 0);
  CHECK_OK(stalloc_dlpack_exporter_release(e));
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_bad_arguments(void) {
  stalloc_allocator_t* a = make_host();
  stalloc_dlpack_exporter_t* e;
  CHECK_OK(stalloc_dlpack_exporter_create(a, 0, &e));
  int64_t shape[2] = {2, -1};
  void* out = (void*)1;
  CHECK_STATUS(stalloc_dlpack_create(e, shape, 2, ST_DL_FLOAT, 32, 1, ST_DL_CPU, 0, &out),
               STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(out == NULL);
  shape[1] = 3;
  CHECK_STATUS(stalloc_dlpack_create(e, shape, 2, ST_DL_FLOAT, 12, 1, ST_DL_CPU, 0, &out),
               STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_dlpack_create(e, shape, 2, ST_DL_FLOAT, 32, 1, ST_DL_CUDA, 0, &out),
               STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_dlpack_create(e, shape, 65, ST_DL_FLOAT, 32, 1, ST_DL_CPU, 0, &out),
               STALLOC_ERR_INVALID_ARGUMENT);
  int64_t huge[2] = {INT64_MAX, 4};
  CHECK_STATUS(stalloc_dlpack_create(e, huge, 2, ST_DL_FLOAT, 32, 1, ST_DL_CPU, 0, &out),
               STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_dlpack_create(NULL, shape, 2, ST_DL_FLOAT, 32, 1, ST_DL_CPU, 0, &out),
               STALLOC_ERR_INVALID_ARGUMENT);
  CHECK(stats_of(a).active_blocks == 0);
  CHECK_OK(stalloc_dlpack_exporter_release(e));
  CHECK_OK(stalloc_allocator_destroy(a));

  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  o.virtual_capacity = 1 << 24;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  CHECK_STATUS(stalloc_dlpack_exporter_create(a, 0, &e), STALLOC_ERR_UNSUPPORTED);
  CHECK_OK(stalloc_allocator_destroy(a));
}

/* An owned allocator outlives the exporter's release while a tensor is alive. */
static void test_owned_allocator_outlives_release(void) {
  stalloc_allocator_t* a = make_host();
  stalloc_dlpack_exporter_t* e;
  CHECK_OK(stalloc_dlpack_exporter_create(a, 1, &e));
  int64_t n = 1000;
  void* out;
  CHECK_OK(stalloc_dlpack_create(e, &n, 1, ST_DL_UINT, 8, 1, ST_DL_CPU, 0, &out));
  CHECK_OK(stalloc_dlpack_exporter_release(e));
  /* The allocator is still there: the block is writable and its free succeeds. */
  memset(((st_dl_managed_tensor*)out)->dl_tensor.data, 1, 1000);
  CHECK(stats_of(a).allocated_bytes == 1000);
  CHECK_OK(stalloc_dlpack_delete(out)); /* destroys the allocator (ASan would catch a leak) */
}

#define THREADS 4
#define PER_THREAD 2000
typedef struct { stalloc_dlpack_exporter_t* e; } worker_arg;

static void* worker(void* p) {
  worker_arg* w = p;
  void* held[8] = {0};
  for (int i = 0; i < PER_THREAD; i++) {
    int slot = i % 8;
    if (held[slot]) stalloc_dlpack_delete(held[slot]);
    int64_t shape[2] = {1 + i % 17, 1 + i % 5};
    CHECK_OK(stalloc_dlpack_create(w->e, shape, 2, ST_DL_FLOAT, 32, 1, ST_DL_CPU, 0, &held[slot]));
  }
  for (int k = 0; k < 8; k++) stalloc_dlpack_delete(held[k]);
  return NULL;
}

static void test_threads(void) {
  stalloc_allocator_t* a = make_host();
  stalloc_dlpack_exporter_t* e;
  CHECK_OK(stalloc_dlpack_exporter_create(a, 0, &e));
  pthread_t t[THREADS];
  worker_arg w = {e};
  for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, worker, &w) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  stalloc_stats_t s = stats_of(a);
  CHECK(s.active_blocks == 0 && s.allocated_bytes == 0);
  CHECK(s.alloc_count == THREADS * PER_THREAD && s.free_count == THREADS * PER_THREAD);
  uint64_t live;
  CHECK_OK(stalloc_dlpack_exporter_live(e, &live));
  CHECK(live == 0);
  CHECK_OK(stalloc_dlpack_exporter_release(e));
  CHECK_OK(stalloc_allocator_destroy(a));
}

int main(void) {
  RUN(test_fields_and_deleter);
  RUN(test_bad_arguments);
  RUN(test_owned_allocator_outlives_release);
  RUN(test_threads);
  return 0;
}
