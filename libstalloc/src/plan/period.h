/* period.h - iteration detection (period.c). */
#ifndef STALLOC_PERIOD_H
#define STALLOC_PERIOD_H

#include "trace/trace.h"

/* Where the steady state begins and how long one iteration is. */
typedef struct st_period {
  size_t start;          /* alloc index of the first steady-state iteration (= prologue count) */
  size_t period;         /* allocs per iteration; 0 = no steady state found (static plan) */
  size_t iterations;     /* complete steady-state iterations in the trace */
  bool from_markers;     /* found from step markers (else from the alloc-size sequence) */
} st_period;

/* Finds the steady state: from step markers when use_markers and the trace has them, else from
 * the period of the alloc-size sequence (exact, or with sizes differing at a minority of
 * positions, as MoE steps do). tolerate_sizes: steps between markers with the same alloc
 * count are one kind whatever their sizes (dynamic padding, a curriculum). Never fails: no
 * steady state gives period = 0. */
void st_period_find(const stalloc_trace_t* trace, const uint64_t* sizes, size_t n,
                    bool use_markers, bool tolerate_sizes, st_period* out);

#endif
