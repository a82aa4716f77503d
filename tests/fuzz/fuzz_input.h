/* fuzz_input.h - what the fuzz targets share: an input handed to a loader that takes a path
 * (the bytes go into a memory-backed file, reached as /proc/self/fd/N, so nothing touches the
 * disk), checksums fixed up so a mutated file gets past them, and a failure that aborts (a
 * crash, which libFuzzer reports with the input). */
#ifndef STALLOC_FUZZ_INPUT_H
#define STALLOC_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/crc32.h"
#include "stalloc/stalloc.h"

/* The target found a bug: say what and crash, so libFuzzer saves the input. */
#define FUZZ_ASSERT(cond)                                                                    \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "%s:%d: FUZZ_ASSERT(%s) failed; last error: %s\n", __FILE__, __LINE__, \
              #cond, stalloc_last_error());                                                  \
      abort();                                                                               \
    }                                                                                        \
  } while (0)

/* The path of memory-backed file number `slot` (0 or 1), now holding exactly these bytes. */
static inline const char* fuzz_file(int slot, const uint8_t* data, size_t size) {
  static int fd[2] = {-1, -1};
  static char path[2][64];
  if (fd[slot] < 0) {
    fd[slot] = memfd_create(slot ? "stalloc-fuzz-1" : "stalloc-fuzz-0", 0);
    FUZZ_ASSERT(fd[slot] >= 0);
    snprintf(path[slot], sizeof path[slot], "/proc/self/fd/%d", fd[slot]);
  }
  FUZZ_ASSERT(ftruncate(fd[slot], 0) == 0);
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd[slot], data + done, size - done, (off_t)done);
    FUZZ_ASSERT(n > 0);
    done += (size_t)n;
  }
  return path[slot];
}

/* A path for a writer (saves rename a ".tmp" sibling into place, which /proc/self/fd cannot
 * hold): `name` inside one temporary folder per process, removed at exit. */
static char fuzz_dir_[64];
static void fuzz_dir_remove_(void) {
  char path[128];
  const char* names[] = {"out", "out.tmp"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_, names[i]);
    remove(path);
  }
  rmdir(fuzz_dir_);
}
static inline const char* fuzz_out_path(void) {
  static char path[128];
  if (!fuzz_dir_[0]) {
    const char* tmp = getenv("TMPDIR");
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/stalloc-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_ASSERT(mkdtemp(fuzz_dir_) != NULL);
    atexit(fuzz_dir_remove_);
    snprintf(path, sizeof path, "%s/out", fuzz_dir_);
  }
  return path;
}

static inline uint32_t fuzz_get32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void fuzz_put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif
