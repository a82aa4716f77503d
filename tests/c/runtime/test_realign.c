/* test_realign.c - runs of a layout's sizes: the shift after requests one step made and the
 * other did not (either way), the nearest of several where a layer's run recurs, none where
 * the run is nowhere, and layouts too short to index. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/realign.h"

#define N 64

/* A layout of N positions: `distinct`, no two of one size; else four layers of 16 requests of
 * the same sizes but for positions 33 and 34 (an MoE layer's routed sizes). */
static void layout(uint64_t* sizes, bool distinct) {
  for (int j = 0; j < N; j++) sizes[j] = distinct ? 512 * (uint64_t)(j + 1) : 1024 * (uint64_t)(1 + j % 16);
  if (!distinct) sizes[33] = 3, sizes[34] = 5;
}

/* A step of N requests that follows the layout with requests [cut, cut + k) left out (k > 0) or
 * -k requests of size 1 added at cut (k < 0). */
static size_t step_of(const uint64_t* layout_sizes, size_t cut, ptrdiff_t k, uint64_t* step) {
  size_t n = 0;
  for (size_t j = 0; j < N && n < N; j++) {
    if (j == cut)
      for (ptrdiff_t i = 0; i < -k && n < N; i++) step[n++] = 1;
    if (k > 0 && j >= cut && j < cut + (size_t)k) continue;
    step[n++] = layout_sizes[j];
  }
  return n;
}

static void finds_the_shift_after_an_insertion_or_a_removal(void) {
  uint64_t sizes[N], step[N];
  layout(sizes, true);
  st_realign* r = st_realign_create(sizes, N);
  CHECK(r);
  ptrdiff_t d = 0;
  /* the step left out the layout's positions 20-29: from its position 27 its last run is the
   * layout's 30..37 */
  step_of(sizes, 20, 10, step);
  CHECK(!st_realign_find(r, step, 26, 20, 0, &d)); /* its run still holds requests before the cut */
  CHECK(st_realign_find(r, step, 27, 20, 0, &d) && d == 10);
  /* the step made 5 requests the layout has not, at 40: its 45..52 are the layout's 40..47 */
  step_of(sizes, 40, -5, step);
  CHECK(st_realign_find(r, step, 52, 40, 0, &d) && d == -5);
  /* the current shift is never the answer */
  CHECK(!st_realign_find(r, step, 52, 40, -5, &d));
  uint64_t nowhere[N];
  for (int j = 0; j < N; j++) nowhere[j] = 1 + (uint64_t)j;
  CHECK(!st_realign_find(r, nowhere, 30, 20, 0, &d));
  st_realign_destroy(r);
}

static void a_shift_by_whole_layers_explains_no_miss(void) {
  uint64_t sizes[N], step[N];
  layout(sizes, false);
  st_realign* r = st_realign_create(sizes, N);
  CHECK(r);
  ptrdiff_t d = 0;
  /* the step is the layout but for its layer 1's routed sizes, those layer 2 had: from position
   * 24 its last run is the layout's 33..40, but a shift of a layer (16) holds for the requests
   * before the miss as well: nothing was left out */
  memcpy(step, sizes, sizeof step);
  step[17] = 3;
  step[18] = 5;
  CHECK(!st_realign_find(r, step, 24, 17, 0, &d));
  /* the same step having left out layer 0's last 4 requests: its run from 20 is the layout's
   * 33..40 (d = 16), and now the requests before the miss do not hold at that shift */
  size_t n = 0;
  for (int j = 0; j < N; j++)
    if (j < 12 || j >= 16) step[n++] = sizes[j];
  step[13] = 3;
  step[14] = 5;
  CHECK(st_realign_find(r, step, 20, 12, 0, &d) && d == 20);
  st_realign_destroy(r);
}

/* A step of one size throughout (2^20 requests): one distinct run, so the index is built in a
 * pass (an open-addressed slot per run made it quadratic), and every shift holds before the
 * miss as well as after, so none is taken. */
static void a_layout_of_one_size_throughout(void) {
  size_t n = (size_t)1 << 20;
  uint64_t* sizes = malloc(n * sizeof *sizes);
  CHECK(sizes);
  for (size_t j = 0; j < n; j++) sizes[j] = 4096;
  st_realign* r = st_realign_create(sizes, n);
  CHECK(r);
  ptrdiff_t d = 0;
  CHECK(!st_realign_find(r, sizes, n / 2, n / 2 - 4, 0, &d));
  CHECK(st_realign_find(r, sizes, 100, 0, 0, &d) && (d == -1 || d == 1)); /* nothing before: the nearest */
  st_realign_destroy(r);
  free(sizes);
}

static void a_layout_shorter_than_a_run_has_no_index(void) {
  uint64_t sizes[ST_REALIGN_RUN] = {0};
  CHECK(!st_realign_create(sizes, ST_REALIGN_RUN - 1));
  st_realign* r = st_realign_create(sizes, ST_REALIGN_RUN);
  CHECK(r);
  ptrdiff_t d = 0;
  uint64_t step[ST_REALIGN_RUN + 3] = {0};
  CHECK(st_realign_find(r, step, ST_REALIGN_RUN + 2, 0, 0, &d) && d == -3);
  CHECK(!st_realign_find(r, step, ST_REALIGN_RUN - 2, 0, 0, &d)); /* fewer requests than a run */
  st_realign_destroy(r);
  st_realign_destroy(NULL);
}

int main(void) {
  finds_the_shift_after_an_insertion_or_a_removal();
  a_shift_by_whole_layers_explains_no_miss();
  a_layout_of_one_size_throughout();
  a_layout_shorter_than_a_run_has_no_index();
  return 0;
}
