/* plan_file.c - the plan file (docs/plan-format.md): a fixed little-endian header, the
 * prologue and iteration entries, the reuse table, a CRC-32 of all of that, and an end marker.
 * Loading checks the magic, version, sizes, checksum and end marker, then every entry against
 * the pool (st_plan_validate, plan_validate.c), so a damaged or foreign file is an error, never a crash. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32.h"
#include "plan/plan_validate.h"
#include "plan/planner.h"

#define MAGIC "STALPLAN"
#define END_MARK "ENDPLAN\0"
#define VERSION 1u
#define HEADER_SIZE 128u
#define ENTRY_SIZE 32u
#define WINDOW_SIZE 16u
#define RANGE_SIZE 16u
#define TRAILER_SIZE 12u /* crc32 + end marker */

static void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Header layout (offsets in bytes). */
enum {
  H_MAGIC = 0, H_VERSION = 8, H_HEADER_SIZE = 12, H_POOL = 16, H_ALIGN = 24, H_LB = 32,
  H_PLANNED_LB = 40, H_PEAK = 48, H_FINGERPRINT = 56, H_PROLOGUE = 64, H_ITERATION = 72,
  H_WINDOWS = 80, H_RANGES = 88, H_STEPS = 96, H_MARKERS = 100, H_SECONDS = 104,
  H_TOLERATED = 112
  /* 116..127 reserved, zero */
};

/* Bytes a file with these counts has; 0 when that is 2^64 - 1 or more (summed in 128 bits). */
static uint64_t file_size(uint64_t pro, uint64_t it, uint64_t win, uint64_t rng) {
  unsigned __int128 n = (unsigned __int128)HEADER_SIZE + ((unsigned __int128)pro + it) * ENTRY_SIZE +
                        (unsigned __int128)win * WINDOW_SIZE + (unsigned __int128)rng * RANGE_SIZE +
                        TRAILER_SIZE;
  return n >= UINT64_MAX ? 0 : (uint64_t)n;
}

static void put_entry(uint8_t* p, const st_plan_entry* e, uint64_t end) {
  put64(p, e->size);
  put64(p + 8, e->offset);
  put32(p + 16, e->cls);
  put32(p + 20, e->window);
  put64(p + 24, end);
}

