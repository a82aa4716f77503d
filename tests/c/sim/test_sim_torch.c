/* test_sim_torch.c - the PyTorch caching-allocator model on hand-made traces whose answers
 * follow from PyTorch's rules (docs/baseline.md): segment sizes, splitting, coalescing,
 * max_split_size, the memory limit's cache flush and OOM, streams, expandable segments. */
#include <string.h>

#include "check.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

/* A tiny trace builder: A(id, size[, stream]) allocs, F(id) frees. */
typedef struct builder {
  stalloc_trace_t* t;
} builder;

static builder make(void) {
  builder b;
  CHECK_OK(stalloc_trace_create(&b.t));
  return b;
}
static void ev(builder* b, uint8_t kind, uint64_t id, uint64_t size, uint64_t stream) {
  stalloc_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.id = id;
  e.size = size;
  e.stream = stream;
  CHECK_OK(stalloc_trace_append(b->t, &e, 1));
}
static void A(builder* b, uint64_t id, uint64_t size) { ev(b, STALLOC_EVENT_ALLOC, id, size, 0); }
static void AS(builder* b, uint64_t id, uint64_t size, uint64_t stream) {
  ev(b, STALLOC_EVENT_ALLOC, id, size, stream);
}
static void F(builder* b, uint64_t id) { ev(b, STALLOC_EVENT_FREE, id, 0, 0); }

static stalloc_sim_result_t run(builder* b, stalloc_sim_kind_t kind, uint64_t max_split,
                                uint64_t limit) {
  stalloc_sim_params_t p;
  stalloc_sim_params_init(&p);
  p.kind = kind;
  p.max_split_size = max_split;
  p.memory_limit = limit;
  stalloc_sim_result_t r;
  stalloc_sim_result_init(&r);
  CHECK_OK(stalloc_simulate(b->t, &p, &r, NULL, NULL, NULL));
  return r;
}
static stalloc_sim_result_t torch(builder* b) { return run(b, STALLOC_SIM_TORCH, 0, 0); }
static stalloc_sim_result_t expandable(builder* b) {
  return run(b, STALLOC_SIM_TORCH_EXPANDABLE, 0, 0);
}

static void test_small_pool_segments(void) {
  builder b = make();
  A(&b, 1, 1000); /* rounds to 1024, small pool: one 2 MiB segment */
  stalloc_sim_result_t r = torch(&b);
  CHECK(r.peak_reserved == 2 * MiB && r.peak_allocated == 1000 && r.segments == 1);
  CHECK(r.waste == 2 * MiB - 1000);
  CHECK(r.fragmentation > 0.999 && r.fragmentation < 1.0);
  A(&b, 2, 1 * MiB - 1024); /* fills the segment exactly: 1024 + (1 MiB - 1024) + ... */
  A(&b, 3, 1 * MiB);        /* 1 MiB is still small: the rest of the first segment */
  r = torch(&b);
  CHECK(r.peak_reserved == 2 * MiB && r.segments == 1);
  A(&b, 4, 1); /* no room: a second small segment */
  r = torch(&b);
  CHECK(r.peak_reserved == 4 * MiB && r.segments == 2 && r.segment_allocs == 2);
  stalloc_trace_destroy(b.t);
}

static void test_large_pool_segments(void) {
  builder b = make();
  A(&b, 1, 5 * MiB); /* 1-10 MiB: a 20 MiB segment, split */
  A(&b, 2, 5 * MiB);
  A(&b, 3, 5 * MiB);
  A(&b, 4, 5 * MiB);
  stalloc_sim_result_t r = torch(&b);
  CHECK(r.peak_reserved == 20 * MiB && r.segments == 1);
  A(&b, 5, 1 * MiB + 1); /* just above 1 MiB: the large pool, another 20 MiB */
  r = torch(&b);
  CHECK(r.peak_reserved == 40 * MiB && r.segments == 2);
  stalloc_trace_destroy(b.t);

  b = make();
  A(&b, 1, 11 * MiB); /* >= 10 MiB: rounded up to 2 MiB: 12 MiB */
  stalloc_sim_result_t r2 = torch(&b);
  CHECK(r2.peak_reserved == 12 * MiB);
  F(&b, 1);
  A(&b, 2, 10 * MiB + 512 * KiB); /* takes the whole 12 MiB block: the rest (1.5 MiB) is split
                                     off, as it is > 1 MiB */
  A(&b, 3, 1 * MiB + 512 * KiB); /* fits in the split-off rest */
  r2 = torch(&b);
  CHECK(r2.peak_reserved == 12 * MiB && r2.segments == 1);
  stalloc_trace_destroy(b.t);

  b = make();
  A(&b, 1, 11 * MiB);
  F(&b, 1);
  A(&b, 2, 11 * MiB - 512 * KiB); /* rest 1.5 MiB > 1 MiB: split */
  A(&b, 3, 1 * MiB + 512 * KiB);
  CHECK(torch(&b).peak_reserved == 12 * MiB);
  stalloc_trace_destroy(b.t);

  b = make();
  A(&b, 1, 11 * MiB);
  F(&b, 1);
  A(&b, 2, 11 * MiB + 512); /* rest just under 1 MiB: not split, so the next needs a segment */
  A(&b, 3, 600 * KiB + 1 * MiB);
  CHECK(torch(&b).peak_reserved == 32 * MiB);
  stalloc_trace_destroy(b.t);
}

