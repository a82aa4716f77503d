/* test_place_granules.c - st_place_fewer_granules (place_granules.c): a block alone in a granule at
 * the peak moves into space another block keeps touched; on random placements it never raises
 * the granule peak, never moves a fixed item and leaves a placement the naive validator
 * (overlap_check.h) accepts. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "overlap_check.h"
#include "plan/place.h"
#include "plan/place_granules.h"
#include "rng.h"

#define G 1024 /* a small granule keeps the numbers readable */

static void check_valid(const st_place_item* it, size_t n, const uint64_t* off, uint64_t align) {
  oc_item oc[64];
  CHECK(n <= 64);
  for (size_t i = 0; i < n; i++) oc[i] = (oc_item){it[i].lower, it[i].upper, it[i].size, it[i].fixed_offset};
  char msg[256];
  int bad = oc_check(oc, n, off, align, msg, sizeof msg);
  if (bad) fprintf(stderr, "invalid placement: %s\n", msg);
  CHECK(bad == 0);
}

/* Granule 0 full and granule 1 half full for the whole run; a short block alone in granule 2
 * at the peak goes into granule 1's free half, and the peak needs two granules, not three. */
static void a_lone_block_moves_into_a_touched_granule(void) {
  st_place_item it[3] = {{0, 10, G, PLACE_FREE}, {0, 10, G / 2, PLACE_FREE}, {4, 6, G / 4, PLACE_FREE}};
  uint64_t off[3] = {0, G, 2 * G};
  CHECK(st_place_granule_peak(it, 3, off, G) == 3);
  CHECK(st_place_fewer_granules(it, 3, off, G, 64, 1.0) == 1);
  CHECK(st_place_granule_peak(it, 3, off, G) == 2);
  CHECK(off[2] >= G + G / 2 && off[2] + G / 4 <= 2 * G); /* in granule 1's free half */
  check_valid(it, 3, off, 64);
  /* A fixed block stays where it is, and so does the peak. */
  uint64_t fixed[3] = {0, G, 2 * G};
  it[2].fixed_offset = 2 * G;
  CHECK(st_place_fewer_granules(it, 3, fixed, G, 64, 1.0) == 0);
  CHECK(fixed[2] == 2 * G && st_place_granule_peak(it, 3, fixed, G) == 3);
  /* Nor does a block move into a granule that is not touched for all of its life. */
  st_place_item late[3] = {{0, 10, G, PLACE_FREE}, {5, 10, G / 2, PLACE_FREE}, {4, 6, G / 4, PLACE_FREE}};
  uint64_t at[3] = {0, G, 2 * G};
  CHECK(st_place_fewer_granules(late, 3, at, G, 64, 1.0) == 0);
  CHECK(at[2] == 2 * G);
}

static void random_placements_stay_valid_and_never_need_more(void) {
  rng_state = 0x9E3779B97F4A7C15ull;
  int lowered = 0;
  for (int round = 0; round < 400; round++) {
    size_t n = 8 + (size_t)rnd(40);
    st_place_item it[64];
    for (size_t i = 0; i < n; i++) {
      uint64_t lo = rnd(30);
      it[i] = (st_place_item){lo, lo + 1 + rnd(12), 1 + rnd(2 * G), PLACE_FREE};
      if (rnd(10) == 0) it[i].upper = it[i].lower; /* occupies nothing */
    }
    uint64_t off[64];
    st_place_params p = {.alignment = 64, .time_limit = 0, .cancel = NULL, .every_ordering = false};
    st_place_result r;
    CHECK(st_place(it, n, &p, off, &r) == STALLOC_OK);
    for (size_t i = 0; i < n; i++)
      if (rnd(5) == 0) it[i].fixed_offset = off[i]; /* some stay where they are */
    uint64_t before = st_place_granule_peak(it, n, off, G), was[64];
    for (size_t i = 0; i < n; i++) was[i] = off[i];
    size_t moves = st_place_fewer_granules(it, n, off, G, 64, 1.0);
    uint64_t after = st_place_granule_peak(it, n, off, G);
    check_valid(it, n, off, 64);
    CHECK(after <= before);
    lowered += after < before;
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (it[i].fixed_offset != PLACE_FREE) CHECK(off[i] == was[i]);
      changed += off[i] != was[i];
    }
    CHECK(changed <= moves);
  }
  CHECK(lowered > 0); /* the instances give it something to do */
}

int main(void) {
  a_lone_block_moves_into_a_touched_granule();
  random_placements_stay_valid_and_never_need_more();
  return 0;
}
