/* realign.c - runs of a layout's sizes, hashed by where they end (see realign.h). Open
 * addressing over the run's hash: a layer's runs recur once per layer, and each is checked
 * in full before it counts. */
#include <stdlib.h>
#include <string.h>

#include "runtime/realign.h"

struct st_realign {
  const uint64_t* sizes;
  size_t count;
  uint32_t* slot; /* position + 1 of a run's last size; 0: empty */
  size_t mask;
};

static uint64_t run_hash(const uint64_t* run) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < ST_REALIGN_RUN; k++) {
    h ^= run[k] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h ^ (h >> 31);
}

st_realign* st_realign_create(const uint64_t* sizes, size_t count) {
  if (count < ST_REALIGN_RUN || count >= UINT32_MAX) return NULL;
  size_t cap = 16;
  while (cap < 2 * count) cap *= 2;
  st_realign* r = malloc(sizeof *r);
  uint32_t* slot = r ? calloc(cap, sizeof *slot) : NULL;
  if (!slot) {
    free(r);
    return NULL;
  }
  *r = (st_realign){sizes, count, slot, cap - 1};
  for (size_t end = ST_REALIGN_RUN - 1; end < count; end++) {
    size_t i = run_hash(sizes + end + 1 - ST_REALIGN_RUN) & r->mask;
    while (slot[i]) i = (i + 1) & r->mask;
    slot[i] = (uint32_t)end + 1;
  }
  return r;
}

void st_realign_destroy(st_realign* r) {
  if (!r) return;
  free(r->slot);
  free(r);
}

/* Whether the step's sizes at [from, to) are the layout's at [from + d, to + d). */
static bool holds(const st_realign* r, const uint64_t* step, size_t from, size_t to, ptrdiff_t d) {
  if ((ptrdiff_t)from + d < 0 || (ptrdiff_t)to + d > (ptrdiff_t)r->count) return false;
  return memcmp(r->sizes + from + d, step + from, (to - from) * sizeof *step) == 0;
}

bool st_realign_find(const st_realign* r, const uint64_t* step, size_t position, size_t since, ptrdiff_t shift,
                     ptrdiff_t* out) {
  if (position + 1 < ST_REALIGN_RUN) return false;
  const uint64_t* recent = step + position + 1 - ST_REALIGN_RUN;
  size_t before = since > ST_REALIGN_RUN ? since - ST_REALIGN_RUN : 0;
  bool found = false;
  size_t far = SIZE_MAX;
  for (size_t i = run_hash(recent) & r->mask; r->slot[i]; i = (i + 1) & r->mask) {
    size_t end = r->slot[i] - 1;
    if (memcmp(r->sizes + end + 1 - ST_REALIGN_RUN, recent, ST_REALIGN_RUN * sizeof *recent) != 0) continue;
    ptrdiff_t d = (ptrdiff_t)end - (ptrdiff_t)position;
    size_t away = d > shift ? (size_t)(d - shift) : (size_t)(shift - d);
    if (d == shift || away >= far || (since > before && holds(r, step, before, since, d))) continue;
    far = away;
    *out = d;
    found = true;
  }
  return found;
}
