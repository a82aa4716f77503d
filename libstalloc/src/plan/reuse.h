/* reuse.h - Dynamic Reusable Space and the arenas of dynamic requests (reuse.c). */
#ifndef STALLOC_REUSE_H
#define STALLOC_REUSE_H

#include "plan/classify.h"

/* The reuse windows of the iteration's dynamic positions (out has room for p); gap
 * 0: overlapping lifetimes merge; else a position also must come within gap allocs of the
 * window's last one. */
size_t st_reuse_windows(const st_class_item* iteration, size_t p, uint64_t gap,
                        st_reuse_window* out);
/* Dynamic Reusable Space: fills plan->windows / plan->ranges (allocated here) from
 * the plan's entries, the iteration's lifetimes and the arenas (arena k belongs to window k;
 * none when arena_count is 0) at their offsets. */
stalloc_status_t st_reuse_compute(stalloc_plan* plan, const st_class_item* prologue,
                                  const st_class_item* iteration, const st_class_item* arenas,
                                  const uint64_t* arena_offsets, size_t arena_count,
                                  uint64_t gap);

/* One arena per reuse window (the same windows st_reuse_compute finds): a class item
 * over the window's positions, sized for the most live bytes (aligned) its dynamic requests
 * reached in any recorded iteration, times headroom. The placement reserves it like a periodic
 * request; st_reuse_compute then finds it free during the window, so the runtime places the
 * window's dynamic requests there. out has room for one per dynamic position. */
stalloc_status_t st_reuse_arenas(const uint64_t* sizes, const uint64_t* free_pos,
                                 const st_period* per, const st_class_item* it, double headroom,
                                 uint64_t alignment, uint64_t gap, st_class_item* out,
                                 size_t* count);

#endif
