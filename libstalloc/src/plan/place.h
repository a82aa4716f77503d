/* place.h - static placement: offsets for items with fixed lifetimes so that no two items
 * whose lifetimes overlap share a byte, with the peak (largest offset + size) as low as
 * possible. The planner's core; also the MiniMalloc CSV problem. Defined in place.c. */
#ifndef STALLOC_PLACE_H
#define STALLOC_PLACE_H

#include "base/internal.h"

#define PLACE_FREE UINT64_MAX

typedef struct st_place_item {
  uint64_t lower, upper;  /* lifetime, half-open [lower, upper) */
  uint64_t size;          /* bytes; the solver rounds up to the alignment */
  uint64_t fixed_offset;  /* PLACE_FREE, or an offset the solver must keep */
} st_place_item;

typedef struct st_place_params {
  uint64_t alignment;     /* offsets are multiples of this (1 = none) */
  double time_limit;      /* seconds for the improving search; 0 = constructive only */
  const volatile int* cancel; /* optional: non-zero stops the search, keeping the best found */
  bool every_ordering;    /* with time_limit 0: large partitions (up to GREEDY_BIG items) still
                             get every greedy ordering, whatever they take, and no search: the
                             same result on every machine */
} st_place_params;

typedef struct st_place_result {
  uint64_t peak;          /* largest offset + size */
  uint64_t lower_bound;   /* max over time of live (aligned) bytes */
  uint32_t orderings_tried;
  uint64_t backtracks;
  bool optimal;           /* peak == lower_bound, or proven optimal */
  double seconds;
} st_place_result;

/* Fills offsets[i] for every item. Fails only on bad input (overlapping fixed items,
 * upper < lower, overflow) or no host memory. */
stalloc_status_t st_place(const st_place_item* items, size_t n, const st_place_params* params,
                          uint64_t* offsets, st_place_result* result);

#endif
