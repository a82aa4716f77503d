/* test_allocator.c - the allocator's contract on the host and virtual backends: alignment,
 * exact statistics, double frees and stray pointers, memory limits, sized frees, threads. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static stalloc_allocator_t* make(stalloc_backend_kind_t backend, uint64_t alignment, uint64_t limit) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = backend;
  if (alignment) o.alignment = alignment;
  o.memory_limit = limit;
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  return a;
}

static void test_alignment_and_data(void) {
  const uint64_t aligns[] = {512, 64, 4096, 1 << 16};
  for (size_t k = 0; k < 4; k++) {
    stalloc_allocator_t* a = make(STALLOC_BACKEND_HOST, aligns[k], 0);
    void* ptrs[200];
    for (int i = 0; i < 200; i++) {
      size_t size = 1 + (size_t)(i * 7919) % 300000;
      CHECK_OK(stalloc_allocator_alloc(a, size, 0, 0, &ptrs[i]));
      CHECK(ptrs[i] != NULL);
      CHECK((uintptr_t)ptrs[i] % aligns[k] == 0);
      memset(ptrs[i], i & 0xFF, size);
    }
    for (int i = 0; i < 200; i++) {
      size_t size = 1 + (size_t)(i * 7919) % 300000;
      const unsigned char* p = ptrs[i];
      CHECK(p[0] == (i & 0xFF) && p[size - 1] == (i & 0xFF));
    }
    for (int i = 0; i < 200; i += 2) CHECK_OK(stalloc_allocator_free(a, ptrs[i]));
    for (int i = 1; i < 200; i += 2) CHECK_OK(stalloc_allocator_free(a, ptrs[i]));
    stalloc_stats_t s = stats_of(a);
    CHECK(s.allocated_bytes == 0 && s.active_blocks == 0);
    CHECK(s.alloc_count == 200 && s.free_count == 200);
    CHECK_OK(stalloc_allocator_destroy(a));
  }
}

/* Alignments above the growable pool's 2 MiB granule (found by fuzz_options): the pool's
 * offsets were multiples of the alignment but its base only of the granule, so pointers were
 * 2 MiB aligned where 64 MiB was asked. Each backend, with and without the growable pool. */
static void test_alignment_above_the_granule(void) {
  const stalloc_backend_kind_t backends[] = {STALLOC_BACKEND_HOST, STALLOC_BACKEND_VIRTUAL};
  const uint64_t aligns[] = {4ull << 20, 64ull << 20, 1ull << 30};
  for (size_t b = 0; b < 2; b++)
    for (int growable = 0; growable < 2; growable++)
      for (size_t k = 0; k < 3; k++) {
        stalloc_options_t o;
        stalloc_options_init(&o);
        o.backend = backends[b];
        o.alignment = aligns[k];
        o.growable_pool = growable;
        o.virtual_capacity = 1ull << 40;
        stalloc_allocator_t* a;
        CHECK_OK(stalloc_allocator_create(&o, &a));
        const size_t sizes[] = {1, 512, 4096, 3u << 20};
        void* p[4];
        for (int i = 0; i < 4; i++) {
          CHECK_OK(stalloc_allocator_alloc(a, sizes[i], 0, 0, &p[i]));
          CHECK((uintptr_t)p[i] % aligns[k] == 0);
        }
        for (int i = 0; i < 4; i++) CHECK_OK(stalloc_allocator_free(a, p[i]));
        CHECK_OK(stalloc_allocator_destroy(a));
      }
}

