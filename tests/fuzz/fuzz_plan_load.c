/* fuzz_plan_load.c - libFuzzer target for the plan loader (plan/plan_file.c) and the rules every
 * plan meets (plan/plan_validate.c), then for the runtime serving a run from whatever plan was
 * accepted (runtime/runtime.c, through sim/replay.c with its independent overlap check).
 *
 * Input: one mode byte, then the file. Mode bit 0 set: before loading, the header's plan peak
 * and fingerprint are recomputed from the entries (at most 4096 of them) and the checksum and
 * end marker written where the counts put them, so mutations reach the validator and the
 * runtime rather than stopping at a checksum. */
#include "fuzz_input.h"
#include "plan/planner.h"

enum { HEADER = 128, ENTRY = 32, WINDOW = 16, RANGE = 16, TRAILER = 12, MAX_FIX_ENTRIES = 4096 };

static uint64_t get64(const uint8_t* p) {
  return (uint64_t)fuzz_get32(p) | (uint64_t)fuzz_get32(p + 4) << 32;
}
static void put64(uint8_t* p, uint64_t v) {
  fuzz_put32(p, (uint32_t)v);
  fuzz_put32(p + 4, (uint32_t)(v >> 32));
}

/* Makes the file's derived fields agree with its entries; returns its new length. */
static size_t fix_derived(uint8_t* b, size_t n, size_t cap) {
  if (n < HEADER) return n;
  uint64_t pro = get64(b + 64), it = get64(b + 72), win = get64(b + 80), rng = get64(b + 88);
  if (pro > MAX_FIX_ENTRIES || it > MAX_FIX_ENTRIES || pro + it > MAX_FIX_ENTRIES || win > MAX_FIX_ENTRIES ||
      rng > MAX_FIX_ENTRIES)
    return n;
  size_t want = HEADER + (size_t)(pro + it) * ENTRY + (size_t)win * WINDOW + (size_t)rng * RANGE + TRAILER;
  if (want > cap) return n;
  if (n < want) memset(b + n, 0, want - n);
  stalloc_plan plan = {0};
  static st_plan_entry entries[MAX_FIX_ENTRIES + 1];
  plan.prologue = entries;
  plan.prologue_count = (size_t)pro;
  plan.iteration = entries + pro;
  plan.iteration_count = (size_t)it;
  uint64_t peak = 0;
  for (size_t i = 0; i < pro + it; i++) {
    const uint8_t* p = b + HEADER + i * ENTRY;
    entries[i] = (st_plan_entry){get64(p), get64(p + 8), fuzz_get32(p + 16), fuzz_get32(p + 20)};
    if (entries[i].offset != UINT64_MAX && entries[i].offset + entries[i].size > peak)
      peak = entries[i].offset + entries[i].size;
  }
  put64(b + 48, peak);
  put64(b + 56, st_plan_fingerprint(&plan));
  fuzz_put32(b + want - TRAILER, st_crc32(0, b, want - TRAILER));
  memcpy(b + want - 8, "ENDPLAN\0", 8);
  return want;
}

/* A run that makes every entry's request in order (the prologue once, then two iterations),
 * freeing the prologue's warm-up requests after it and each iteration's at its end. */
