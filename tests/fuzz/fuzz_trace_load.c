/* fuzz_trace_load.c - libFuzzer target for the native trace reader (trace/trace_file.c) and the
 * checks every appended event meets (trace/trace.c).
 *
 * Input: one mode byte, then the file. Mode bit 0 set: before loading, the header's, each
 * chunk's and the end marker's CRC-32 are recomputed wherever the layout allows, so mutations
 * reach the chunk walk and the event checks rather than stopping at a checksum. A trace that
 * loads must summarise, save and load again to the same events. */
#include "fuzz_input.h"

static void fix_checksums(uint8_t* b, size_t n) {
  if (n < 32) return;
  fuzz_put32(b + 24, st_crc32(0, b, 24));
  size_t at = 32;
  while (at + 8 <= n) {
    uint32_t tag = fuzz_get32(b + at);
    if (tag == 0x444E4554u && at + 16 <= n) { /* "TEND": crc of the total that follows */
      fuzz_put32(b + at + 4, st_crc32(0, b + at + 8, 8));
      return;
    }
    if (tag != 0x53545645u || at + 16 > n) return; /* not "EVTS" */
    uint64_t bytes = (uint64_t)fuzz_get32(b + at + 4) * 40u;
    if (bytes > n - at - 16) return;
    fuzz_put32(b + at + 8, st_crc32(0, b + at + 16, (size_t)bytes));
    at += 16 + (size_t)bytes;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  uint8_t* file = malloc(size);
  FUZZ_ASSERT(file);
  memcpy(file, data + 1, size - 1);
  if (data[0] & 1) fix_checksums(file, size - 1);
  static int not_null;
  stalloc_trace_t* t = (stalloc_trace_t*)&not_null; /* a failed load must set it to NULL */
  stalloc_status_t s = stalloc_trace_load(fuzz_file(0, file, size - 1), &t);
  free(file);
  if (s != STALLOC_OK) {
    FUZZ_ASSERT(t == NULL);
    FUZZ_ASSERT(s == STALLOC_ERR_BAD_FORMAT || s == STALLOC_ERR_TRUNCATED || s == STALLOC_ERR_VERSION);
    FUZZ_ASSERT(stalloc_last_error()[0] != '\0');
    return 0;
  }
  stalloc_trace_summary_t sum;
  stalloc_trace_summary_init(&sum);
  FUZZ_ASSERT(stalloc_trace_summary(t, &sum) == STALLOC_OK);
  const stalloc_event_t* ev;
  const stalloc_request_t* req;
  size_t n_ev, n_req;
  FUZZ_ASSERT(stalloc_trace_events(t, &ev, &n_ev) == STALLOC_OK && n_ev == sum.events);
  FUZZ_ASSERT(stalloc_trace_requests(t, &req, &n_req) == STALLOC_OK && n_req == sum.requests);
  FUZZ_ASSERT(sum.lower_bound <= sum.total_bytes && sum.max_request <= sum.lower_bound);
  for (size_t i = 0; i < n_req; i++) {
    FUZZ_ASSERT(req[i].id != 0 && req[i].alloc_event < n_ev);
    FUZZ_ASSERT(req[i].free_event == UINT64_MAX ||
                (req[i].free_event > req[i].alloc_event && req[i].free_event < n_ev));
  }
  /* Save and load again: the same events. */
  const char* out = fuzz_out_path();
  FUZZ_ASSERT(stalloc_trace_save(t, out) == STALLOC_OK);
  stalloc_trace_t* again = NULL;
  FUZZ_ASSERT(stalloc_trace_load(out, &again) == STALLOC_OK);
  const stalloc_event_t* ev2;
  size_t n_ev2;
  FUZZ_ASSERT(stalloc_trace_events(again, &ev2, &n_ev2) == STALLOC_OK && n_ev2 == n_ev);
  FUZZ_ASSERT(n_ev == 0 || memcmp(ev, ev2, n_ev * sizeof *ev) == 0);
  stalloc_trace_destroy(again);
  stalloc_trace_destroy(t);
  return 0;
}
