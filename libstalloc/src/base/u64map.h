/* u64map.h - open-addressing hash map from nonzero uint64 keys to uint64 values.
 * Linear probing with backward-shift deletion, so no tombstones pile up in long runs. */
#ifndef STALLOC_U64MAP_H
#define STALLOC_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct u64map_slot {
  uint64_t key; /* 0 = empty */
  uint64_t value;
} u64map_slot;

typedef struct u64map {
  u64map_slot* slots;
  size_t capacity; /* power of two, or 0 before the first insert */
  size_t count;
} u64map;

void u64map_init(u64map* m);
void u64map_destroy(u64map* m);
void u64map_clear(u64map* m);
/* Key 0 marks an empty slot, so it can never be stored: put refuses it (false), get finds
 * nothing (NULL) and remove removes nothing (false). Callers reject id 0 with their own error. */
/* false when key is 0 or memory for growing ran out; the map is unchanged then. */
bool u64map_put(u64map* m, uint64_t key, uint64_t value);
/* Pointer to the value, or NULL (always for key 0). Valid until the next put or remove. */
uint64_t* u64map_get(const u64map* m, uint64_t key);
/* false when the key is absent (always for key 0). */
bool u64map_remove(u64map* m, uint64_t key, uint64_t* value);
/* Removes the entry whose value `value` points at, as u64map_get returned it (no second
 * lookup); nothing may have been put or removed since. */
void u64map_remove_found(u64map* m, uint64_t* value);
/* Makes room for n entries in total; false when memory ran out. */
bool u64map_grow(u64map* m, size_t n);
/* u64map_grow where the table is short: inline, as every alloc asks (load factor at most 3/4). */
static inline bool u64map_reserve(u64map* m, size_t n) { return n <= m->capacity / 4 * 3 || u64map_grow(m, n); }

#endif
