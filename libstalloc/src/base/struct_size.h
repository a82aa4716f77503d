/* struct_size.h - the one rule for the public structs that start with `struct_size` (stalloc.h,
 * "Versioned structs"), for every function that reads or fills one (struct_size.c). */
#ifndef STALLOC_STRUCT_SIZE_H
#define STALLOC_STRUCT_SIZE_H

#include "base/internal.h"

/* An input: `ours` holds the defaults (from the *_init function, full size); the fields the
 * caller's struct_size covers are copied over them, the rest keep their defaults; ours keeps
 * its own struct_size. theirs NULL: the defaults. An unset struct_size is INVALID_ARGUMENT. */
stalloc_status_t st_struct_read(void* ours, size_t our_size, const void* theirs, const char* what);
/* An output, before any work: INVALID_ARGUMENT when theirs is NULL or its struct_size unset. */
stalloc_status_t st_struct_check(const void* theirs, const char* what);
/* An output, after: copies the fields of `ours` that the caller's struct_size covers; nothing
 * past it is written and the caller's struct_size stays its own. */
void st_struct_write(void* theirs, const void* ours, size_t our_size);

#endif
