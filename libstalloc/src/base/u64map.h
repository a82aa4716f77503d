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
/* Key 0 marks an empty slot, so no entry has it: put refuses it (false, map unchanged), get and
 * remove find nothing. put is otherwise false only when memory for growing ran out. */
bool u64map_put(u64map* m, uint64_t key, uint64_t value);
/* Pointer to the value, or NULL. Valid until the next put or remove. */
uint64_t* u64map_get(const u64map* m, uint64_t key);
bool u64map_remove(u64map* m, uint64_t key, uint64_t* value);
/* Makes room for n entries in total; false when memory ran out. */
bool u64map_reserve(u64map* m, size_t n);

#endif