static void test_coalesce_and_fragment(void) {
  builder b = make();
  A(&b, 1, 5 * MiB);
  A(&b, 2, 5 * MiB);
  F(&b, 1);
  F(&b, 2); /* both merge back into one 20 MiB free block */
  A(&b, 3, 15 * MiB);
  stalloc_sim_result_t r = torch(&b);
  CHECK(r.peak_reserved == 20 * MiB && r.segments == 1);
  stalloc_trace_destroy(b.t);

  b = make();
  for (uint64_t i = 1; i <= 4; i++) A(&b, i, 5 * MiB);
  F(&b, 1);
  F(&b, 3); /* two 5 MiB holes that do not touch */
  A(&b, 5, 8 * MiB);
  r = torch(&b);
  CHECK(r.peak_reserved == 40 * MiB && r.peak_allocated == 20 * MiB);
  CHECK(r.waste == 20 * MiB && r.fragmentation == 0.5);
  stalloc_trace_destroy(b.t);
}

static void test_streams(void) {
  builder b = make();
  AS(&b, 1, 4096, 1);
  F(&b, 1);
  AS(&b, 2, 4096, 2); /* a cached block of another stream is never reused */
  CHECK(torch(&b).peak_reserved == 4 * MiB);
  stalloc_trace_destroy(b.t);
}

static void test_max_split_size(void) {
  builder b = make();
  A(&b, 1, 50 * MiB);
  F(&b, 1);
  A(&b, 2, 30 * MiB);
  /* default: the cached 50 MiB block is reused and split */
  CHECK(torch(&b).peak_reserved == 50 * MiB);
  /* max_split_size 40 MiB: a request below it never takes an oversize block */
  stalloc_sim_result_t r = run(&b, STALLOC_SIM_TORCH, 40 * MiB, 0);
  CHECK(r.peak_reserved == 80 * MiB && r.segments == 2);
  stalloc_trace_destroy(b.t);

  b = make();
  A(&b, 1, 50 * MiB);
  F(&b, 1);
  A(&b, 2, 45 * MiB); /* oversize request: may take a block up to 20 MiB larger */
  A(&b, 3, 4 * MiB);  /* the oversize block is not split: a new 20 MiB segment */
  r = run(&b, STALLOC_SIM_TORCH, 40 * MiB, 0);
  CHECK(r.peak_reserved == 70 * MiB);
  r = torch(&b); /* default: the 50 MiB block is split, 4 MiB fits in its rest */
  CHECK(r.peak_reserved == 50 * MiB);
  stalloc_trace_destroy(b.t);

  b = make();
  A(&b, 1, 70 * MiB);
  F(&b, 1);
  A(&b, 2, 45 * MiB); /* 70 >= 45 + 20: too big to take; a new segment */
  CHECK(run(&b, STALLOC_SIM_TORCH, 40 * MiB, 0).peak_reserved == 116 * MiB);
  /* under a limit the oversize cached block is released first and the retry fits */
  r = run(&b, STALLOC_SIM_TORCH, 40 * MiB, 100 * MiB);
  CHECK(r.peak_reserved == 70 * MiB && r.ooms == 0 && r.cache_flushes == 0);
  stalloc_trace_destroy(b.t);

  stalloc_sim_params_t p;
  stalloc_sim_params_init(&p);
  p.max_split_size = 20 * MiB; /* PyTorch refuses max_split_size_mb <= 20 */
  stalloc_sim_result_t rr;
  stalloc_sim_result_init(&rr);
  b = make();
  CHECK_STATUS(stalloc_simulate(b.t, &p, &rr, NULL, NULL, NULL), STALLOC_ERR_INVALID_ARGUMENT);
  stalloc_trace_destroy(b.t);
}

