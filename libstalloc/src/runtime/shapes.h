/* shapes.h - each position's request size as a function of the step's shape (shapes.c): under
 * dynamic padding, a curriculum or a batch ramp, a step has the same allocs as the step before
 * of its kind, each scaled by the tokens of its batch (or of one of its micro-batches, or by
 * both the source and the target tokens of an encoder-decoder) or not at all. Learned from the
 * steps so far, so the layout hints can place a step whose shape no step had before. Not
 * thread-safe: the hints call it with the allocator's lock held. */
#ifndef STALLOC_SHAPES_H
#define STALLOC_SHAPES_H

#include "base/internal.h"

#define ST_SHAPE_NONE SIZE_MAX

typedef struct st_shapes st_shapes;

/* NULL: no host memory (then nothing is predicted). */
st_shapes* st_shapes_create(void);
void st_shapes_destroy(st_shapes* s);

/* Whether steps of a and b allocs are near enough in size to be one kind but for a few allocs
 * (the smaller at least 3/4 of the larger: a warm-up step, where the optimizer makes its state,
 * and the training step after it; an evaluation pass is not near a training step). */
static inline bool st_shapes_near(size_t a, size_t b) { return 4 * ST_MIN(a, b) >= 3 * ST_MAX(a, b); }

/* A step of n allocs ended, with these requested sizes by position: learn how each position
 * follows the step's keys (positions among its first 16 whose size changed where no key before
 * explains it: a micro-batch's input ids). The first step of a kind learns from the step just
 * before when that one has at least 3/4 as many allocs as the larger of the two (the warm-up
 * step, where the optimizer makes its state), position by position; a first step that teaches
 * nothing so learns from itself when its micro-batches repeat one another at their own
 * lengths (gradient accumulation). Returns the positions whose change no rule explains, after
 * learning (0: the kind's step before repeated, or changed only as the rules say), or -1 for
 * the first step of its kind (nothing to compare with). */
ptrdiff_t st_shapes_learn(st_shapes* s, const uint64_t* sizes, size_t n);

/* The last key position of the kind of n allocs, once its steps' changes are explained by
 * rules (from there on the step's sizes can be predicted), else ST_SHAPE_NONE. */
size_t st_shapes_key_position(const st_shapes* s, size_t n);

/* Whether a step of n allocs with these requested sizes repeats its kind's latest step exactly
 * (call before st_shapes_learn, which makes it the latest). */
bool st_shapes_repeats(const st_shapes* s, const uint64_t* sizes, size_t n);

/* Whether the kind of n allocs asked `size` at `position` in its latest step. */
bool st_shapes_same_at(const st_shapes* s, size_t n, size_t position, uint64_t size);

/* The sizes of a step of n allocs whose requests so far (at least up to the last key
 * position) are `asked`, from the kind's latest step: out[j] for every position (a position
 * that follows no rule keeps its size). false: the kind's rules are not known. */
bool st_shapes_predict(const st_shapes* s, size_t n, const uint64_t* asked, uint64_t* out);

#endif
