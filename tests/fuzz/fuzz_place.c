/* fuzz_place.c - libFuzzer target for the static placement (plan/place.c, the exact search in
 * plan/place_search.c, peeling in plan/place_peel.c) through the public stalloc_place, with
 * free items and fixed ones: the search works around fixed items, so every offset it gives is
 * judged by tests/c/overlap_check.h, which shares no code with the solver.
 *
 * Input: one parameter byte, then 8-byte records (at most 400), one item each.
 *   parameter bits 0-1: alignment 1, 8, 512 or 3 (not a power of two);
 *             bit 2:    a 10 ms time limit (the search and its second thread), else 0;
 *             bits 3-4: sizes shifted left by 0, 12, 24 or 52 bits (the last past 2^64 in sum);
 *             bit 5:    fixed offsets as given (they may overlap: the call must refuse them),
 *                       else fixed items stacked one above another with the given gaps.
 *   record: lower (2 bytes), lifetime length (1), size (2), flags (1: bit 0 fixed), an offset
 *           or gap (2). */
#include "../c/overlap_check.h"
#include "fuzz_input.h"

enum { RECORD = 8, MAX_ITEMS = 400 };

static uint16_t get16(const uint8_t* p) { return (uint16_t)(p[0] | p[1] << 8); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t prm = data[0];
  size_t n = (size - 1) / RECORD;
  if (n > MAX_ITEMS) n = MAX_ITEMS;
  static const uint64_t aligns[4] = {1, 8, 512, 3};
  static const unsigned shifts[4] = {0, 12, 24, 52};
  uint64_t align = aligns[prm & 3];
  unsigned shift = shifts[(prm >> 3) & 3];
  bool as_given = prm & 32;
  stalloc_place_item_t* items = calloc(n ? n : 1, sizeof *items);
  oc_item* judge = calloc(n ? n : 1, sizeof *judge);
  uint64_t* off = calloc(n ? n : 1, sizeof *off);
  FUZZ_ASSERT(items && judge && off);
  uint64_t band = 0; /* stacked fixed items: the top of the last one */
  bool may_refuse = as_given || shift == 52;
  for (size_t i = 0; i < n; i++) {
    const uint8_t* r = data + 1 + i * RECORD;
    uint64_t lower = get16(r), sz = (uint64_t)get16(r + 3) << shift;
    items[i] = (stalloc_place_item_t){lower, lower + r[2], sz, UINT64_MAX};
    if (r[5] & 1) {
      uint64_t at = as_given ? (uint64_t)get16(r + 6) << shift : band + get16(r + 6);
      items[i].fixed_offset = at;
      if (!as_given) band = at + sz;
    }
    judge[i] = (oc_item){items[i].lower, items[i].upper, items[i].size, items[i].fixed_offset};
  }
  stalloc_place_params_t p;
  stalloc_place_params_init(&p);
  p.alignment = align;
  p.time_limit = prm & 4 ? 0.01 : 0.0;
  stalloc_place_result_t res;
  stalloc_place_result_init(&res);
  stalloc_status_t st = stalloc_place(items, n, &p, off, &res);
  if (st == STALLOC_OK) {
    char msg[160];
    int bad = oc_check(judge, n, off, align, msg, sizeof msg);
    if (bad) fprintf(stderr, "fuzz_place: %s\n", msg);
    FUZZ_ASSERT(bad == 0);
    FUZZ_ASSERT(res.peak == oc_peak(judge, n, off));
    /* the bytes live at once (real sizes; the solver's bound counts them rounded up to the
     * alignment) */
    uint64_t live_max = 0;
    for (size_t i = 0; i < n; i++) {
      uint64_t live = 0;
      for (size_t j = 0; j < n; j++)
        if (items[j].lower <= items[i].lower && items[i].lower < items[j].upper) live += items[j].size;
      if (items[i].upper > items[i].lower && live > live_max) live_max = live;
    }
    FUZZ_ASSERT(res.lower_bound >= live_max && res.peak >= live_max);
  } else {
    FUZZ_ASSERT(st == STALLOC_ERR_INVALID_ARGUMENT && may_refuse);
    FUZZ_ASSERT(stalloc_last_error()[0] != '\0');
  }
  free(items);
  free(judge);
  free(off);
  return 0;
}
