/* u64map.c - the hash map behind pointer tables and request pairing (see u64map.h). */
#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

static inline size_t slot_of(uint64_t key, size_t mask) {
  /* Fibonacci hashing spreads aligned pointers (low bits all zero) over the table. */
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

void u64map_init(u64map* m) { memset(m, 0, sizeof *m); }

void u64map_destroy(u64map* m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

void u64map_clear(u64map* m) {
  if (m->slots) memset(m->slots, 0, m->capacity * sizeof *m->slots);
  m->count = 0;
}

static bool rehash(u64map* m, size_t capacity) {
  u64map_slot* slots = calloc(capacity, sizeof *slots);
  if (!slots) return false;
  size_t mask = capacity - 1;
  for (size_t i = 0; i < m->capacity; i++) {
    if (!m->slots[i].key) continue;
    size_t j = slot_of(m->slots[i].key, mask);
    while (slots[j].key) j = (j + 1) & mask;
    slots[j] = m->slots[i];
  }
  free(m->slots);
  m->slots = slots;
  m->capacity = capacity;
  return true;
}

bool u64map_grow(u64map* m, size_t n) {
  size_t want = 16;
  while (want / 4 * 3 < n) want *= 2; /* load factor at most 3/4 */
  return want <= m->capacity || rehash(m, want);
}

bool u64map_put(u64map* m, uint64_t key, uint64_t value) {
  if (!key) return false; /* 0 marks an empty slot */
  if (!u64map_reserve(m, m->count + 1)) return false;
  size_t mask = m->capacity - 1;
  size_t j = slot_of(key, mask);
  while (m->slots[j].key && m->slots[j].key != key) j = (j + 1) & mask;
  if (!m->slots[j].key) m->count++;
  m->slots[j].key = key;
  m->slots[j].value = value;
  return true;
}

uint64_t* u64map_get(const u64map* m, uint64_t key) {
  if (!m->capacity || !key) return NULL; /* key 0 would match an empty slot */
  size_t mask = m->capacity - 1;
  for (size_t j = slot_of(key, mask);; j = (j + 1) & mask) {
    if (m->slots[j].key == key) return &m->slots[j].value;
    if (!m->slots[j].key) return NULL;
  }
}

void u64map_remove_found(u64map* m, uint64_t* value) {
  size_t mask = m->capacity - 1;
  size_t hole = (size_t)((u64map_slot*)((char*)value - offsetof(u64map_slot, value)) - m->slots);
  /* Backward shift: pull later entries of the probe run into the hole when allowed. */
  for (size_t j = (hole + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
    size_t home = slot_of(m->slots[j].key, mask);
    bool movable = (j > hole) ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  m->slots[hole].key = 0;
  m->slots[hole].value = 0;
  m->count--;
}

bool u64map_remove(u64map* m, uint64_t key, uint64_t* value) {
  uint64_t* v = u64map_get(m, key);
  if (!v) return false;
  if (value) *value = *v;
  u64map_remove_found(m, v);
  return true;
}
