/* test_u64map.c - the hash map against a plain array model under random puts and removes (by key,
 * and by the entry a lookup found). */
#include <string.h>

#include "check.h"
#include "base/u64map.h"

/* Key 0 marks an empty slot: the API refuses it rather than pairing it with an empty slot. */
static void key_zero_is_no_key(void) {
  u64map m;
  u64map_init(&m);
  CHECK(!u64map_get(&m, 0) && !u64map_remove(&m, 0, NULL));
  CHECK(!u64map_put(&m, 0, 7) && m.count == 0);
  CHECK(u64map_put(&m, 512, 1));
  CHECK(!u64map_get(&m, 0) && !u64map_remove(&m, 0, NULL) && m.count == 1);
  CHECK(!u64map_put(&m, 0, 7) && m.count == 1);
  u64map_destroy(&m);
}

/* After reserve(n), n entries go in without the table moving (the allocator reserves before it
 * serves a request, so that recording the block can no longer fail). */
static void reserve_makes_room(void) {
  u64map m;
  u64map_init(&m);
  for (size_t n = 1; n <= 100; n++) {
    CHECK(u64map_reserve(&m, n));
    u64map_slot* slots = m.slots;
    CHECK(u64map_put(&m, (uint64_t)n * 512, n));
    CHECK(m.slots == slots && m.count == n && m.count * 4 <= m.capacity * 3);
  }
  u64map_destroy(&m);
}

int main(void) {
  key_zero_is_no_key();
  reserve_makes_room();
  enum { KEYS = 5000 };
  static uint64_t model[KEYS]; /* 0 = absent, else value + 1 */
  u64map m;
  u64map_init(&m);
  uint32_t rng = 7;
  for (int i = 0; i < 400000; i++) {
    rng = rng * 1103515245u + 12345u;
    uint64_t k = (rng >> 8) % KEYS;
    uint64_t key = (k + 1) * 512; /* aligned keys, as pointers are */
    if (rng & 1) {
      CHECK(u64map_put(&m, key, i));
      model[k] = (uint64_t)i + 1;
    } else if (rng & 2) { /* as a free does: the entry found, then removed without a second lookup */
      uint64_t* v = u64map_get(&m, key);
      CHECK((v != NULL) == (model[k] != 0));
      if (v) {
        CHECK(*v + 1 == model[k]);
        u64map_remove_found(&m, v);
        CHECK(!u64map_get(&m, key));
      }
      model[k] = 0;
    } else {
      uint64_t v;
      bool had = u64map_remove(&m, key, &v);
      CHECK(had == (model[k] != 0));
      if (had) CHECK(v + 1 == model[k]);
      model[k] = 0;
    }
  }
  size_t count = 0;
  for (int k = 0; k < KEYS; k++) {
    uint64_t* v = u64map_get(&m, (uint64_t)(k + 1) * 512);
    CHECK((v != NULL) == (model[k] != 0));
    if (v) CHECK(*v + 1 == model[k]);
    count += model[k] != 0;
  }
  CHECK(count == m.count);
  /* Key 0 marks an empty slot: the API must refuse it rather than match an empty slot. */
  CHECK(!u64map_put(&m, 0, 5));
  CHECK(u64map_get(&m, 0) == NULL);
  uint64_t v0 = 77;
  CHECK(!u64map_remove(&m, 0, &v0));
  CHECK(v0 == 77);
  CHECK(count == m.count);
  u64map_destroy(&m);
  return 0;
}
