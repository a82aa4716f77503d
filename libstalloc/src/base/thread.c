/* thread.c - small per-process thread numbers for trace events. */
#include <stdatomic.h>

#include "base/thread.h"

static atomic_uint next_number = 1;
static _Thread_local uint32_t my_number;

uint32_t st_thread_number(void) {
  if (!my_number) my_number = atomic_fetch_add(&next_number, 1);
  return my_number;
}