static void test_memory_limit(void) {
  builder b = make();
  A(&b, 1, 20 * MiB);
  F(&b, 1);          /* cached */
  A(&b, 2, 24 * MiB); /* 20 + 24 > 30: flush the cache, retry */
  A(&b, 3, 10 * MiB); /* 24 + 10 > 30 with nothing cached: OOM */
  F(&b, 3);           /* the free of a refused request is ignored */
  A(&b, 4, 4 * MiB);  /* 24 + 20 > 30: OOM too */
  F(&b, 2);
  A(&b, 5, 4 * MiB); /* the freed 24 MiB block is reused */
  stalloc_sim_result_t r = run(&b, STALLOC_SIM_TORCH, 0, 30 * MiB);
  CHECK(r.ooms == 2 && r.peak_reserved == 24 * MiB && r.peak_allocated == 24 * MiB);
  CHECK(r.cache_flushes == 3);
  stalloc_sim_result_t free_run = torch(&b); /* no limit: everything fits, nothing flushed */
  CHECK(free_run.ooms == 0 && free_run.cache_flushes == 0);
  /* the 10 and 4 MiB requests are split off the cached 20 MiB block: two segments */
  CHECK(free_run.peak_reserved == 20 * MiB + 24 * MiB && free_run.segments == 2);
  stalloc_trace_destroy(b.t);

  /* a split segment is not released by the flush */
  b = make();
  A(&b, 1, 5 * MiB);
  A(&b, 2, 5 * MiB);
  F(&b, 1);
  A(&b, 3, 12 * MiB); /* 20 + 12 > 25: flush frees nothing (segment in use): OOM */
  r = run(&b, STALLOC_SIM_TORCH, 0, 25 * MiB);
  CHECK(r.ooms == 1 && r.peak_reserved == 20 * MiB);
  stalloc_trace_destroy(b.t);
}

static void test_expandable(void) {
  builder b = make();
  A(&b, 1, 12 * MiB);
  F(&b, 1);
  A(&b, 2, 14 * MiB);
  F(&b, 2);
  A(&b, 3, 30 * MiB);
  /* default: 12, 14 and 30 MiB segments, none reusable by the next */
  CHECK(torch(&b).peak_reserved == 56 * MiB);
  /* expandable: one range mapped in 20 MiB pages, grown in place: 20, then 40 MiB */
  stalloc_sim_result_t r = expandable(&b);
  CHECK(r.peak_reserved == 40 * MiB && r.segments == 1 && r.segment_allocs == 2);
  stalloc_trace_destroy(b.t);

  b = make();
  A(&b, 1, 1000); /* small pool: 2 MiB pages */
  A(&b, 2, 3 * MiB);
  r = expandable(&b);
  CHECK(r.peak_reserved == 22 * MiB && r.segments == 2);
  stalloc_trace_destroy(b.t);

  /* under a limit, free pages of another stream's segment are unmapped to make room */
  b = make();
  AS(&b, 1, 5 * MiB, 1);
  F(&b, 1);
  AS(&b, 2, 30 * MiB, 2);
  r = run(&b, STALLOC_SIM_TORCH_EXPANDABLE, 0, 40 * MiB);
  CHECK(r.ooms == 0 && r.cache_flushes == 1 && r.peak_reserved == 40 * MiB);
  CHECK(r.final_reserved == 40 * MiB);
  r = expandable(&b);
  CHECK(r.peak_reserved == 60 * MiB && r.final_reserved == 60 * MiB);
  stalloc_trace_destroy(b.t);

  /* holes unmapped in the middle of a segment are mapped again later */
  b = make();
  A(&b, 1, 20 * MiB);
  A(&b, 2, 20 * MiB);
  A(&b, 3, 20 * MiB);
  F(&b, 2);
  A(&b, 4, 25 * MiB); /* neither the hole nor the 20 MiB left of the range (70 MiB limit:
                         80 MiB range) holds it; a new range needs 40 MiB: 100 > 70; the
                         flush unmaps the hole, 40 + 40 > 70 still: OOM */
  r = run(&b, STALLOC_SIM_TORCH_EXPANDABLE, 0, 70 * MiB);
  CHECK(r.ooms == 1 && r.cache_flushes == 1 && r.final_reserved == 40 * MiB);
  A(&b, 5, 20 * MiB); /* the hole is mapped again */
  r = run(&b, STALLOC_SIM_TORCH_EXPANDABLE, 0, 70 * MiB);
  CHECK(r.ooms == 1 && r.final_reserved == 60 * MiB && r.peak_reserved == 60 * MiB);
  stalloc_trace_destroy(b.t);
}

