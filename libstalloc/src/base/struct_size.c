/* struct_size.c - versioned public structs: a caller built against an older header passes a
 * smaller struct (its struct_size), one built against a newer header a larger one. Both are
 * served: the library reads and writes only the fields both know. */
#include <string.h>

#include "base/struct_size.h"

static size_t size_of(const void* s) {
  size_t n;
  memcpy(&n, s, sizeof n); /* struct_size is every versioned struct's first field */
  return n;
}

static stalloc_status_t unset(size_t n, const char* what) {
  return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                 "%s: struct_size is %zu: set it to the struct's size (its *_init function does)",
                 what, n);
}

stalloc_status_t st_struct_read(void* ours, size_t our_size, const void* theirs, const char* what) {
  if (!theirs) return STALLOC_OK;
  size_t n = size_of(theirs);
  if (n < sizeof(size_t)) return unset(n, what);
  n = ST_MIN(n, our_size);
  memcpy((char*)ours + sizeof(size_t), (const char*)theirs + sizeof(size_t), n - sizeof(size_t));
  return STALLOC_OK;
}

stalloc_status_t st_struct_check(const void* theirs, const char* what) {
  if (!theirs) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "%s: NULL result", what);
  size_t n = size_of(theirs);
  return n < sizeof(size_t) ? unset(n, what) : STALLOC_OK;
}

void st_struct_write(void* theirs, const void* ours, size_t our_size) {
  size_t n = ST_MIN(size_of(theirs), our_size);
  memcpy((char*)theirs + sizeof(size_t), (const char*)ours + sizeof(size_t), n - sizeof(size_t));
}
