/* test_fallback.c - the fallback pool over a fake backend with stream events: reuse on the
 * freeing stream at once, on another stream only once the event is done, and never when no
 * event could be recorded; coalescing; exact segments in plan mode. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/fallback.h"

static int events_done;      /* the fake device finished all recorded work */
static int record_fails;     /* event_record reports an error */
static int live_events;

static stalloc_status_t fake_alloc(void* st, uint64_t size, uint64_t align, uint64_t stream, void** p) {
  (void)st; (void)stream;
  return posix_memalign(p, align < 4096 ? 4096 : align, size) ? STALLOC_ERR_OUT_OF_MEMORY : STALLOC_OK;
}
static stalloc_status_t fake_free(void* st, void* p, uint64_t size) { (void)st; (void)size; free(p); return STALLOC_OK; }
static stalloc_status_t fake_record(void* st, uint64_t stream, void** ev) {
  (void)st; (void)stream;
  if (record_fails) return STALLOC_ERR_BACKEND;
  live_events++;
  *ev = (void*)1;
  return STALLOC_OK;
}
static bool fake_done(void* st, void* ev) { (void)st; (void)ev; return events_done; }
static void fake_destroy(void* st, void* ev) { (void)st; (void)ev; live_events--; }

static const backend_ops fake = {.name = "fake", .alloc = fake_alloc, .free = fake_free,
                                 .event_record = fake_record, .event_done = fake_done,
                                 .event_destroy = fake_destroy};

static st_fallback* make(st_budget* b) {
  backend_caps caps = {.granularity = 4096, .host_accessible = true};
  memset(b, 0, sizeof *b);
  st_fallback* p;
  CHECK_OK(st_fallback_create(&fake, NULL, &caps, 512, b, &p));
  return p;
}

static void test_stream_ordering(void) {
  st_budget budget;
  st_fallback* p = make(&budget);
  void *a, *b;
  st_block *ba, *bb;
  events_done = 0;
  CHECK_OK(st_fallback_alloc(p, 100000, 1, &a, &ba));
  st_fallback_free(p, ba, 1);
  CHECK_OK(st_fallback_alloc(p, 100000, 2, &b, &bb)); /* stream 2 may not have it yet */
  CHECK(b != a);
  st_fallback_free(p, bb, 2);
  CHECK_OK(st_fallback_alloc(p, 100000, 1, &b, &bb)); /* its own stream takes it at once */
  CHECK(b == a);
  st_fallback_free(p, bb, 1);
  events_done = 1;
  void* c;
  st_block* bc;
  CHECK_OK(st_fallback_alloc(p, 100000, 3, &c, &bc)); /* work done: any stream */
  st_fallback_free(p, bc, 3);
  st_fallback_destroy(p);
  CHECK(live_events == 0);
  CHECK(budget.reserved == 0);
}

static void test_no_event_keeps_block_on_its_stream(void) {
  st_budget budget;
  st_fallback* p = make(&budget);
  events_done = 1;
  record_fails = 1;
  void *a, *b;
  st_block *ba, *bb;
  CHECK_OK(st_fallback_alloc(p, 50000, 1, &a, &ba));
  st_fallback_free(p, ba, 1);
  CHECK_OK(st_fallback_alloc(p, 50000, 2, &b, &bb));
  CHECK(b != a); /* unordered against stream 2, even though events would report done */
  CHECK_OK(st_fallback_alloc(p, 50000, 1, &a, &ba)); /* stream 1 still may */
  record_fails = 0;
  st_fallback_free(p, ba, 1);
  st_fallback_free(p, bb, 2);
  st_fallback_destroy(p);
}

static void test_coalescing_and_exact_segments(void) {
  st_budget budget;
  st_fallback* p = make(&budget);
  events_done = 1;
  void* x[4];
  st_block* bx[4];
  for (int i = 0; i < 4; i++) CHECK_OK(st_fallback_alloc(p, 4096, 0, &x[i], &bx[i]));
  CHECK(budget.segments == 1 && budget.reserved == 2u << 20); /* one shared 2 MiB segment */
  for (int i = 0; i < 4; i++) st_fallback_free(p, bx[i], 0);
  CHECK(st_fallback_release_cached(p) == 2u << 20); /* coalesced back into one free segment */
  st_fallback_exact_segments(p, true);
  CHECK_OK(st_fallback_alloc(p, 5000, 0, &x[0], &bx[0]));
  CHECK(budget.reserved == 8192); /* 5000 B rounded to the granularity, not 2 MiB */
  st_fallback_free(p, bx[0], 0);
  /* An idle segment too small for the next request goes back before a new one is made... */
  CHECK_OK(st_fallback_alloc(p, 12000, 0, &x[1], &bx[1]));
  CHECK(budget.segments == 1 && budget.reserved == 12288);
  /* ...but not one still in use, nor one whose work is not done. */
  CHECK_OK(st_fallback_alloc(p, 3000, 0, &x[2], &bx[2])); /* the 12288 one is in use */
  CHECK(x[2] != x[1] && budget.reserved == 12288 + 4096);
  events_done = 0;
  st_fallback_free(p, bx[2], 0);
  CHECK_OK(st_fallback_alloc(p, 20000, 0, &x[3], &bx[3]));
  CHECK(budget.segments == 3 && budget.reserved == 12288 + 4096 + 20480);
  events_done = 1;
  st_fallback_free(p, bx[1], 0);
  st_fallback_free(p, bx[3], 0);
  st_fallback_destroy(p);
  CHECK(budget.reserved == 0);
}

int main(void) {
  RUN(test_stream_ordering);
  RUN(test_no_event_keeps_block_on_its_stream);
  RUN(test_coalescing_and_exact_segments);
  return 0;
}
