/* grow.h - room for one more item in a growable array, doubling from `first` items, one
 * piece of code for every array the library grows. */
#ifndef STALLOC_GROW_H
#define STALLOC_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* The array (count items of item_size bytes, room for *cap), with room for one more: itself
 * when it has it, else moved by realloc with *cap doubled. NULL, with the array and *cap as
 * they were, when there is no host memory. */
static inline void* st_room(void* items, size_t count, size_t* cap, size_t item_size, size_t first) {
  if (count < *cap) return items;
  size_t n = *cap ? 2 * *cap : first;
  if (n <= *cap || n > SIZE_MAX / item_size) return NULL;
  void* grown = realloc(items, n * item_size);
  if (grown) *cap = n;
  return grown;
}

#endif
