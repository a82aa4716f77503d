/* internal.h - declarations shared between libstalloc's source files, grouped by the file
 * that defines them. Nothing here is exported from the shared library. */
#ifndef STALLOC_INTERNAL_H
#define STALLOC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stalloc/stalloc.h"

#define ST_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ST_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Rounds x up to a multiple of the power of two a; 0 on overflow. */
static inline uint64_t st_align_up(uint64_t x, uint64_t a) {
  if (x > UINT64_MAX - (a - 1)) return 0;
  return (x + a - 1) & ~(a - 1);
}
static inline bool st_is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* A caller's cancel flag is written from another thread; read it as an atomic so the read is
 * well defined (the public type stays a plain int for callers without <stdatomic.h>). */
static inline bool st_cancel_requested(const volatile int* cancel) {
  return cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED) != 0;
}

/* status.c: records the failure (thread-local message, error callback) and returns status. */
stalloc_status_t st_fail(stalloc_status_t status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void st_clear_error(void);

/* options.c: STALLOC_CUDA_DRIVER, read when the cuda backend first loads the driver. */
const char* st_options_cuda_driver(void);

/* crc32.c */
uint32_t st_crc32(uint32_t crc, const void* data, size_t len);

/* thread.c: a small number per thread, stable for the thread's life (for traces). */
uint32_t st_thread_number(void);

/* Bytes held from the backend, shared by every pool of one allocator. */
typedef struct st_budget {
  uint64_t limit; /* 0 = none */
  uint64_t reserved, peak_reserved;
  uint64_t segments, backend_allocs, backend_frees;
} st_budget;

/* budget.c helpers are inline: true when `bytes` more may be reserved. */
static inline bool st_budget_allows(const st_budget* b, uint64_t bytes) {
  return !b->limit || (b->reserved <= b->limit && bytes <= b->limit - b->reserved);
}
static inline void st_budget_add(st_budget* b, uint64_t bytes) {
  b->reserved += bytes;
  b->segments++;
  b->backend_allocs++;
  if (b->reserved > b->peak_reserved) b->peak_reserved = b->reserved;
}
static inline void st_budget_sub(st_budget* b, uint64_t bytes) {
  b->reserved -= bytes;
  b->segments--;
  b->backend_frees++;
}

/* trace.c */
stalloc_status_t st_trace_reserve(stalloc_trace_t* trace, size_t events);

#endif
