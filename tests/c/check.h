/* check.h - the few macros the C tests need; a failed check prints where and exits 1. */
#ifndef STALLOC_CHECK_H
#define STALLOC_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "stalloc/stalloc.h"


#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);    \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* Checks a stalloc call's status, printing the library's detail when it differs. */
#define CHECK_STATUS(call, expected)                                                        \
  do {                                                                                      \
    stalloc_status_t check_s_ = (call);                                                     \
    if (check_s_ != (expected)) {                                                           \
      fprintf(stderr, "%s:%d: %s returned %d (%s: %s), expected %d\n", __FILE__, __LINE__, \
              #call, (int)check_s_, stalloc_status_string(check_s_), stalloc_last_error(), \
              (int)(expected));                                                             \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, STALLOC_OK)

/* An allocator's statistics, failing the test if they cannot be read. */
static inline stalloc_stats_t stats_of(stalloc_allocator_t* a) {
  stalloc_stats_t s;
  stalloc_stats_init(&s);
  CHECK_OK(stalloc_allocator_stats(a, &s));
  return s;
}

#define RUN(test)                          \
  do {                                     \
    fprintf(stderr, "- %s\n", #test);      \
    test();                                \
  } while (0)

#endif
