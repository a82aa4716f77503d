/* plan.h - the in-memory plan: the contract between the planner (planner.c and the files it
 * drives), the plan file (plan_file.c) and the runtime that serves a run from it (runtime.c).
 *
 * How a run is matched against a plan. The allocs of a run form one sequence. The first
 * `prologue_count` allocs (model set-up and warm-up, up to where the steady state begins) are
 * matched by their position from the start of the run; after them, the steady-state
 * iteration's `iteration_count` allocs repeat forever, matched by position within the current
 * iteration. A position matches when the request's size equals the entry's size. */
#ifndef STALLOC_PLAN_H
#define STALLOC_PLAN_H

#include "base/internal.h"

/* Classes of requests (DESIGN.md); also in the public header as STALLOC_CLASS_*. */
enum {
  PLAN_CLASS_PERSISTENT = 1, /* lives across the whole steady state: planned once */
  PLAN_CLASS_PERIODIC = 2,   /* same position and size every iteration: planned */
  PLAN_CLASS_TINY = 3,       /* <= 512 B: served by a slab, not planned */
  PLAN_CLASS_DYNAMIC = 4,    /* size varies between iterations: placed online in reuse space */
  PLAN_CLASS_WARMUP = 5      /* happens once before the steady state and is freed: planned */
};

#define PLAN_NO_OFFSET UINT64_MAX

typedef struct st_plan_entry {
  uint64_t size;   /* requested bytes expected at this position (dynamic: the size seen) */
  uint64_t offset; /* offset in the pool; PLAN_NO_OFFSET for tiny and dynamic requests */
  uint32_t cls;    /* PLAN_CLASS_* */
  uint32_t window; /* dynamic: index of its reuse window; else UINT32_MAX */
} st_plan_entry;

/* Address ranges of the pool that no planned request uses during a window of the iteration. */
typedef struct st_reuse_range {
  uint64_t offset, size;
} st_reuse_range;

typedef struct st_reuse_window {
  uint32_t begin, end;       /* alloc positions in the iteration, half-open */
  uint32_t first_range;      /* index into ranges */
  uint32_t range_count;
} st_reuse_window;

typedef struct stalloc_plan {
  uint64_t pool_size;        /* bytes the runtime reserves: the plan peak, aligned */
  uint64_t alignment;        /* every offset is a multiple of this */
  uint64_t lower_bound;      /* of the trace the plan came from */
  uint64_t plan_peak;        /* largest offset + size */
  uint64_t fingerprint;      /* of the trace's alloc-size sequence (see planner.c) */
  uint32_t steps_found;      /* iterations found in the trace */
  uint32_t uses_step_markers;/* 1: iterations came from step markers, which the runtime may use to resync */
  uint32_t sizes_tolerated;  /* 1: planned with tolerate_sizes: an entry holds the largest size its
                                position reached, and a request no larger takes its slot */
  double seconds;            /* planning time */

  st_plan_entry* prologue;   /* allocs before the steady state, in run order */
  size_t prologue_count;
  st_plan_entry* iteration;  /* one steady-state iteration's allocs, in order */
  size_t iteration_count;

  st_reuse_window* windows;
  size_t window_count;
  st_reuse_range* ranges;
  size_t range_count;

  /* added by the planner: */
  uint64_t planned_lower_bound; /* max over the trace's time of live bytes of planned requests */
  /* Lifetimes in alloc time (the index of an alloc in the run's alloc sequence), parallel to
   * prologue / iteration: the alloc index at which the request is freed (the number of allocs
   * before its free), absolute for the prologue, relative to the iteration's start for the
   * iteration (may pass iteration_count: freed in the next iteration); UINT64_MAX: never
   * freed (persistent, or not seen freed). What `stalloc show` draws; not needed to serve. */
  uint64_t* prologue_end;
  uint64_t* iteration_end;
} stalloc_plan;

#endif
