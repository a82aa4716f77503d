/* hand_plan.h - for the C tests that build a plan by hand: fills in what the plan's rules
 * (plan/plan_validate.c) derive from its entries, the plan peak and the fingerprint, so that
 * only the rule a test means to break is broken. */
#ifndef STALLOC_HAND_PLAN_H
#define STALLOC_HAND_PLAN_H

#include "plan/planner.h"

static inline void seal_plan(stalloc_plan* p) {
  uint64_t peak = 0;
  for (size_t i = 0; i < p->prologue_count + p->iteration_count; i++) {
    const st_plan_entry* e = i < p->prologue_count ? &p->prologue[i]
                                                   : &p->iteration[i - p->prologue_count];
    if (e->offset != PLAN_NO_OFFSET && e->offset + e->size > peak) peak = e->offset + e->size;
  }
  p->plan_peak = peak;
  p->fingerprint = st_plan_fingerprint(p);
}

#endif
