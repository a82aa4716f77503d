/* planner.h - the plan's own operations (planner.c): fingerprint, release. The
 * pipeline's stages have their own headers: period.h, classify.h, place.h, reuse.h. */
#ifndef STALLOC_PLANNER_H
#define STALLOC_PLANNER_H

#include "plan/plan.h"
#include "trace/trace.h"

uint64_t st_plan_fingerprint(const stalloc_plan* plan);
/* Same, from a trace's first allocs, with the plan's dynamic positions masked. */
stalloc_status_t st_plan_fingerprint_trace(const stalloc_plan* plan, const stalloc_trace_t* trace,
                                           uint64_t* fingerprint);
void st_plan_free(stalloc_plan* plan);

#endif
