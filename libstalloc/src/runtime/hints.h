/* hints.h - layout hints for the growable pool (hints.c): each request of a step goes where
 * a plan of the step before put the request at its position, around the blocks that lived
 * across the boundary, when those bytes are free. Called by allocator.c with its lock held. */
#ifndef STALLOC_HINTS_H
#define STALLOC_HINTS_H

#include "base/internal.h"

typedef struct st_hints st_hints;

/* wait: a boundary waits for the hints it started (replay: figures that do not depend on the
 * machine); else they apply from the first request after they are ready. */
stalloc_status_t st_hints_create(uint64_t alignment, bool wait, st_hints** out);
/* Waits for a hint thread still running and frees everything. */
void st_hints_destroy(st_hints* h);

/* The number of the step under way (a block remembers it for its free). */
uint32_t st_hints_step(const st_hints* h);
/* A request the growable pool serves, at the next position of the step: its position (for
 * st_hints_freed); *offset is where the hints put it, or UINT64_MAX for none. */
uint32_t st_hints_alloc(st_hints* h, uint64_t size, uint64_t* offset);
/* Where the request at `position` went (an offset in the pool): the requests a step makes before
 * its shape is known stay where they are in the layout made once it is. */
void st_hints_placed(st_hints* h, uint32_t position, uint64_t offset);
/* The layout the step under way follows, if its hints still serve it: each position's offset
 * and size (n positions); *version changes whenever that layout does (0: none). */
bool st_hints_layout(const st_hints* h, const uint64_t** offsets, const uint64_t** sizes, size_t* n,
                     uint64_t* version);
/* Whether the hinted place (`offset`) was free (false: it went where best fit put it). Hints
 * that miss too often stop for the rest of the step: the step is not like the one they came
 * from. A place held by one of the step's first requests, placed before these hints served the
 * step, is not a miss. */
void st_hints_outcome(st_hints* h, bool taken, uint64_t offset);
/* The block at `position` of step `step` was freed (of the step before the one under way: when
 * in the step under way, which says when such a block goes in the next step). */
void st_hints_freed(st_hints* h, uint32_t step, uint32_t position);
/* A request of the step went elsewhere (a plan served it): the step is not planned from. */
void st_hints_spoil(st_hints* h);
/* A step a plan served until the plan was outgrown (runtime.c's OUTGROWN: a larger batch, a
 * longer sequence), whose rest the growable pool serves: it is recorded from here as if the
 * pool had served it whole, its first k requests (`asked`, all still live) included, so that
 * the next step, of its new shape, gets a layout made from it. No hints serve it. false: it is
 * not recorded (no host memory, or hints already record it). */
bool st_hints_follow(st_hints* h, const uint64_t* asked, size_t k);
/* Whether the boundary coming would plan the step that ends there (then the caller passes the
 * blocks in use to st_hints_boundary). */
bool st_hints_wants_layout(const st_hints* h);
/* A step boundary: plans the step that ended around the `count` blocks in use (offsets, sizes
 * and arena tags, taken over by the hints; NULL with count 0 when not wanted) on a thread.
 * `expected`: the number of allocs of the kind of step expected next (0: not known). */
void st_hints_boundary(st_hints* h, uint64_t* starts, uint64_t* sizes, uint64_t* tags, size_t count,
                       uint64_t expected);

/* Whether the run's steps repeat: at least one step repeated its kind's step before (or changed
 * only as the shape rules foretell) and none changed otherwise (an MoE gate routing sizes). */
bool st_hints_steps_repeat(const st_hints* h);
/* Whether the step that ended last asked exactly the sizes of its kind's step before (a plan
 * serving it leaves nothing recorded: false), and the step under way has asked so far exactly
 * what the kind expected asked in its latest step. */
bool st_hints_step_repeated(const st_hints* h);
/* Layouts made so far, how many were kept, the longest and the total time they took. */
void st_hints_counts(const st_hints* h, uint64_t* made, uint64_t* kept, double* longest, double* total);

#endif