stalloc_status_t stalloc_plan_save(const stalloc_plan_t* plan, const char* path) {
  if (!plan || !path) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_save: NULL argument");
  uint64_t total = file_size(plan->prologue_count, plan->iteration_count, plan->window_count,
                             plan->range_count);
  uint8_t* buf = total && total <= SIZE_MAX ? calloc(1, (size_t)total) : NULL;
  if (!buf) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "%s: no memory for the plan file", path);
  memcpy(buf + H_MAGIC, MAGIC, 8);
  put32(buf + H_VERSION, VERSION);
  put32(buf + H_HEADER_SIZE, HEADER_SIZE);
  put64(buf + H_POOL, plan->pool_size);
  put64(buf + H_ALIGN, plan->alignment);
  put64(buf + H_LB, plan->lower_bound);
  put64(buf + H_PLANNED_LB, plan->planned_lower_bound);
  put64(buf + H_PEAK, plan->plan_peak);
  put64(buf + H_FINGERPRINT, plan->fingerprint);
  put64(buf + H_PROLOGUE, plan->prologue_count);
  put64(buf + H_ITERATION, plan->iteration_count);
  put64(buf + H_WINDOWS, plan->window_count);
  put64(buf + H_RANGES, plan->range_count);
  put32(buf + H_STEPS, plan->steps_found);
  put32(buf + H_MARKERS, plan->uses_step_markers);
  put32(buf + H_TOLERATED, plan->sizes_tolerated);
  uint64_t secbits;
  memcpy(&secbits, &plan->seconds, 8);
  put64(buf + H_SECONDS, secbits);
  uint8_t* p = buf + HEADER_SIZE;
  for (size_t i = 0; i < plan->prologue_count; i++, p += ENTRY_SIZE)
    put_entry(p, &plan->prologue[i], plan->prologue_end ? plan->prologue_end[i] : UINT64_MAX);
  for (size_t i = 0; i < plan->iteration_count; i++, p += ENTRY_SIZE)
    put_entry(p, &plan->iteration[i], plan->iteration_end ? plan->iteration_end[i] : UINT64_MAX);
  for (size_t i = 0; i < plan->window_count; i++, p += WINDOW_SIZE) {
    put32(p, plan->windows[i].begin);
    put32(p + 4, plan->windows[i].end);
    put32(p + 8, plan->windows[i].first_range);
    put32(p + 12, plan->windows[i].range_count);
  }
  for (size_t i = 0; i < plan->range_count; i++, p += RANGE_SIZE) {
    put64(p, plan->ranges[i].offset);
    put64(p + 8, plan->ranges[i].size);
  }
  put32(p, st_crc32(0, buf, (size_t)(p - buf)));
  memcpy(p + 4, END_MARK, 8);

  size_t n = strlen(path);
  char* tmp = malloc(n + 16);
  if (!tmp) {
    free(buf);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "%s: no memory", path);
  }
  snprintf(tmp, n + 16, "%s.tmp", path);
  stalloc_status_t s = STALLOC_OK;
  FILE* f = fopen(tmp, "wb");
  if (!f) {
    s = st_fail(STALLOC_ERR_IO, "%s: cannot open for writing: %s", tmp, strerror(errno));
  } else {
    bool ok = fwrite(buf, 1, (size_t)total, f) == (size_t)total;
    ok = (fclose(f) == 0) && ok;
    if (!ok) s = st_fail(STALLOC_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    else if (rename(tmp, path) != 0)
      s = st_fail(STALLOC_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
    if (s) remove(tmp);
  }
  free(tmp);
  free(buf);
  return s;
}

/* The header's checks, on the file's first min(len, HEADER_SIZE) bytes: magic, version,
 * header size, and counts whose file size fits; *want is that size. The loader runs them
 * before reading further, so that no other file is read whole. */
static stalloc_status_t check_header(const uint8_t* buf, uint64_t len, const char* path,
                                     uint64_t* want_out) {
  if (len < 8 && memcmp(buf, MAGIC, (size_t)len) == 0)
    return st_fail(STALLOC_ERR_TRUNCATED, "%s: truncated plan file (%llu bytes)", path,
                   (unsigned long long)len);
  if (len < 8 || memcmp(buf, MAGIC, 8) != 0)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: not a stalloc plan file (bad magic)", path);
  if (len < 16)
    return st_fail(STALLOC_ERR_TRUNCATED, "%s: truncated in the header", path);
  uint32_t version = get32(buf + H_VERSION);
  if (version > VERSION)
    return st_fail(STALLOC_ERR_VERSION, "%s: plan format version %u is newer than this library's %u",
                   path, version, VERSION);
  if (version == 0 || get32(buf + H_HEADER_SIZE) != HEADER_SIZE)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: bad version %u or header size %u", path, version,
                   get32(buf + H_HEADER_SIZE));
  if (len < HEADER_SIZE) return st_fail(STALLOC_ERR_TRUNCATED, "%s: truncated in the header", path);
  uint64_t pro = get64(buf + H_PROLOGUE), it = get64(buf + H_ITERATION);
  uint64_t win = get64(buf + H_WINDOWS), rng = get64(buf + H_RANGES);
  uint64_t want = file_size(pro, it, win, rng);
  if (!want)
    return st_fail(STALLOC_ERR_BAD_FORMAT,
                   "%s: counts (prologue %llu, iteration %llu, windows %llu, ranges %llu) are too "
                   "large", path, (unsigned long long)pro, (unsigned long long)it,
                   (unsigned long long)win, (unsigned long long)rng);
  for (size_t i = H_TOLERATED + 4; i < HEADER_SIZE; i++)
    if (buf[i]) return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: reserved header bytes are not zero", path);
  *want_out = want;
  return STALLOC_OK;
}

