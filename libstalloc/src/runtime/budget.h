/* budget.h - bytes held from the backend, shared by every pool of one allocator (the fallback
 * pool, the plan's pool, the slab); the memory limit is checked here. Inline only. */
#ifndef STALLOC_BUDGET_H
#define STALLOC_BUDGET_H

#include "base/internal.h"

typedef struct st_budget {
  uint64_t limit; /* 0 = none */
  uint64_t reserved, peak_reserved;
  uint64_t segments, backend_allocs, backend_frees;
} st_budget;

/* True when `bytes` more may be reserved. */
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

#endif
