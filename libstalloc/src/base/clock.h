/* clock.h - seconds on CLOCK_MONOTONIC, for time limits and deadlines. */
#ifndef STALLOC_CLOCK_H
#define STALLOC_CLOCK_H

#include <time.h>

static inline double st_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
