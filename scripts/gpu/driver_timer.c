/* driver_timer.c - a CUDA driver stand-in that times stalloc's driver calls: where does the
 * growable pool's step time go (cuMemMap, cuMemUnmap, cuMemSetAccess, cuMemCreate, events)?
 * The cuda backend loads the driver named by STALLOC_CUDA_DRIVER; point it here and every entry
 * point it uses is forwarded to the real driver (DRIVER_TIMER_REAL, default libcuda.so.1) with
 * its calls and nanoseconds counted. PyTorch's own driver calls do not pass through it.
 *
 *   gcc -O2 -shared -fPIC -o driver_timer.so scripts/gpu/driver_timer.c -ldl
 *   STALLOC_CUDA_DRIVER=$PWD/driver_timer.so python train.py
 *
 * The process reads the counts with driver_timer_read() (check_transformers.py does, through
 * ctypes) and clears them with driver_timer_reset(); DRIVER_TIMER_OUT=path also appends them as
 * one JSON line at exit. x86-64 only: each forwarder passes six integer registers through, which
 * is how every one of these entry points takes its arguments (integers and pointers, at most 5). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../libstalloc/src/backends/cuda_driver.h"

#if !defined(__x86_64__)
#error "driver_timer.c forwards arguments as x86-64 integer registers"
#endif

typedef unsigned long long reg;
typedef int (*forward_fn)(reg, reg, reg, reg, reg, reg);

#define ST_TIMER_INDEX(name, params, symbol, required) IDX_##name,
enum { ST_CU_FUNCTIONS(ST_TIMER_INDEX) N_FUNCTIONS };
#define ST_TIMER_SYMBOL(name, params, symbol, required) symbol,
static const char* const SYMBOLS[] = {ST_CU_FUNCTIONS(ST_TIMER_SYMBOL)};

static forward_fn real[N_FUNCTIONS];
static _Atomic unsigned long long calls[N_FUNCTIONS], nanos[N_FUNCTIONS];
static void* real_lib;
static int real_missing[N_FUNCTIONS];
static int no_driver; /* the real driver could not be loaded: every call says there is no device */

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

/* Resolved on first use; an entry point the real driver lacks answers "not supported", as an
 * old driver's absence would (the backend only calls what it found, so this is defensive). */
static forward_fn resolve(int i) {
  if (real[i] || real_missing[i] || no_driver) return real[i];
  if (!real_lib) {
    const char* path = getenv("DRIVER_TIMER_REAL");
    real_lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!real_lib) {
      fprintf(stderr, "driver_timer: cannot load the real driver: %s\n", dlerror());
      no_driver = 1;
      return NULL;
    }
  }
  real[i] = (forward_fn)dlsym(real_lib, SYMBOLS[i]);
  if (!real[i]) real_missing[i] = 1;
  return real[i];
}

static int forward(int i, reg a, reg b, reg c, reg d, reg e, reg f) {
  forward_fn fn = resolve(i);
  if (!fn) return no_driver ? ST_CU_ERROR_NO_DEVICE : ST_CU_ERROR_NOT_SUPPORTED;
  unsigned long long t0 = now_ns();
  int r = fn(a, b, c, d, e, f);
  atomic_fetch_add_explicit(&nanos[i], now_ns() - t0, memory_order_relaxed);
  atomic_fetch_add_explicit(&calls[i], 1, memory_order_relaxed);
  return r;
}

/* One exported forwarder per entry point, under the driver's exported name (asm label). */
#define ST_TIMER_DEFINE(name, params, symbol, required)                                        \
  __attribute__((visibility("default"))) int timed_##name(reg, reg, reg, reg, reg, reg)        \
      __asm__(symbol);                                                                         \
  int timed_##name(reg a, reg b, reg c, reg d, reg e, reg f) { return forward(IDX_##name, a, b, c, d, e, f); }
ST_CU_FUNCTIONS(ST_TIMER_DEFINE)

__attribute__((visibility("default"))) void driver_timer_reset(void) {
  for (int i = 0; i < N_FUNCTIONS; i++) {
    atomic_store(&calls[i], 0);
    atomic_store(&nanos[i], 0);
  }
}

/* The counts as a JSON object {"cuMemMap": [calls, nanoseconds], ...}, entry points called at
 * least once; returns the length it needed (snprintf's convention). */
__attribute__((visibility("default"))) int driver_timer_read(char* buf, size_t size) {
  size_t at = 0;
  int need = 0;
  for (int i = 0; i < N_FUNCTIONS; i++) {
    unsigned long long c = atomic_load(&calls[i]);
    if (!c) continue;
    int n = snprintf(at < size ? buf + at : NULL, at < size ? size - at : 0, "%s\"%s\": [%llu, %llu]",
                     need ? ", " : "{", SYMBOLS[i], c, atomic_load(&nanos[i]));
    need += n;
    at += (size_t)n;
  }
  int n = snprintf(at < size ? buf + at : NULL, at < size ? size - at : 0, need ? "}" : "{}");
  return need + n;
}

__attribute__((destructor)) static void write_at_exit(void) {
  const char* path = getenv("DRIVER_TIMER_OUT");
  if (!path || !*path) return;
  char buf[8192];
  driver_timer_read(buf, sizeof buf);
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\n", buf);
  fclose(f);
}