static void replay_through(const stalloc_plan_t* plan) {
  const stalloc_plan_entry_t *pro, *it;
  size_t n_pro, n_it;
  FUZZ_ASSERT(stalloc_plan_entries(plan, 0, &pro, &n_pro) == STALLOC_OK);
  FUZZ_ASSERT(stalloc_plan_entries(plan, 1, &it, &n_it) == STALLOC_OK);
  if (n_pro + 2 * n_it > 2048) return;
  stalloc_event_t* ev = calloc(2 * (n_pro + 2 * n_it) + 3, sizeof *ev);
  FUZZ_ASSERT(ev);
  size_t n = 0;
  uint64_t id = 0;
  for (size_t i = 0; i < n_pro; i++)
    ev[n++] = (stalloc_event_t){.id = ++id, .size = pro[i].size, .kind = STALLOC_EVENT_ALLOC};
  for (size_t i = 0; i < n_pro; i++)
    if (pro[i].cls != STALLOC_CLASS_PERSISTENT)
      ev[n++] = (stalloc_event_t){.id = i + 1, .size = pro[i].size, .kind = STALLOC_EVENT_FREE};
  for (int k = 0; k < 2; k++) {
    ev[n++] = (stalloc_event_t){.id = (uint64_t)k, .kind = STALLOC_EVENT_STEP};
    uint64_t first = id + 1;
    for (size_t i = 0; i < n_it; i++)
      ev[n++] = (stalloc_event_t){.id = ++id, .size = it[i].size, .kind = STALLOC_EVENT_ALLOC};
    for (size_t i = 0; i < n_it; i++)
      ev[n++] = (stalloc_event_t){.id = first + i, .size = it[i].size, .kind = STALLOC_EVENT_FREE};
  }
  stalloc_trace_t* t;
  FUZZ_ASSERT(stalloc_trace_create(&t) == STALLOC_OK);
  if (stalloc_trace_append(t, ev, n) == STALLOC_OK) {
    stalloc_replay_options_t o;
    stalloc_replay_options_init(&o);
    o.virtual_capacity = 1ull << 40;
    stalloc_replay_result_t r;
    stalloc_replay_result_init(&r);
    stalloc_status_t s = stalloc_replay(t, plan, &o, &r);
    /* An overlap or a damaged block is STALLOC_ERR_INTERNAL: a plan the validator accepted
     * made the runtime hand out bytes that are in use. Running out of space is fine. */
    FUZZ_ASSERT(s != STALLOC_ERR_INTERNAL);
  }
  stalloc_trace_destroy(t);
  free(ev);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  size_t cap = size - 1 + HEADER + (MAX_FIX_ENTRIES * 2) * ENTRY + TRAILER;
  uint8_t* file = malloc(cap);
  FUZZ_ASSERT(file);
  memcpy(file, data + 1, size - 1);
  size_t n = (data[0] & 1) ? fix_derived(file, size - 1, cap) : size - 1;
  static int not_null;
  stalloc_plan_t* plan = (stalloc_plan_t*)&not_null; /* a failed load must set it to NULL */
  stalloc_status_t s = stalloc_plan_load(fuzz_file(0, file, n), &plan);
  free(file);
  if (s != STALLOC_OK) {
    FUZZ_ASSERT(plan == NULL);
    FUZZ_ASSERT(s == STALLOC_ERR_BAD_FORMAT || s == STALLOC_ERR_TRUNCATED || s == STALLOC_ERR_VERSION ||
                s == STALLOC_ERR_OUT_OF_MEMORY);
    FUZZ_ASSERT(stalloc_last_error()[0] != '\0');
    return 0;
  }
  stalloc_plan_info_t info;
  stalloc_plan_info_init(&info);
  FUZZ_ASSERT(stalloc_plan_info(plan, &info) == STALLOC_OK);
  FUZZ_ASSERT(info.plan_peak <= info.pool_size);
  const stalloc_reuse_window_t* w;
  const stalloc_reuse_range_t* r;
  size_t nw, nr;
  FUZZ_ASSERT(stalloc_plan_reuse(plan, &w, &nw, &r, &nr) == STALLOC_OK);
  for (size_t i = 0; i < nw; i++)
    FUZZ_ASSERT(w[i].first_range <= nr && w[i].range_count <= nr - w[i].first_range);
  /* Save and load again: the same plan. */
  const char* out = fuzz_out_path();
  FUZZ_ASSERT(stalloc_plan_save(plan, out) == STALLOC_OK);
  stalloc_plan_t* again = NULL;
  FUZZ_ASSERT(stalloc_plan_load(out, &again) == STALLOC_OK);
  stalloc_plan_info_t info2;
  stalloc_plan_info_init(&info2);
  FUZZ_ASSERT(stalloc_plan_info(again, &info2) == STALLOC_OK);
  FUZZ_ASSERT(info2.fingerprint == info.fingerprint && info2.pool_size == info.pool_size &&
              info2.prologue_count == info.prologue_count && info2.iteration_count == info.iteration_count);
  stalloc_plan_destroy(again);
  replay_through(plan);
  stalloc_plan_destroy(plan);
  return 0;
}
