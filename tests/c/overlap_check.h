/* overlap_check.h - an independent, deliberately naive judge of a placement: O(n^2) over all
 * pairs, sharing no code with place.c (as MiniMalloc's validator shares none with its
 * solver). Header-only so C tests of any part (placement, planner) can include it.
 *
 * Items are (lower, upper, size, fixed_offset) with half-open lifetimes; fixed_offset is
 * UINT64_MAX for a free item. Two items conflict when both have size > 0, their lifetimes
 * intersect (max(lower) < min(upper)) and their address ranges intersect. */
#ifndef STALLOC_OVERLAP_CHECK_H
#define STALLOC_OVERLAP_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct oc_item {
  uint64_t lower, upper, size, fixed_offset;
} oc_item;

/* Returns 0 when the placement is valid, else a code and a message in msg:
 * 1 overlap, 2 fixed item moved, 3 misaligned offset, 4 offset + size overflows. */
static inline int oc_check(const oc_item* items, size_t n, const uint64_t* off,
                           uint64_t alignment, char* msg, size_t msg_len) {
  if (alignment == 0) alignment = 1;
  for (size_t i = 0; i < n; i++) {
    if (items[i].fixed_offset != UINT64_MAX) {
      if (off[i] != items[i].fixed_offset) {
        snprintf(msg, msg_len, "item %zu: fixed at %llu but placed at %llu", i,
                 (unsigned long long)items[i].fixed_offset, (unsigned long long)off[i]);
        return 2;
      }
    } else if (off[i] % alignment != 0) {
      snprintf(msg, msg_len, "item %zu: offset %llu not a multiple of %llu", i,
               (unsigned long long)off[i], (unsigned long long)alignment);
      return 3;
    }
    if (off[i] + items[i].size < off[i]) {
      snprintf(msg, msg_len, "item %zu: offset + size overflows", i);
      return 4;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (!items[i].size || items[i].upper <= items[i].lower) continue;
    for (size_t j = i + 1; j < n; j++) {
      if (!items[j].size || items[j].upper <= items[j].lower) continue;
      uint64_t tlo = items[i].lower > items[j].lower ? items[i].lower : items[j].lower;
      uint64_t thi = items[i].upper < items[j].upper ? items[i].upper : items[j].upper;
      if (tlo >= thi) continue;
      if (off[i] < off[j] + items[j].size && off[j] < off[i] + items[i].size) {
        snprintf(msg, msg_len, "items %zu and %zu overlap at time %llu", i, j,
                 (unsigned long long)tlo);
        return 1;
      }
    }
  }
  if (msg_len) msg[0] = 0;
  return 0;
}

/* The peak the way DESIGN.md defines it: the largest offset + size over items that are
 * live for some time. */
static inline uint64_t oc_peak(const oc_item* items, size_t n, const uint64_t* off) {
  uint64_t peak = 0;
  for (size_t i = 0; i < n; i++)
    if (items[i].size && items[i].upper > items[i].lower && off[i] + items[i].size > peak)
      peak = off[i] + items[i].size;
  return peak;
}

#endif
