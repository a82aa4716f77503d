/* place_granules.h - fewer whole granules at a placement's peak (place_granules.c).
 *
 * A placement's peak in bytes is not what a pool of granules maps: that is the most granules
 * its blocks touch at one time. A placement made for the byte peak can leave, at the granule
 * peak, a granule touched only by a block or two that would fit in another granule's free
 * space. st_place_fewer_granules moves such blocks, one at a time, into space of a granule that
 * other blocks touch for the moved block's whole life: no time touches more granules than
 * before, and the peak time loses the granule they left. */
#ifndef STALLOC_PLACE_GRANULES_H
#define STALLOC_PLACE_GRANULES_H

#include "plan/place.h"

/* items[i] sits at offsets[i] (a fixed item at its fixed_offset, never moved); free items may be
 * moved to other multiples of `alignment`, sizes counted rounded up to it. Stops when no granule
 * at the peak time can be emptied that way, after a fixed number of granules tried (the same
 * moves on every machine), or after `seconds`, a guard for sizes no step has. Returns how many
 * items moved; offsets stay a valid placement (no two items live at once share a byte). 0 on
 * no host memory. */
size_t st_place_fewer_granules(const st_place_item* items, size_t n, uint64_t* offsets, uint64_t granule,
                               uint64_t alignment, double seconds);

/* The most granules of `granule` bytes that items live at one time touch; UINT64_MAX: no host
 * memory. */
uint64_t st_place_granule_peak(const st_place_item* items, size_t n, const uint64_t* offsets, uint64_t granule);

#endif