static void test_zero_and_null(void) {
  stalloc_allocator_t* a = make(STALLOC_BACKEND_HOST, 0, 0);
  void* p = (void*)1;
  CHECK_OK(stalloc_allocator_alloc(a, 0, 0, 0, &p));
  CHECK(p == NULL);
  CHECK_OK(stalloc_allocator_free(a, NULL));
  CHECK_STATUS(stalloc_allocator_alloc(a, 16, 3, 0, &p), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_allocator_alloc(NULL, 16, 0, 0, &p), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_double_free_and_unknown(void) {
  stalloc_allocator_t* a = make(STALLOC_BACKEND_HOST, 0, 0);
  void *p, *q;
  CHECK_OK(stalloc_allocator_alloc(a, 1000, 0, 0, &p));
  CHECK_OK(stalloc_allocator_alloc(a, 2000, 0, 0, &q));
  stalloc_stats_t before = stats_of(a);
  int local;
  CHECK_STATUS(stalloc_allocator_free(a, &local), STALLOC_ERR_UNKNOWN_POINTER);
  CHECK_STATUS(stalloc_allocator_free(a, (char*)p + 512), STALLOC_ERR_UNKNOWN_POINTER);
  CHECK(strstr(stalloc_last_error(), "not given out") != NULL);
  stalloc_stats_t after = stats_of(a);
  CHECK(memcmp(&before, &after, sizeof before) == 0); /* errors change nothing */
  CHECK_OK(stalloc_allocator_free(a, p));
  before = stats_of(a);
  CHECK_STATUS(stalloc_allocator_free(a, p), STALLOC_ERR_DOUBLE_FREE);
  after = stats_of(a);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  /* q is still live and intact after the bad frees. */
  size_t size;
  CHECK_OK(stalloc_allocator_block_size(a, q, &size));
  CHECK(size == 2000);
  /* The sized form checks what PyTorch passes back. */
  CHECK_STATUS(stalloc_allocator_free_sized(a, q, 1999, 0, 0), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_OK(stalloc_allocator_free_sized(a, q, 2000, 0, 7));
  CHECK_STATUS(stalloc_allocator_free_sized(a, q, 2000, 0, 7), STALLOC_ERR_DOUBLE_FREE);
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_memory_limit(void) {
  const uint64_t MiB = 1 << 20;
  stalloc_allocator_t* a = make(STALLOC_BACKEND_HOST, 0, 8 * MiB);
  void* p[8];
  int n = 0;
  /* 3 MiB requests: the cached 20 MiB segment breaks the limit, so exact sizes are used. */
  while (n < 8 && stalloc_allocator_alloc(a, 3 * MiB, 0, 0, &p[n]) == STALLOC_OK) n++;
  CHECK(n == 2);
  CHECK(strstr(stalloc_last_error(), "out of memory") != NULL);
  stalloc_stats_t s = stats_of(a);
  CHECK(s.reserved_bytes <= 8 * MiB && s.failed_allocs == 1);
  /* Freeing lets a bigger block in: cached segments are given back and the request retried. */
  CHECK_OK(stalloc_allocator_free(a, p[0]));
  CHECK_OK(stalloc_allocator_free(a, p[1]));
  void* big;
  CHECK_OK(stalloc_allocator_alloc(a, 7 * MiB, 0, 0, &big));
  CHECK(stats_of(a).reserved_bytes <= 8 * MiB);
  CHECK_OK(stalloc_allocator_free(a, big));
  CHECK_OK(stalloc_allocator_release_cached(a));
  CHECK(stats_of(a).reserved_bytes == 0);
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_virtual_backend(void) {
  const uint64_t GiB = 1ull << 30;
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  o.virtual_capacity = 256 * GiB;
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  void* p[60];
  for (int i = 0; i < 60; i++) {
    CHECK_OK(stalloc_allocator_alloc(a, GiB, 0, 0, &p[i])); /* 60 GiB, nothing touched */
    CHECK((uintptr_t)p[i] % 512 == 0);
  }
  CHECK(stats_of(a).reserved_bytes >= 60 * GiB);
  for (int i = 0; i < 60; i++) CHECK_OK(stalloc_allocator_free(a, p[i]));
  CHECK_OK(stalloc_allocator_release_cached(a));
  CHECK_OK(stalloc_allocator_alloc(a, 100 * GiB, 0, 0, &p[0]));
  void* too_big;
  CHECK_STATUS(stalloc_allocator_alloc(a, 200 * GiB, 0, 0, &too_big), STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(too_big == NULL);
  CHECK_OK(stalloc_allocator_destroy(a));
}

static void test_cuda_without_driver(void) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_CUDA;
  stalloc_allocator_t* a = (stalloc_allocator_t*)1;
  stalloc_status_t s = stalloc_allocator_create(&o, &a);
  if (s == STALLOC_OK) { /* a machine with a GPU */
    CHECK_OK(stalloc_allocator_destroy(a));
    return;
  }
  CHECK(a == NULL);
  CHECK(s == STALLOC_ERR_NO_DEVICE || s == STALLOC_ERR_UNSUPPORTED || s == STALLOC_ERR_BACKEND);
  CHECK(stalloc_last_error()[0] != '\0');
}

static void test_bad_options(void) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.alignment = 768;
  stalloc_allocator_t* a;
  CHECK_STATUS(stalloc_allocator_create(&o, &a), STALLOC_ERR_INVALID_ARGUMENT);
  o.alignment = 512;
  o.tiny_alignment = 24;
  CHECK_STATUS(stalloc_allocator_create(&o, &a), STALLOC_ERR_INVALID_ARGUMENT);
  o.tiny_alignment = 0; /* the same as alignment */
  CHECK_OK(stalloc_allocator_create(&o, &a));
  CHECK_OK(stalloc_allocator_destroy(a));
  o.struct_size = 0;
  CHECK_STATUS(stalloc_allocator_create(&o, &a), STALLOC_ERR_INVALID_ARGUMENT);
  stalloc_backend_kind_t k;
  CHECK_OK(stalloc_backend_parse("virtual", &k));
  CHECK(k == STALLOC_BACKEND_VIRTUAL);
  CHECK_STATUS(stalloc_backend_parse("tpu", &k), STALLOC_ERR_INVALID_ARGUMENT);
}

/* ---- four threads allocating and freeing, some frees crossing threads ---- */

#define THREADS 4
#define ROUNDS 20000
static stalloc_allocator_t* shared;
static void* handoff[THREADS][64]; /* blocks each thread leaves for its neighbour to free */

static void* worker(void* arg) {
  int me = (int)(intptr_t)arg;
  uint32_t rng = 12345u + (uint32_t)me;
  void* mine[32] = {0};
  size_t sizes[32] = {0};
  for (int r = 0; r < ROUNDS; r++) {
    rng = rng * 1103515245u + 12345u;
    int slot = (rng >> 8) % 32;
    if (mine[slot]) {
      unsigned char* p = mine[slot];
      CHECK(p[0] == (unsigned char)me && p[sizes[slot] - 1] == (unsigned char)me);
      CHECK_OK(stalloc_allocator_free(shared, mine[slot]));
      mine[slot] = NULL;
    } else {
      sizes[slot] = 1 + (rng >> 4) % 70000;
      CHECK_OK(stalloc_allocator_alloc(shared, sizes[slot], 0, 0, &mine[slot]));
      memset(mine[slot], me, sizes[slot]);
    }
  }
  for (int i = 0; i < 32; i++) CHECK_OK(stalloc_allocator_free(shared, mine[i]));
  for (int i = 0; i < 64; i++) CHECK_OK(stalloc_allocator_alloc(shared, 1000 + i, 0, 0, &handoff[me][i]));
  return NULL;
}

static void* freer(void* arg) {
  int me = (int)(intptr_t)arg;
  int victim = (me + 1) % THREADS;
  for (int i = 0; i < 64; i++) CHECK_OK(stalloc_allocator_free(shared, handoff[victim][i]));
  return NULL;
}

static void test_threads_exact_stats(void) {
  shared = make(STALLOC_BACKEND_HOST, 0, 0);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  stalloc_stats_t s = stats_of(shared);
  uint64_t handoff_bytes = 0;
  for (int i = 0; i < 64; i++) handoff_bytes += 1000 + i;
  CHECK(s.active_blocks == THREADS * 64);
  CHECK(s.allocated_bytes == THREADS * handoff_bytes);
  CHECK(s.alloc_count - s.free_count == THREADS * 64);
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, freer, (void*)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  s = stats_of(shared);
  CHECK(s.active_blocks == 0 && s.allocated_bytes == 0 && s.alloc_count == s.free_count);
  CHECK(s.peak_allocated_bytes > 0 && s.peak_reserved_bytes >= s.peak_allocated_bytes);
  CHECK_OK(stalloc_allocator_destroy(shared));
}

int main(void) {
  CHECK(stalloc_version() == STALLOC_VERSION);
  RUN(test_alignment_and_data);
  RUN(test_alignment_above_the_granule);
  RUN(test_zero_and_null);
  RUN(test_double_free_and_unknown);
  RUN(test_memory_limit);
  RUN(test_virtual_backend);
  RUN(test_cuda_without_driver);
  RUN(test_bad_options);
  RUN(test_threads_exact_stats);
  return 0;
}
