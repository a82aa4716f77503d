/* runtime.h - serving a run from a plan (runtime.c). Called by allocator.c with the
 * allocator's lock held. */
#ifndef STALLOC_RUNTIME_H
#define STALLOC_RUNTIME_H

#include "backends/backend.h"
#include "runtime/arena.h"
#include "runtime/budget.h"
#include "plan/plan.h"

typedef struct st_runtime st_runtime;
typedef struct st_range_node st_range_node; /* one live (or stream-pending) range of the pool */

/* What st_runtime_alloc decided. */
typedef enum st_rt_outcome {
  RT_HIT = 1,      /* served at its planned offset */
  RT_DYNAMIC = 2,  /* served in the plan's reusable space */
  RT_TINY = 3,     /* matched or not, <= 512 B: the caller serves it from the slab */
  RT_FALLBACK = 4  /* the caller serves it from the fallback pool */
} st_rt_outcome;

typedef struct st_runtime_counters {
  uint64_t hits, misses, resyncs, dynamic;
  uint64_t hit_bytes;  /* requested bytes served at their planned offset */
  uint64_t miss_bytes; /* requested bytes (> 512 B) of requests the plan did not cover */
} st_runtime_counters;

/* Copies the plan (the caller may destroy it) after checking it, and reserves the pool: with
 * an arena, as a region of it whose granules are mapped as blocks touch them (see arena.h).
 * `position` is the number of allocs the run made before the plan was loaded. `shaped`: the
 * plan holds the largest size seen per position, so a smaller request at the cursor takes
 * its slot. `share` (or NULL): a plan served by turns with this one, whose region this pool
 * shares when it is large enough or grows in place to be (each plan's hits then check the
 * other's blocks too); else the pool gets a region of its own. */
stalloc_status_t st_runtime_create(const backend_ops* ops, void* backend, const backend_caps* caps,
                                   st_budget* budget, st_arena* arena, uint64_t alignment,
                                   const stalloc_plan* plan, uint64_t position, bool shaped,
                                   const st_runtime* share, st_runtime** out);
/* Gives the pool back, live blocks included. */
void st_runtime_destroy(st_runtime* rt);
/* Matches the request against the plan (advancing or resynchronising the position) and, for
 * RT_HIT and RT_DYNAMIC, places it: *ptr and *node are set. Fails only for lack of host memory. */
stalloc_status_t st_runtime_alloc(st_runtime* rt, uint64_t size, uint64_t stream, st_rt_outcome* outcome,
                                  void** ptr, st_range_node** node);
/* Frees a block st_runtime_alloc placed; stream is where its last use was queued. */
void st_runtime_free(st_runtime* rt, st_range_node* node, uint64_t stream);
/* A request the plan did not place goes to the growable pool (told before it is placed): until
 * a step passes without one, each block of a pool in the arena keeps only the granules it
 * touches, so the pool's idle granules can serve the misses (see runtime.c, "held" and
 * "counted"). */
void st_runtime_missed_into_arena(st_runtime* rt);
/* The step under way outgrew the plan (runtime.c's OUTGROWN): the growable pool serves its rest. */
bool st_runtime_outgrown(const st_runtime* rt);
/* The plan is no longer served (dropped or replaced) but blocks of its pool live on: from now
 * on each one keeps only the granules it touches, so they go back as the blocks are freed. */
void st_runtime_retire(st_runtime* rt);
/* Another plan serves for now (a step of another kind): each block keeps only the granules it
 * touches, so the idle ones serve the other plan, until a step of its own passes with no miss
 * into the growable pool. */
void st_runtime_pause(st_runtime* rt);
/* The plan's pool where it is a region of an arena: its first byte and size; false otherwise. */
bool st_runtime_span(const st_runtime* rt, const void** base, uint64_t* size);
/* A step marker: with a plan made from step markers, the next alloc starts an iteration; a
 * pool in the arena whose step had no miss into the growable pool holds its granules again. */
void st_runtime_step(st_runtime* rt);
/* True when no block of the pool is live or waiting for its stream (a replaced plan's pool
 * is given back then). */
bool st_runtime_idle(st_runtime* rt);
/* True when the plan's iteration begins with exactly these request sizes (a plan made from
 * step markers): the step under way looks like this plan's kind. */
bool st_runtime_step_begins(const st_runtime* rt, const uint64_t* sizes, size_t n);
/* This plan takes over the step under way, whose first `served` requests another plan served:
 * as st_runtime_step, then its cursor moves past those positions (their slots stay empty). */
void st_runtime_join_step(st_runtime* rt, uint64_t served);
/* The runtime whose pool holds a block. */
st_runtime* st_runtime_of(const st_range_node* node);
const st_runtime_counters* st_runtime_counters_of(const st_runtime* rt);
void st_runtime_reset_counters(st_runtime* rt);
uint64_t st_runtime_pool_size(const st_runtime* rt);
/* The pool as one backend allocation (base, size); *base = NULL when it was reserved and
 * mapped granule by granule, which is not one allocation. */
void st_runtime_pool_allocation(const st_runtime* rt, void** base, uint64_t* size);

#endif
