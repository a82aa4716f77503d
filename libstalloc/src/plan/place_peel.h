/* place_peel.h - placement of one large partition by peeling off the items that live to its
 * end (weights, gradients, optimizer state of a whole training run) and placing what is left
 * as smaller independent problems above them. Defined in place_peel.c. */
#ifndef STALLOC_PLACE_PEEL_H
#define STALLOC_PLACE_PEEL_H

#include "base/internal.h"

/* L is what lives to the partition's end and, when min_len > 0, every item that lives at
 * least min_len time points, and, when cut_bytes > 0, every item crossing a time point that
 * at most cut_bytes of the other items cross (first-fit among themselves, which may leave
 * gaps). A split whose bound (the L items' top, or a group's bytes live at once on its floor)
 * is not below `beat` is not tried.
 * One partition: m items with compressed lifetimes [lo[i], hi[i]) and sizes already rounded
 * up to `alignment`. Tries the peeled placement within `time_limit` seconds; returns true and
 * fills off[0..m) and *peak when it found one (false when the partition does not come apart,
 * on cancellation before a placement existed, or without memory: the caller keeps its own). */
bool st_place_peel(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                   uint32_t min_len, uint64_t cut_bytes, uint64_t beat, uint64_t alignment,
                   double time_limit, const volatile int* cancel, uint64_t* off, uint64_t* peak);

/* What a split would give, without placing anything: its bound (the L items' top, or a
 * group's bytes live at once on its floor or, where that floor is well above them, around its
 * L items), the same bound with every group on its floor (a bound met more easily: how likely
 * the split is to reach its bound), its groups and the items in its largest group. False when
 * the partition does not come apart (or without memory). */
typedef struct st_peel_probe {
  uint64_t bound, floor_bound;
  size_t groups, largest;
} st_peel_probe;
bool st_place_peel_probe(const uint32_t* lo, const uint32_t* hi, const uint64_t* size, size_t m,
                         uint32_t min_len, uint64_t cut_bytes, st_peel_probe* probe);

#endif
