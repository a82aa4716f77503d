/* classify.h - every request's class and lifetime (classify.c). Time inside the planner is
 * "alloc time": the index of an alloc in the trace's alloc sequence. A request lives over [alloc index, free position), where the free
 * position is the number of allocs that happened before its free. Two requests overlap in alloc
 * time exactly when they overlap in event time, and the peak of live bytes is the same, so
 * nothing is lost, while every steady-state iteration becomes exactly `period` units long. */
#ifndef STALLOC_CLASSIFY_H
#define STALLOC_CLASSIFY_H

#include "plan/period.h"
#include "plan/plan.h"

#define ST_NEVER UINT64_MAX /* free position of a request never freed */

/* One alloc's class and its lifetime in alloc time. */
typedef struct st_class_item {
  uint64_t size;   /* requested bytes (template iteration for iteration positions) */
  uint64_t begin;  /* alloc time; iteration positions: relative to the iteration start */
  uint64_t end;    /* free time (ST_NEVER: until the end); iteration positions: relative, the
                      latest seen over all steady iterations, may exceed period (crosses the
                      boundary into the next iteration) */
  uint32_t cls;    /* PLAN_CLASS_* */
} st_class_item;

/* Classifies the prologue (allocs before period.start) and the template iteration (the period
 * positions). free_pos[i] is the free position of alloc i (ST_NEVER if never freed).
 * classify_tiny: requests <= tiny_threshold go to the slab. The warm_len allocs from
 * warm_start (in the prologue) line up with the iteration's first positions: a size differing
 * there makes a position dynamic too (warm_len 0: none). tolerate_sizes: a position whose size
 * varies but whose lifetime repeats is periodic at the largest size seen. Arrays are
 * caller-allocated. */
void st_classify(const uint64_t* sizes, const uint64_t* free_pos, size_t n,
                 const st_period* period, bool classify_tiny, uint64_t tiny_threshold,
                 size_t warm_start, size_t warm_len, bool tolerate_sizes,
                 st_class_item* prologue, st_class_item* iteration);

#endif