static stalloc_status_t parse(const uint8_t* buf, uint64_t len, const char* path,
                              stalloc_plan* plan) {
  uint64_t want = 0;
  stalloc_status_t hs = check_header(buf, len, path, &want);
  if (hs) return hs;
  uint64_t pro = get64(buf + H_PROLOGUE), it = get64(buf + H_ITERATION);
  uint64_t win = get64(buf + H_WINDOWS), rng = get64(buf + H_RANGES);
  bool has_end = len >= 8 && memcmp(buf + len - 8, END_MARK, 8) == 0;
  if (!want || (has_end && want != len))
    return st_fail(STALLOC_ERR_BAD_FORMAT,
                   "%s: counts (prologue %llu, iteration %llu, windows %llu, ranges %llu) do not "
                   "match the file's %llu bytes", path, (unsigned long long)pro,
                   (unsigned long long)it, (unsigned long long)win, (unsigned long long)rng,
                   (unsigned long long)len);
  if (len < want)
    return st_fail(STALLOC_ERR_TRUNCATED, "%s: truncated: %llu of %llu bytes", path,
                   (unsigned long long)len, (unsigned long long)want);
  if (len > want || !has_end)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: no end marker where the counts put it", path);
  const uint8_t* tail = buf + want - TRAILER_SIZE;
  uint32_t crc = st_crc32(0, buf, (size_t)(want - TRAILER_SIZE));
  if (crc != get32(tail))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: checksum mismatch (stored %08x, computed %08x)",
                   path, get32(tail), crc);

  plan->pool_size = get64(buf + H_POOL);
  plan->alignment = get64(buf + H_ALIGN);
  plan->lower_bound = get64(buf + H_LB);
  plan->planned_lower_bound = get64(buf + H_PLANNED_LB);
  plan->plan_peak = get64(buf + H_PEAK);
  plan->fingerprint = get64(buf + H_FINGERPRINT);
  plan->steps_found = get32(buf + H_STEPS);
  plan->uses_step_markers = get32(buf + H_MARKERS);
  uint64_t secbits = get64(buf + H_SECONDS);
  memcpy(&plan->seconds, &secbits, 8);
  plan->sizes_tolerated = get32(buf + H_TOLERATED);
  if (plan->uses_step_markers > 1)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: bad step-marker flag", path);
  if (plan->sizes_tolerated > 1)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: bad tolerated-sizes flag", path);
  plan->prologue = malloc((size_t)(pro + 1) * sizeof *plan->prologue);
  plan->iteration = malloc((size_t)(it + 1) * sizeof *plan->iteration);
  plan->windows = malloc((size_t)(win + 1) * sizeof *plan->windows);
  plan->ranges = malloc((size_t)(rng + 1) * sizeof *plan->ranges);
  plan->prologue_end = malloc((size_t)(pro + 1) * sizeof *plan->prologue_end);
  plan->iteration_end = malloc((size_t)(it + 1) * sizeof *plan->iteration_end);
  if (!plan->prologue || !plan->iteration || !plan->windows || !plan->ranges ||
      !plan->prologue_end || !plan->iteration_end)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "%s: no memory for the plan", path);
  plan->prologue_count = (size_t)pro;
  plan->iteration_count = (size_t)it;
  plan->window_count = (size_t)win;
  plan->range_count = (size_t)rng;
  const uint8_t* p = buf + HEADER_SIZE;
  for (uint64_t i = 0; i < pro + it; i++, p += ENTRY_SIZE) {
    st_plan_entry* e = i < pro ? &plan->prologue[i] : &plan->iteration[i - pro];
    *e = (st_plan_entry){get64(p), get64(p + 8), get32(p + 16), get32(p + 20)};
    *(i < pro ? &plan->prologue_end[i] : &plan->iteration_end[i - pro]) = get64(p + 24);
  }
  for (uint64_t i = 0; i < win; i++, p += WINDOW_SIZE)
    plan->windows[i] = (st_reuse_window){get32(p), get32(p + 4), get32(p + 8), get32(p + 12)};
  for (uint64_t i = 0; i < rng; i++, p += RANGE_SIZE)
    plan->ranges[i] = (st_reuse_range){get64(p), get64(p + 8)};
  return st_plan_validate(plan, path);
}

stalloc_status_t stalloc_plan_load(const char* path, stalloc_plan_t** out) {
  if (!path || !out) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "stalloc_plan_load: NULL argument");
  *out = NULL;
  FILE* f = fopen(path, "rb");
  if (!f) return st_fail(STALLOC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  /* The header first: a file that is no plan is refused after HEADER_SIZE bytes, and the
   * rest is read only up to the size its counts give (one byte more, to see any excess). */
  uint8_t* buf = malloc(HEADER_SIZE);
  if (!buf) {
    fclose(f);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "%s: no memory to read the file", path);
  }
  size_t len = fread(buf, 1, HEADER_SIZE, f), cap = HEADER_SIZE;
  uint64_t want = 0;
  stalloc_status_t hs = ferror(f) ? STALLOC_OK : check_header(buf, len, path, &want);
  if (hs) {
    free(buf);
    fclose(f);
    return hs;
  }
  while (!ferror(f) && len == cap && (uint64_t)len <= want) {
    size_t c = (uint64_t)cap * 2 > want + 1 ? (size_t)(want + 1) : cap * 2;
    uint8_t* q = realloc(buf, c);
    if (!q) {
      free(buf);
      fclose(f);
      return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "%s: no memory to read the file", path);
    }
    buf = q;
    cap = c;
    len += fread(buf + len, 1, cap - len, f);
  }
  bool err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    return st_fail(STALLOC_ERR_IO, "%s: read failed", path);
  }
  stalloc_plan* plan = calloc(1, sizeof *plan);
  stalloc_status_t s = plan ? parse(buf, len, path, plan)
                            : st_fail(STALLOC_ERR_OUT_OF_MEMORY, "%s: no memory", path);
  free(buf);
  if (s) {
    st_plan_free(plan);
    return s;
  }
  *out = plan;
  return STALLOC_OK;
}
