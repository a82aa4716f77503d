/* internal.h - what every stage of libstalloc shares: the public header, small arithmetic
 * helpers and error reporting (status.c). Each stage's own declarations live in its folder's
 * headers (docs/architecture.md). Nothing here is exported from the shared library. */
#ifndef STALLOC_INTERNAL_H
#define STALLOC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "stalloc/stalloc.h"

#define ST_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ST_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Rounds x up to a multiple of the power of two a; 0 on overflow. */
static inline uint64_t st_align_up(uint64_t x, uint64_t a) {
  if (x > UINT64_MAX - (a - 1)) return 0;
  return (x + a - 1) & ~(a - 1);
}
static inline bool st_is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* qsort for arrays that may be empty: qsort's pointer must not be NULL even for n = 0, and an
 * empty array here often is NULL (fuzz_replay found one in plan/reuse.c). */
static inline void st_sort(void* base, size_t n, size_t size, int (*cmp)(const void*, const void*)) {
  if (n > 1) qsort(base, n, size, cmp);
}

/* A caller's cancel flag is written from another thread; read it as an atomic so the read is
 * well defined (the public type stays a plain int for callers without <stdatomic.h>). */
static inline bool st_cancel_requested(const volatile int* cancel) {
  return cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED) != 0;
}

/* status.c: records the failure (thread-local message, error callback) and returns status. */
stalloc_status_t st_fail(stalloc_status_t status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void st_clear_error(void);

#endif
