/* rng.h - the C tests' random numbers: xorshift64, the same sequence on every machine. A test
 * may set rng_state for a sequence of its own. */
#ifndef STALLOC_TEST_RNG_H
#define STALLOC_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state = 88172645463325252ull;

/* A number in [0, n) (0 for n = 0). */
static inline uint64_t rnd(uint64_t n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return n ? rng_state % n : 0;
}

#endif