static void test_timeline_and_args(void) {
  builder b = make();
  for (uint64_t i = 1; i <= 50; i++) A(&b, i, i * 100 * KiB);
  for (uint64_t i = 1; i <= 50; i++) F(&b, i);
  stalloc_sim_params_t p;
  stalloc_sim_params_init(&p);
  p.timeline_points = 7;
  uint64_t te[7], ta[7], tr[7];
  stalloc_sim_result_t r;
  stalloc_sim_result_init(&r);
  CHECK_OK(stalloc_simulate(b.t, &p, &r, te, ta, tr));
  CHECK(r.timeline_count == 7 && te[6] == 99);
  uint64_t max_a = 0, max_r = 0;
  for (int i = 0; i < 7; i++) {
    if (i) CHECK(te[i] > te[i - 1]);
    CHECK(tr[i] >= ta[i]);
    max_a = ta[i] > max_a ? ta[i] : max_a;
    max_r = tr[i] > max_r ? tr[i] : max_r;
  }
  CHECK(max_a == r.peak_allocated && max_r == r.peak_reserved);
  CHECK(r.peak_allocated == 1275 * 100 * KiB);
  /* more points than events: one entry per event */
  p.timeline_points = 500;
  uint64_t te2[500], ta2[500], tr2[500];
  CHECK_OK(stalloc_simulate(b.t, &p, &r, te2, ta2, tr2));
  CHECK(r.timeline_count == 100 && te2[99] == 99);
  CHECK_STATUS(stalloc_simulate(b.t, &p, &r, NULL, ta2, tr2), STALLOC_ERR_INVALID_ARGUMENT);
  p.timeline_points = 0;
  p.kind = (stalloc_sim_kind_t)9;
  CHECK_STATUS(stalloc_simulate(b.t, &p, &r, NULL, NULL, NULL), STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_simulate(NULL, &p, &r, NULL, NULL, NULL), STALLOC_ERR_INVALID_ARGUMENT);
  stalloc_trace_destroy(b.t);
}

/* Random requests on two streams through every mode: the simulator's own end-of-run balance
 * check (STALLOC_ERR_INTERNAL otherwise) and the bounds must hold, and sanitizers watch. */
static void test_random_stress(void) {
  uint32_t rng = 12345;
  builder b = make();
  uint64_t live[64] = {0}, next_id = 1;
  for (int k = 0; k < 20000; k++) {
    rng = rng * 1103515245u + 12345u;
    int slot = (int)((rng >> 8) % 64);
    if (live[slot]) {
      F(&b, live[slot]);
      live[slot] = 0;
    } else {
      rng = rng * 1103515245u + 12345u;
      uint64_t r = rng >> 4;
      uint64_t size = (r & 3) == 0 ? (r % (64 * MiB)) + 1 : (r & 3) == 1 ? (r % (4 * MiB)) + 1
                                                                         : (r % 4096) + 1;
      live[slot] = next_id++;
      AS(&b, live[slot], size, (r >> 20) & 1);
    }
  }
  uint64_t limits[] = {0, 600 * MiB, 300 * MiB};
  uint64_t splits[] = {0, 40 * MiB};
  for (int kind = 0; kind < 2; kind++)
    for (int li = 0; li < 3; li++)
      for (int si = 0; si < 2; si++) {
        stalloc_sim_result_t r = run(&b, (stalloc_sim_kind_t)kind, splits[si], limits[li]);
        if (getenv("SIM_VERBOSE"))
          fprintf(stderr, "kind %d limit %llu split %llu: reserved %llu ooms %llu flushes %llu\n", kind,
                  (unsigned long long)limits[li], (unsigned long long)splits[si],
                  (unsigned long long)r.peak_reserved, (unsigned long long)r.ooms,
                  (unsigned long long)r.cache_flushes);
        if (limits[li]) CHECK(r.peak_reserved <= limits[li]);
        if (!r.ooms) CHECK(r.peak_reserved >= r.peak_allocated);
        CHECK(r.final_reserved <= r.peak_reserved);
      }
  stalloc_trace_destroy(b.t);
}

int main(void) {
  RUN(test_small_pool_segments);
  RUN(test_large_pool_segments);
  RUN(test_coalesce_and_fragment);
  RUN(test_streams);
  RUN(test_max_split_size);
  RUN(test_memory_limit);
  RUN(test_expandable);
  RUN(test_timeline_and_args);
  RUN(test_random_stress);
  return 0;
}
