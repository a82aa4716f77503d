/* planner.h - the planner's pipeline stages, shared by period.c, classify.c, reuse.c,
 * planner.c and plan_file.c. Time inside the planner is "alloc time": the index of an alloc in
 * the trace's alloc sequence. A request lives over [alloc index, free position), where the free
 * position is the number of allocs that happened before its free. Two requests overlap in alloc
 * time exactly when they overlap in event time, and the peak of live bytes is the same, so
 * nothing is lost, while every steady-state iteration becomes exactly `period` units long. */
#ifndef STALLOC_PLANNER_H
#define STALLOC_PLANNER_H

#include "plan.h"
#include "trace.h"

#define ST_NEVER UINT64_MAX /* free position of a request never freed */

/* period.c: where the steady state begins and how long one iteration is. */
typedef struct st_period {
  size_t start;          /* alloc index of the first steady-state iteration (= prologue count) */
  size_t period;         /* allocs per iteration; 0 = no steady state found (static plan) */
  size_t iterations;     /* complete steady-state iterations in the trace */
  bool from_markers;     /* found from step markers (else from the alloc-size sequence) */
} st_period;

/* Finds the steady state: from step markers when use_markers and the trace has them, else from
 * the period of the alloc-size sequence (exact, or with sizes differing at a minority of
 * positions, as MoE steps do). Never fails: no steady state gives period = 0. */
void st_period_find(const stalloc_trace_t* trace, const uint64_t* sizes, size_t n,
                    bool use_markers, st_period* out);

/* classify.c: one alloc's class and its lifetime in alloc time. */
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
 * there makes a position dynamic too (warm_len 0: none). Arrays are caller-allocated. */
void st_classify(const uint64_t* sizes, const uint64_t* free_pos, size_t n,
                 const st_period* period, bool classify_tiny, uint64_t tiny_threshold,
                 size_t warm_start, size_t warm_len, st_class_item* prologue,
                 st_class_item* iteration);

/* reuse.c: the reuse windows of the iteration's dynamic positions (out has room for p); gap
 * 0: overlapping lifetimes merge; else a position also must come within gap allocs of the
 * window's last one. */
size_t st_reuse_windows(const st_class_item* iteration, size_t p, uint64_t gap,
                        st_reuse_window* out);
/* reuse.c: Dynamic Reusable Space. Fills plan->windows / plan->ranges (allocated here) from
 * the plan's entries, the iteration's lifetimes and the arenas (arena k belongs to window k;
 * none when arena_count is 0) at their offsets. */
stalloc_status_t st_reuse_compute(stalloc_plan* plan, const st_class_item* prologue,
                                  const st_class_item* iteration, const st_class_item* arenas,
                                  const uint64_t* arena_offsets, size_t arena_count,
                                  uint64_t gap);

/* reuse.c: one arena per reuse window (the same windows st_reuse_compute finds): a class item
 * over the window's positions, sized for the most live bytes (aligned) its dynamic requests
 * reached in any recorded iteration, times headroom. The placement reserves it like a periodic
 * request; st_reuse_compute then finds it free during the window, so the runtime places the
 * window's dynamic requests there. out has room for one per dynamic position. */
stalloc_status_t st_reuse_arenas(const uint64_t* sizes, const uint64_t* free_pos,
                                 const st_period* per, const st_class_item* it, double headroom,
                                 uint64_t alignment, uint64_t gap, st_class_item* out,
                                 size_t* count);

/* planner.c */
uint64_t st_plan_fingerprint(const stalloc_plan* plan);
/* Same, from a trace's first allocs, with the plan's dynamic positions masked. */
stalloc_status_t st_plan_fingerprint_trace(const stalloc_plan* plan, const stalloc_trace_t* trace,
                                           uint64_t* fingerprint);
/* Checks a plan's internal consistency (what a loaded plan must satisfy). */
stalloc_status_t st_plan_validate(const stalloc_plan* plan, const char* what);
void st_plan_free(stalloc_plan* plan);

#endif
