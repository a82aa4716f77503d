/* test_arena.c - the growable pool on the virtual backend (2 MiB granules): granules mapped as
 * blocks touch them and, at the peak, given back (the highest first) before new ones are
 * mapped, a plan's pool as a region of it that costs only the granules its live blocks touch
 * (and left for the rest of a step whose input outgrew it),
 * slab chunks in it, the list of cached granules staying bounded over a long run, blocks of
 * whole granules on granule boundaries (in a hole; growing the top, when asked), a block at the
 * mapped end of its free block (at_ends), one further up the sizes on mapped granules
 * (look_further), a granule the layout under way wants kept from a move
 * (st_arena_want), and, with the
 * free blocks indexed by address (the layout hints'), small requests in the lowest free block
 * that fits (checked against a scan of the free blocks over a long random run). */
#include "check.h"
#include "backends/virtual.h"
#include "runtime/arena.h"
#include "runtime/runtime.h"
#include "runtime/slab.h"
#include "hand_plan.h"

#define MiB (1ull << 20)
#define G (2 * MiB)

typedef struct fixture {
  const backend_ops* ops;
  void* backend;
  backend_caps caps;
  st_budget budget;
  st_arena* arena;
} fixture;

static void setup_on(fixture* f, const backend_ops* ops, uint64_t lag) {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_VIRTUAL;
  o.virtual_capacity = 1ull << 36;
  o.virtual_lag = lag;
  *f = (fixture){.ops = ops};
  CHECK_OK(f->ops->create(&o, &f->backend, &f->caps));
  CHECK_OK(st_arena_create(f->ops, f->backend, &f->caps, 512, 1ull << 34, &f->budget, &f->arena));
}

static void setup(fixture* f) { setup_on(f, st_backend_get(STALLOC_BACKEND_VIRTUAL), 0); }

/* A lagging device (never ticked here: queued work never finishes) and a region over 32
 * granules. */
static void setup_lagging(fixture* f, uint8_t** r, st_arena_block** region) {
  setup_on(f, &st_backend_virtual_lagged, 1000);
  void* base;
  CHECK_OK(st_arena_region(f->arena, 32 * G, 512, &base, region));
  *r = base;
}

static void teardown(fixture* f) {
  st_arena_destroy(f->arena);
  CHECK(f->budget.reserved == 0);
  f->ops->destroy(f->backend);
}

static void test_granules_follow_live_blocks(void) {
  fixture f;
  setup(&f);
  void *p, *q;
  st_arena_block *a, *b;
  CHECK_OK(st_arena_alloc(f.arena, 3 * MiB, 0, &p, &a));
  CHECK(f.budget.reserved == 2 * G);
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &q, &b)); /* shares the second granule */
  CHECK(f.budget.reserved == 2 * G && (uint8_t*)q == (uint8_t*)p + 3 * MiB);
  st_arena_free(f.arena, a, 0);
  CHECK(f.budget.reserved == 2 * G);           /* the first granule is cached, not given back */
  CHECK(st_arena_idle_bytes(f.arena) == G && f.budget.reserved == 2 * G); /* counted, not unmapped */
  CHECK(st_arena_trim(f.arena) == G && f.budget.reserved == G);
  CHECK(st_arena_idle_bytes(f.arena) == 0);
  st_arena_free(f.arena, b, 0);
  CHECK(st_arena_idle_bytes(f.arena) == G);
  CHECK(st_arena_trim(f.arena) == G && f.budget.reserved == 0);
  teardown(&f);
}

static void test_region_maps_what_its_blocks_touch(void) {
  fixture f;
  setup(&f);
  void *w, *base;
  st_arena_block *wb, *region;
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &w, &wb)); /* a weight below the region */
  CHECK_OK(st_arena_region(f.arena, 64 * MiB + 4096, 512, &base, &region));
  uint8_t* r = base;
  CHECK((uintptr_t)(r - (uint8_t*)w) % G == 0 && r > (uint8_t*)w); /* starts on a granule */
  CHECK(f.budget.reserved == G);                                 /* address space only */
  CHECK_OK(st_arena_region_ref(f.arena, r + 10 * MiB, 3 * MiB, ST_ARENA_ANY_STREAM)); /* granules 5 and 6 */
  CHECK(f.budget.reserved == 3 * G && f.budget.peak_reserved == 3 * G);
  CHECK_OK(st_arena_region_ref(f.arena, r + 13 * MiB, 512, ST_ARENA_ANY_STREAM));     /* granule 6 again */
  CHECK(f.budget.reserved == 3 * G);
  /* A block above the region shares the region's last granule (one of 1.5 MiB: the 1 MiB
   * left free below the region, which starts on a granule, is too small for it). */
  void* above;
  st_arena_block* ab;
  CHECK_OK(st_arena_alloc(f.arena, 3 * MiB / 2, 0, &above, &ab));
  CHECK((uint8_t*)above == r + 64 * MiB + 4096);
  CHECK(f.budget.reserved == 4 * G);
  CHECK_OK(st_arena_region_ref(f.arena, r + 63 * MiB, MiB + 4096, ST_ARENA_ANY_STREAM)); /* the last granule: mapped */
  CHECK(f.budget.reserved == 5 * G);
  st_arena_region_unref(f.arena, r + 63 * MiB, MiB + 4096);
  st_arena_region_unref(f.arena, r + 10 * MiB, 3 * MiB);
  st_arena_region_unref(f.arena, r + 13 * MiB, 512);
  CHECK(st_arena_idle_bytes(f.arena) == 3 * G);
  CHECK(st_arena_trim(f.arena) == 3 * G && f.budget.reserved == 2 * G);
  /* Released, the region's address space serves blocks again. */
  st_arena_region_release(f.arena, region);
  void* again;
  st_arena_block* gb;
  CHECK_OK(st_arena_alloc(f.arena, 32 * MiB, 0, &again, &gb));
  CHECK((uint8_t*)again < r + 64 * MiB);
  st_arena_free(f.arena, gb, 0);
  st_arena_free(f.arena, ab, 0);
  st_arena_free(f.arena, wb, 0);
  teardown(&f);
}

/* A plan served from a region: reserved is the granules its blocks have touched, never the
 * whole pool; retired, it keeps only the granules of blocks still live; destroyed, it gives
 * back its address space. */
static void test_runtime_in_a_region(void) {
  fixture f;
  setup(&f);
  /* Two 8 MiB positions at offsets 0 and 32 MiB of a 48 MiB pool, never live together. */
  st_plan_entry iter[2] = {{8 * MiB, 0, PLAN_CLASS_PERIODIC, UINT32_MAX},
                           {8 * MiB, 32 * MiB, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  stalloc_plan p = {.pool_size = 48 * MiB, .alignment = 512, .iteration = iter, .iteration_count = 2};
  seal_plan(&p);
  st_runtime* rt;
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &p, 0, false, NULL, &rt));
  CHECK(f.budget.reserved == 0 && st_runtime_pool_size(rt) == 48 * MiB);
  void* ptr[2];
  st_range_node* node[2];
  st_rt_outcome out;
  for (int it = 0; it < 3; it++)
    for (int i = 0; i < 2; i++) {
      CHECK_OK(st_runtime_alloc(rt, 8 * MiB, 0, &out, &ptr[i], &node[i]));
      CHECK(out == RT_HIT && f.budget.reserved == (it || i ? 8 : 4) * G);
      st_runtime_free(rt, node[i], 0);
    }
  CHECK(f.budget.peak_reserved == 8 * G); /* not the 24 granules of the pool */
  CHECK(st_arena_trim(f.arena) == 0);     /* held while the plan is served */
  void* base;
  uint64_t size;
  st_runtime_pool_allocation(rt, &base, &size);
  CHECK(base == NULL && size == 0); /* not one backend allocation (getBaseAllocation refuses) */
  /* A miss into the growable pool: the region lets go of its idle granules until a step
   * passes without one. */
  st_runtime_missed_into_arena(rt);
  CHECK(st_arena_trim(f.arena) == 8 * G && f.budget.reserved == 0);
  CHECK_OK(st_runtime_alloc(rt, 8 * MiB, 0, &out, &ptr[0], &node[0]));
  CHECK(out == RT_HIT && f.budget.reserved == 4 * G);
  st_runtime_free(rt, node[0], 0);
  CHECK(st_arena_trim(f.arena) == 4 * G);
  st_runtime_step(rt); /* the step that missed ends */
  CHECK_OK(st_runtime_alloc(rt, 8 * MiB, 0, &out, &ptr[1], &node[1]));
  st_runtime_step(rt); /* a step without a miss: held again, the live block's granules first */
  st_runtime_free(rt, node[1], 0);
  CHECK(st_arena_trim(f.arena) == 0 && f.budget.reserved == 4 * G);
  CHECK_OK(st_runtime_alloc(rt, 8 * MiB, 0, &out, &ptr[0], &node[0]));
  CHECK(f.budget.reserved == 8 * G);
  st_runtime_retire(rt); /* dropped with a block live: only its granules stay */
  CHECK(st_arena_trim(f.arena) == 4 * G && f.budget.reserved == 4 * G);
  st_runtime_free(rt, node[0], 0);
  CHECK(st_runtime_idle(rt) && st_arena_trim(f.arena) == 4 * G && f.budget.reserved == 0);
  st_runtime_destroy(rt);
  void* again;
  st_arena_block* gb;
  CHECK_OK(st_arena_alloc(f.arena, 48 * MiB, 0, &again, &gb));
  CHECK(again == ptr[0]); /* the region's range is free again */
  st_arena_free(f.arena, gb, 0);
  CHECK(st_arena_trim(f.arena) == 24 * G);
  /* Destroyed while served, live block included: everything goes back. */
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &p, 0, false, NULL, &rt));
  CHECK_OK(st_runtime_alloc(rt, 8 * MiB, 0, &out, &ptr[0], &node[0]));
  st_runtime_destroy(rt);
  CHECK(st_arena_trim(f.arena) == 4 * G && f.budget.reserved == 0);
  teardown(&f);
}

/* Plans of two kinds served by turns share one region: the second plan's pool starts where the
 * first's does (a larger one grows the region in place where it can), a hit on a range the
 * other plan's block still holds misses (never two live blocks on one byte), a change of kind
 * maps no granule the other plan let go, and the region goes back with the last of them. */
static void test_plans_of_two_kinds_share_a_region(void) {
  fixture f;
  setup(&f);
  st_plan_entry ia[2] = {{8 * MiB, 0, PLAN_CLASS_PERIODIC, UINT32_MAX},
                         {8 * MiB, 8 * MiB, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  stalloc_plan pa = {.pool_size = 16 * MiB, .alignment = 512, .iteration = ia, .iteration_count = 2};
  seal_plan(&pa);
  st_plan_entry ib[1] = {{6 * MiB, 0, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  stalloc_plan pb = {.pool_size = 6 * MiB, .alignment = 512, .iteration = ib, .iteration_count = 1};
  seal_plan(&pb);
  st_runtime *a, *b, *c;
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &pa, 0, false, NULL, &a));
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &pb, 0, false, a, &b));
  const void *base_a, *base_b;
  uint64_t size_a, size_b;
  CHECK(st_runtime_span(a, &base_a, &size_a) && st_runtime_span(b, &base_b, &size_b));
  CHECK(base_a == base_b && size_a == 16 * MiB && size_b == 6 * MiB);
  /* A pool larger than the region: with a block after the region, it gets one of its own; with
   * the address space after it free, the region grows in place. */
  st_plan_entry ic[1] = {{32 * MiB, 0, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  stalloc_plan pc = {.pool_size = 32 * MiB, .alignment = 512, .iteration = ic, .iteration_count = 1};
  seal_plan(&pc);
  void* above;
  st_arena_block* above_b;
  CHECK_OK(st_arena_alloc(f.arena, 4 * MiB, 0, &above, &above_b));
  CHECK(above == (const uint8_t*)base_a + size_a);
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &pc, 0, false, a, &c));
  const void* base_c;
  uint64_t size_c;
  CHECK(st_runtime_span(c, &base_c, &size_c) && (const uint8_t*)base_c >= (const uint8_t*)above + 4 * MiB);
  st_runtime_destroy(c);
  st_arena_free(f.arena, above_b, 0);
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &pc, 0, false, a, &c));
  CHECK(st_runtime_span(c, &base_c, &size_c) && base_c == base_a && size_c == 32 * MiB);
  CHECK_OK(st_arena_alloc(f.arena, 4 * MiB, 0, &above, &above_b));
  CHECK((const uint8_t*)above >= (const uint8_t*)base_a + 32 * MiB); /* the grown region is taken */
  st_arena_free(f.arena, above_b, 0);
  st_runtime_destroy(c);

  void *pa0, *pa1, *pb0;
  st_range_node *na0, *na1, *nb0;
  st_rt_outcome out;
  CHECK_OK(st_runtime_alloc(a, 8 * MiB, 0, &out, &pa0, &na0));
  CHECK(out == RT_HIT && pa0 == base_a);
  CHECK_OK(st_runtime_alloc(a, 8 * MiB, 0, &out, &pa1, &na1));
  CHECK(out == RT_HIT);
  st_runtime_free(a, na1, 0);
  st_runtime_step(a);
  CHECK(f.budget.reserved == 8 * G);
  /* The other kind's step, with a's first block still live where b's plan puts its block. */
  st_runtime_pause(a);
  CHECK_OK(st_runtime_alloc(b, 6 * MiB, 0, &out, &pb0, &nb0));
  CHECK(out != RT_HIT);
  st_runtime_free(a, na0, 0);
  uint64_t maps = st_arena_maps(f.arena);
  CHECK_OK(st_runtime_alloc(b, 6 * MiB, 0, &out, &pb0, &nb0));
  CHECK(out == RT_HIT && pb0 == base_a);
  CHECK(st_arena_maps(f.arena) == maps); /* the granules a let go, still mapped where b wants them */
  /* a again, b's block live across the change: a's slot under it misses, the other hits. */
  st_runtime_pause(b);
  st_runtime_step(a);
  CHECK_OK(st_runtime_alloc(a, 8 * MiB, 0, &out, &pa0, &na0));
  CHECK(out != RT_HIT);
  CHECK_OK(st_runtime_alloc(a, 8 * MiB, 0, &out, &pa1, &na1));
  CHECK(out == RT_HIT && (uint8_t*)pa1 == (uint8_t*)base_a + 8 * MiB);
  /* a goes with its block live; b's block stays where it is, and the region with it. */
  st_runtime_destroy(a);
  void* q;
  st_arena_block* qb;
  CHECK_OK(st_arena_alloc(f.arena, 16 * MiB, 0, &q, &qb));
  CHECK((uint8_t*)q >= (uint8_t*)base_b + 16 * MiB || (uint8_t*)q + 16 * MiB <= (uint8_t*)base_b);
  st_arena_free(f.arena, qb, 0);
  st_runtime_free(b, nb0, 0);
  st_runtime_destroy(b);
  CHECK_OK(st_arena_alloc(f.arena, 16 * MiB, 0, &q, &qb));
  CHECK(q == base_b); /* the region's range is free again */
  st_arena_free(f.arena, qb, 0);
  st_arena_trim(f.arena);
  teardown(&f);
}

/* A pool past the arena's range is refused before anything is sized from it (fuzz_replay found
 * the granule flags allocated first: a 4 TiB calloc). */
static void test_pool_past_the_range(void) {
  fixture f;
  setup(&f);
  st_plan_entry iter[1] = {{1ull << 45, 0, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  stalloc_plan p = {.pool_size = 1ull << 45, .alignment = 512, .iteration = iter, .iteration_count = 1};
  seal_plan(&p);
  st_runtime* rt = NULL;
  CHECK_STATUS(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &p, 0, false, NULL, &rt),
               STALLOC_ERR_OUT_OF_MEMORY);
  CHECK(rt == NULL && f.budget.reserved == 0);
  void* q;
  st_arena_block* b;
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &q, &b)); /* the arena is as it was */
  st_arena_free(f.arena, b, 0);
  teardown(&f);
}

static void test_slab_chunks_share_granules(void) {
  fixture f;
  setup(&f);
  st_slab* slab;
  CHECK_OK(st_slab_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 16, &slab));
  void* big;
  st_arena_block* bb;
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &big, &bb));
  void* t;
  st_slot* slot;
  CHECK_OK(st_slab_alloc(slab, 100, 0, &t, &slot));
  CHECK(f.budget.reserved == G); /* the chunk lies in the granule the big block opened */
  st_slab_free(slab, slot, 0);
  st_slab_destroy(slab);
  st_arena_free(f.arena, bb, 0);
  teardown(&f);
}

/* Granules emptied and filled again every step must not pile up in the cached list: a
 * million cycles stay within memory (the list holds each granule at most once). */
static void test_cached_list_stays_bounded(void) {
  fixture f;
  setup(&f);
  void* keep;
  st_arena_block* kb;
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &keep, &kb));
  for (int i = 0; i < 1000000; i++) {
    void* p;
    st_arena_block* b;
    CHECK_OK(st_arena_alloc(f.arena, 3 * G, 0, &p, &b));
    st_arena_free(f.arena, b, 0);
    CHECK(st_arena_cached_entries(f.arena) <= 4);
  }
  CHECK(f.budget.peak_reserved == 4 * G);
  CHECK(st_arena_trim(f.arena) == 3 * G);
  st_arena_free(f.arena, kb, 0);
  teardown(&f);
}

/* alloc_at takes exactly the bytes asked for when all are free, grows the top to reach them,
 * and refuses (changing nothing) a range with a taken byte, a misaligned one or one past the
 * range; st_arena_taken lists what is in use. */
static void test_alloc_at_takes_only_free_bytes(void) {
  fixture f;
  setup(&f);
  void *p, *q, *r, *s;
  st_arena_block *a, *b, *c, *d;
  CHECK_OK(st_arena_alloc(f.arena, 4 * MiB, 0, &p, &a));
  CHECK(!st_arena_alloc_at(f.arena, st_arena_offset(f.arena, p) + 8 * MiB, MiB, 0, &r, &c)); /* not indexed */
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &q, &b));
  st_arena_free(f.arena, a, 0);                      /* a hole [0, 4 MiB) below b */
  st_arena_index_addresses(f.arena);                  /* indexes the free blocks there are */
  uint64_t base = st_arena_offset(f.arena, p);
  CHECK(st_arena_offset(f.arena, q) == base + 4 * MiB);
  CHECK(!st_arena_alloc_at(f.arena, base + 3 * MiB, 2 * MiB, 0, &r, &c)); /* runs into b */
  CHECK(!st_arena_alloc_at(f.arena, base + 4 * MiB, 512, 0, &r, &c));     /* b itself */
  CHECK(!st_arena_alloc_at(f.arena, base + 100, 512, 0, &r, &c));         /* misaligned */
  CHECK(!st_arena_alloc_at(f.arena, 1ull << 34, 512, 0, &r, &c));         /* past the range */
  CHECK(st_arena_alloc_at(f.arena, base + MiB, 2 * MiB, 0, &r, &c));      /* inside the hole */
  CHECK((uint8_t*)r == (uint8_t*)p + MiB);
  CHECK(st_arena_alloc_at(f.arena, base + 8 * MiB, MiB, 0, &s, &d));      /* past the top */
  CHECK((uint8_t*)s == (uint8_t*)p + 8 * MiB);
  uint64_t starts[4], sizes[4], tags[4];
  *st_arena_tag(d) = 7;
  CHECK(st_arena_taken(f.arena, starts, sizes, tags, 4) == 3);
  CHECK(tags[0] == 7 && tags[1] == 0);
  CHECK(starts[0] == base + 8 * MiB && sizes[0] == MiB);
  CHECK(starts[1] == base + 4 * MiB && starts[2] == base + MiB && sizes[2] == 2 * MiB);
  /* the bytes around them are still free: best fit finds them */
  void* t;
  st_arena_block* e;
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &t, &e));
  CHECK((uint8_t*)t == (uint8_t*)p || (uint8_t*)t == (uint8_t*)p + 3 * MiB);
  st_arena_free(f.arena, e, 0);
  st_arena_free(f.arena, c, 0);
  st_arena_free(f.arena, d, 0);
  CHECK(st_arena_alloc_at(f.arena, base, 5 * MiB, 0, &r, &c) == false); /* b is still there */
  CHECK(st_arena_alloc_at(f.arena, base, 4 * MiB, 0, &r, &c));          /* the whole hole again */
  st_arena_free(f.arena, c, 0);
  st_arena_free(f.arena, b, 0);
  teardown(&f);
}

/* On a device that runs behind (the lagged virtual backend, never ticked here: queued work
 * never finishes), a range of a region freed with its stream's work queued is cached at once;
 * at the peak a request of that stream aliases its memory rather than map more, and a request
 * of no stream cannot; another stream's block in an aliased granule waits for that work. */
static void test_region_free_on_a_lagging_device(void) {
  fixture f;
  uint8_t* r;
  st_arena_block* region;
  setup_lagging(&f, &r, &region);
  CHECK_OK(st_arena_region_ref(f.arena, r, G, 7));
  CHECK(f.budget.reserved == G && f.budget.peak_reserved == G);
  CHECK(st_arena_region_free(f.arena, r, G, 7));          /* its work on stream 7 still queued */
  CHECK_OK(st_arena_region_ref(f.arena, r + 2 * G, G, 7)); /* stream 7's next request: an alias */
  CHECK(f.budget.reserved == G);
  CHECK_OK(st_arena_region_ref(f.arena, r + 4 * G, G, ST_ARENA_ANY_STREAM)); /* nothing to alias */
  CHECK(f.budget.reserved == 2 * G);
  st_arena_region_unref(f.arena, r + 2 * G, G);
  st_arena_region_unref(f.arena, r + 4 * G, G);
  /* An alias for part of a granule: the rest of it goes to stream 7 at once, but a block of
   * stream 9 there waits for stream 7's queued work on that memory first. */
  CHECK_OK(st_arena_region_ref(f.arena, r + 8 * G, G, 7));
  CHECK(st_arena_region_free(f.arena, r + 8 * G, G, 7));
  uint64_t reserved = f.budget.reserved, waits = st_virtual_waits(f.backend);
  CHECK_OK(st_arena_region_ref(f.arena, r + 10 * G, MiB, 7)); /* aliased */
  CHECK(f.budget.reserved == reserved && *st_arena_shared_count(f.arena));
  CHECK_OK(st_arena_region_ref(f.arena, r + 10 * G + MiB, MiB / 2, 7));
  size_t shared = *st_arena_shared_count(f.arena);
  CHECK(st_virtual_waits(f.backend) == waits && shared);
  st_arena_settle(f.arena, r + 10 * G + 3 * MiB / 2, MiB / 2, 9); /* a held granule's bytes */
  CHECK(st_virtual_waits(f.backend) > waits && *st_arena_shared_count(f.arena) == shared - 1);
  st_arena_region_unref(f.arena, r + 10 * G, MiB);
  st_arena_region_unref(f.arena, r + 10 * G + MiB, MiB / 2);
  st_arena_region_release(f.arena, region);
  teardown(&f);
}

/* A block of whole granules goes on a granule boundary in its hole (the one leaving the smaller
 * gap), so it holds only its own granules; other sizes go at the hole's start (best fit). */
static void test_whole_granules_go_on_a_boundary(void) {
  fixture f;
  setup(&f);
  void *pa, *pb, *pc, *pd, *pe;
  st_arena_block *a, *b, *c, *d, *e;
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &pa, &a));     /* [0, 1) MiB */
  CHECK_OK(st_arena_alloc(f.arena, 5 * MiB, 0, &pb, &b)); /* [1, 6) */
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &pc, &c));     /* [6, 7) */
  st_arena_free(f.arena, b, 0);                            /* a hole [1, 6) */
  CHECK_OK(st_arena_alloc(f.arena, 3 * MiB, 0, &pd, &d));
  CHECK((uint8_t*)pd == (uint8_t*)pa + MiB);               /* not whole granules: the start */
  st_arena_free(f.arena, d, 0);
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &pe, &e));
  CHECK((uint8_t*)pe == (uint8_t*)pa + 4 * MiB);           /* ends on the boundary at 6: no gap above */
  st_arena_free(f.arena, a, 0);
  st_arena_free(f.arena, c, 0);
  st_arena_trim(f.arena);
  CHECK(f.budget.reserved == G); /* one granule, where [1, 3) would have held two */
  st_arena_free(f.arena, e, 0);
  /* a hole [1, 5.5): the first boundary leaves 1 MiB below, the last 1.5 MiB above */
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &pa, &a));
  CHECK_OK(st_arena_alloc(f.arena, 9 * MiB / 2, 0, &pb, &b));
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &pc, &c));
  st_arena_free(f.arena, b, 0);
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &pe, &e));
  CHECK((uint8_t*)pe == (uint8_t*)pa + 2 * MiB);
  st_arena_free(f.arena, a, 0);
  st_arena_free(f.arena, c, 0);
  st_arena_free(f.arena, e, 0);
  teardown(&f);
}

/* A block of other sizes goes against the end of its hole when the block above shares that
 * granule and the hole's start would touch a granule no live block touches; on a tie, the start
 * (best fit). */
static void test_a_block_goes_against_the_block_above(void) {
  fixture f;
  setup(&f);
  void *pa, *pb, *pc, *pd, *pe;
  st_arena_block *a, *b, *c, *d, *e;
  CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pa, &a));    /* [0, 4) MiB */
  CHECK_OK(st_arena_alloc(f.arena, 3 * MiB, 0, &pb, &b));  /* [4, 7) */
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &pc, &c));      /* [7, 8): shares granule [6, 8) */
  st_arena_free(f.arena, b, 0);                             /* a hole [4, 7) */
  uint64_t reserved = f.budget.reserved;
  CHECK_OK(st_arena_alloc(f.arena, 3 * MiB / 4, 0, &pd, &d));
  CHECK((uint8_t*)pd == (uint8_t*)pa + 25 * MiB / 4);       /* [6.25, 7): in c's granule */
  CHECK(f.budget.reserved == reserved);                     /* no granule more */
  CHECK_OK(st_arena_alloc(f.arena, 3 * MiB / 2, 0, &pe, &e));
  CHECK((uint8_t*)pe == (uint8_t*)pa + 4 * MiB);            /* one new granule either way: the start */
  st_arena_free(f.arena, a, 0);
  st_arena_free(f.arena, c, 0);
  st_arena_free(f.arena, d, 0);
  st_arena_free(f.arena, e, 0);
  teardown(&f);
}

/* A block of whole granules that grows the top: against the block below by default (weights
 * made end to end share granules), on the next granule boundary with top_on_boundary, where,
 * freed, it gives all its granules back, also when the top grows from a free block there.
 * Other sizes go against the block below either way. */
static void test_top_growth_on_a_boundary(void) {
  for (int on = 0; on <= 1; on++) {
    fixture f;
    setup(&f);
    st_arena_set_top_on_boundary(f.arena, on);
    void *pa, *pb, *pc, *pd;
    st_arena_block *a, *b, *c, *d;
    CHECK_OK(st_arena_alloc(f.arena, 3 * MiB, 0, &pa, &a)); /* [0, 3) MiB */
    CHECK_OK(st_arena_alloc(f.arena, G, 0, &pb, &b));
    CHECK((uint8_t*)pb == (uint8_t*)pa + (on ? 4 : 3) * MiB);
    CHECK(f.budget.reserved == 3 * G); /* the same granules mapped either way, for now */
    CHECK_OK(st_arena_alloc(f.arena, 3 * MiB / 2, 0, &pc, &c)); /* not whole granules */
    CHECK((uint8_t*)pc == (uint8_t*)pb + G);
    st_arena_free(f.arena, b, 0); /* the step's block goes: its granule comes back only if alone */
    st_arena_trim(f.arena);
    CHECK(f.budget.reserved == (on ? 3 : 4) * G);
    st_arena_free(f.arena, c, 0); /* the top block is free from 3 MiB, too small for d */
    CHECK_OK(st_arena_alloc(f.arena, 4 * G, 0, &pd, &d));
    CHECK((uint8_t*)pd == (uint8_t*)pa + (on ? 4 : 3) * MiB);
    st_arena_free(f.arena, a, 0);
    st_arena_free(f.arena, d, 0);
    teardown(&f);
  }
}

/* With fit candidates a request weighs the free blocks from best fit up and takes the one that
 * needs the fewest granules mapped: a hole whose granules are still mapped over an exact fit
 * whose granules were given back. */
static void test_fit_candidates_prefer_mapped_granules(void) {
  for (unsigned candidates = 1; candidates <= 4; candidates += 3) {
    fixture f;
    setup(&f);
    st_arena_set_fit_candidates(f.arena, candidates);
    void *pa, *p1, *pb, *p2, *pr;
    st_arena_block *a, *s1, *b, *s2, *r;
    CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pa, &a)); /* [0, 4) MiB */
    CHECK_OK(st_arena_alloc(f.arena, G, 0, &p1, &s1));    /* [4, 6) */
    CHECK_OK(st_arena_alloc(f.arena, 3 * G, 0, &pb, &b)); /* [6, 12) */
    CHECK_OK(st_arena_alloc(f.arena, G, 0, &p2, &s2));    /* [12, 14) */
    st_arena_free(f.arena, a, 0);
    CHECK(st_arena_trim(f.arena) == 2 * G); /* the exact fit's granules go back */
    st_arena_free(f.arena, b, 0);           /* the larger hole's stay mapped */
    f.budget.peak_reserved = f.budget.reserved; /* at the peak: a granule needed is moved */
    uint64_t maps = f.budget.backend_allocs;
    CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pr, &r));
    if (candidates == 1) { /* best fit: the exact hole, two granules moved there */
      CHECK(pr == pa && f.budget.backend_allocs - maps == 2);
    } else { /* the mapped hole: nothing to map */
      CHECK(pr == pb && f.budget.backend_allocs == maps);
    }
    CHECK(f.budget.reserved == 5 * G); /* moved or not, no granule more */
    st_arena_free(f.arena, r, 0);
    st_arena_free(f.arena, s1, 0);
    st_arena_free(f.arena, s2, 0);
    teardown(&f);
  }
}

/* With at_ends (and more than one candidate) a block may go at the end of its free block where
 * the granules are still mapped: a hole of four granules, its lower two given back, its upper
 * two idle, at the peak. Without it the block starts at the hole's start and the two idle
 * granules move there. */
static void test_at_ends_a_block_takes_the_mapped_end(void) {
  for (int at_ends = 0; at_ends <= 1; at_ends++) {
    fixture f;
    setup(&f);
    st_arena_set_fit_candidates(f.arena, 4);
    st_arena_set_at_ends(f.arena, at_ends);
    void *pa, *pb, *pc, *pr;
    st_arena_block *a, *b, *c, *r;
    CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pa, &a)); /* [0, 4) MiB */
    CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pb, &b)); /* [4, 8) */
    CHECK_OK(st_arena_alloc(f.arena, G, 0, &pc, &c));     /* [8, 10): closes the hole */
    st_arena_free(f.arena, a, 0);
    CHECK(st_arena_trim(f.arena) == 2 * G); /* granules 0 and 1 go back */
    st_arena_free(f.arena, b, 0);           /* 2 and 3 stay mapped: one free block [0, 8) */
    f.budget.peak_reserved = f.budget.reserved;
    uint64_t maps = f.budget.backend_allocs;
    CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pr, &r));
    if (at_ends) CHECK(pr == pb && f.budget.backend_allocs == maps);
    else CHECK(pr == pa && f.budget.backend_allocs - maps == 2);
    CHECK(f.budget.reserved == 3 * G);
    st_arena_free(f.arena, r, 0);
    st_arena_free(f.arena, c, 0);
    teardown(&f);
  }
}

/* With look_further, where every candidate needs granules mapped, a free block further up the
 * sizes that holds the block on mapped granules takes it: three exact holes whose granules went
 * back and a larger one still mapped, two candidates weighed. Without it best fit's hole is
 * taken and two granules move there. */
static void test_looking_further_finds_mapped_granules(void) {
  for (int further = 0; further <= 1; further++) {
    fixture f;
    setup(&f);
    st_arena_set_fit_candidates(f.arena, 2);
    st_arena_set_look_further(f.arena, further);
    void *p[8], *pr;
    st_arena_block *blk[8], *r;
    const uint64_t sizes[8] = {2 * G, G, 2 * G, G, 2 * G, G, 6 * G, G}; /* holes 0, 2, 4, 6 */
    for (int i = 0; i < 8; i++) CHECK_OK(st_arena_alloc(f.arena, sizes[i], 0, &p[i], &blk[i]));
    for (int i = 0; i < 6; i += 2) st_arena_free(f.arena, blk[i], 0);
    CHECK(st_arena_trim(f.arena) == 6 * G); /* the exact holes' granules go back */
    st_arena_free(f.arena, blk[6], 0);      /* the larger hole's stay mapped */
    f.budget.peak_reserved = f.budget.reserved;
    uint64_t maps = f.budget.backend_allocs;
    CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pr, &r));
    if (further) CHECK(pr == p[6] && f.budget.backend_allocs == maps);
    else CHECK(pr == p[0] && f.budget.backend_allocs - maps == 2);
    CHECK(f.budget.reserved == f.budget.peak_reserved); /* moved or not, no granule more */
    st_arena_free(f.arena, r, 0);
    for (int i = 1; i < 8; i += 2) st_arena_free(f.arena, blk[i], 0);
    teardown(&f);
  }
}

/* Below the peak reserved so far a granule a block needs is mapped new, and a cached one stays
 * where it is for a later block, rather than moving there and being mapped again later (after a
 * trim the pool regrows to its peak, as after a plan's switch); at the peak it moves. */
static void test_below_the_peak_cached_granules_stay(void) {
  fixture f;
  setup(&f);
  void *p, *px, *py, *pw, *pv, *pu;
  st_arena_block *b, *x, *y, *w, *v, *u;
  CHECK_OK(st_arena_alloc(f.arena, 4 * G, 0, &p, &b)); /* the peak: four granules */
  st_arena_free(f.arena, b, 0);
  CHECK(st_arena_trim(f.arena) == 4 * G && f.budget.reserved == 0 && f.budget.peak_reserved == 4 * G);
  uint64_t maps = f.budget.backend_allocs;
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &px, &x)); /* granule 0 */
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &py, &y)); /* granule 1 */
  st_arena_free(f.arena, x, 0);                     /* granule 0 cached */
  CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pw, &w)); /* granules 2, 3: two new ones */
  CHECK(pw == (uint8_t*)py + G && f.budget.reserved == 4 * G && f.budget.backend_allocs - maps == 4);
  CHECK_OK(st_arena_alloc(f.arena, G, 0, &pv, &v)); /* granule 0, still mapped: nothing to map */
  CHECK(pv == px && f.budget.backend_allocs - maps == 4 && f.budget.reserved == 4 * G);
  st_arena_free(f.arena, v, 0);                     /* granule 0 cached again */
  /* granules 4, 5: at the peak, so granule 4 takes cached granule 0's place, and 5 is new */
  CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pu, &u));
  CHECK(pu == (uint8_t*)pw + 2 * G && f.budget.reserved == 5 * G && f.budget.peak_reserved == 5 * G);
  CHECK(f.budget.backend_allocs - maps == 6 && st_arena_idle_bytes(f.arena) == 0);
  st_arena_free(f.arena, y, 0);
  st_arena_free(f.arena, w, 0);
  st_arena_free(f.arena, u, 0);
  teardown(&f);
}

/* Granules 0 and 3 idle (0 freed first), then a block growing the top over idle granule 5 needs
 * granule 6 at the peak: one idle granule moves there, and the other, `kept`, is still mapped
 * when a block comes for it. With `wanted`, granule 3 is marked as the layout's (st_arena_want). */
static void one_granule_moves(bool wanted, size_t kept) {
  fixture f;
  setup(&f);
  st_arena_index_addresses(f.arena);
  void* p[6];
  st_arena_block* b[6];
  for (int i = 0; i < 6; i++) CHECK_OK(st_arena_alloc(f.arena, G, 0, &p[i], &b[i]));
  st_arena_free(f.arena, b[0], 0);
  st_arena_free(f.arena, b[3], 0);
  st_arena_free(f.arena, b[5], 0);
  const uint64_t at[] = {3 * G}, size[] = {G};
  if (wanted) st_arena_want(f.arena, at, size, 1);
  uint64_t maps = f.budget.backend_allocs;
  void *pw, *pv;
  st_arena_block *w, *v;
  CHECK_OK(st_arena_alloc(f.arena, 2 * G, 0, &pw, &w)); /* granules 5, 6 */
  CHECK(pw == p[5] && f.budget.backend_allocs - maps == 1 && f.budget.reserved == 6 * G);
  CHECK(st_arena_alloc_at(f.arena, kept * G, G, 0, &pv, &v)); /* still mapped */
  CHECK(pv == p[kept] && f.budget.backend_allocs - maps == 1 && f.budget.reserved == 6 * G);
  st_arena_want(f.arena, NULL, NULL, 0);
  st_arena_free(f.arena, v, 0);
  st_arena_free(f.arena, w, 0);
  for (int i = 1; i < 5; i++)
    if (i != 3) st_arena_free(f.arena, b[i], 0);
  teardown(&f);
}

/* At the peak the highest idle granule is the one moved: best fit comes back last to the top of
 * the range. Granule 3 moves to 6, and granule 0 stays mapped for the next block. */
static void test_the_highest_idle_granule_moves_first(void) { one_granule_moves(false, 0); }

/* With the layout the step follows marked, an idle granule it does not want moves before a
 * higher one it does: granule 0 moves to 6, and granule 3 is still mapped when the layout's
 * block comes for it. */
static void test_a_granule_the_layout_wants_stays(void) { one_granule_moves(true, 3); }

/* At the peak a cached granule no queued work touches is found behind busy ones and behind an
 * entry taken again since it was listed (dropping such an entry mid-scan reshaped the heap and
 * hid the one it moved), so the peak does not grow. */
static void test_a_stale_entry_hides_no_cached_granule(void) {
  fixture f;
  uint8_t* r;
  st_arena_block* region;
  setup_lagging(&f, &r, &region);
  for (int i = 0; i <= 10; i++) CHECK_OK(st_arena_region_ref(f.arena, r + i * G, G, 7));
  int busy[] = {10, 5, 9, 1, 2};
  for (int k = 0; k < 5; k++) CHECK(st_arena_region_free(f.arena, r + busy[k] * G, G, 7)); /* work queued */
  st_arena_region_unref(f.arena, r + 8 * G, G); /* no queued work: the one to move */
  CHECK_OK(st_arena_region_ref(f.arena, r + 1 * G, G, 7)); /* granule 1's entry goes stale */
  uint64_t waits = st_virtual_waits(f.backend);
  CHECK_OK(st_arena_region_ref(f.arena, r + 11 * G, G, ST_ARENA_ANY_STREAM)); /* at the peak */
  CHECK(f.budget.reserved == 11 * G && f.budget.peak_reserved == 11 * G); /* granule 8 moved */
  CHECK(st_arena_idle_bytes(f.arena) == 4 * G && st_virtual_waits(f.backend) == waits); /* the busy four */
  teardown(&f); /* destroying the arena unmaps what is still counted */
}

/* A memory limit under the peak counts as the peak: a granule needed moves an idle one that no
 * queued work touches, rather than unmapping, with a wait, one that queued work still uses. */
static void test_a_limit_under_the_peak_moves_an_unused_granule(void) {
  fixture f;
  uint8_t* r;
  st_arena_block* region;
  setup_lagging(&f, &r, &region);
  for (int i = 0; i < 6; i++) CHECK_OK(st_arena_region_ref(f.arena, r + i * G, G, 7));
  st_arena_region_unref(f.arena, r + 4 * G, G);
  st_arena_region_unref(f.arena, r + 5 * G, G);
  CHECK(st_arena_trim(f.arena) == 2 * G && f.budget.peak_reserved == 6 * G); /* reserved 4 */
  CHECK(st_arena_region_free(f.arena, r + 3 * G, G, 7)); /* granule 3 idle, its work queued */
  st_arena_region_unref(f.arena, r + 1 * G, G);          /* granule 1 idle, no queued work */
  f.budget.limit = 4 * G;
  uint64_t waits = st_virtual_waits(f.backend);
  CHECK_OK(st_arena_region_ref(f.arena, r + 8 * G, G, ST_ARENA_ANY_STREAM));
  CHECK(f.budget.reserved == 4 * G && st_virtual_waits(f.backend) == waits);
  CHECK(st_arena_idle_bytes(f.arena) == G); /* granule 3, still mapped */
  teardown(&f); /* destroying the arena unmaps what is still counted */
}

/* Where the free blocks are kept by address (the layout hints' index), a request of at most a
 * quarter of a granule and under 1/1024 of the range used so far takes the lowest free block
 * that fits; others, and every request without the index, the smallest (best fit). */
static void test_small_requests_go_low(void) {
  fixture f;
  setup(&f);
  uint64_t hole[3] = {64 * 1024, 16 * 1024, 200 * 1024};
  void *p[7], *q;
  st_arena_block *b[7], *c;
  for (int i = 0; i < 3; i++) {
    CHECK_OK(st_arena_alloc(f.arena, hole[i], 0, &p[2 * i], &b[2 * i]));
    CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &p[2 * i + 1], &b[2 * i + 1])); /* keeps them apart */
  }
  for (int i = 0; i < 3; i++) st_arena_free(f.arena, b[2 * i], 0);
  void* big;
  st_arena_block* bb;
  CHECK_OK(st_arena_alloc(f.arena, 1024 * MiB, 0, &big, &bb)); /* the range passes 1 GiB */
  CHECK_OK(st_arena_alloc(f.arena, 10 * 1024, 0, &q, &c)); /* no index: best fit, 16 KiB */
  CHECK(q == p[2]);
  st_arena_free(f.arena, c, 0);
  st_arena_index_addresses(f.arena);
  CHECK_OK(st_arena_alloc(f.arena, 10 * 1024, 0, &q, &c)); /* now the lowest: 64 KiB */
  CHECK(q == p[0]);
  st_arena_free(f.arena, c, 0);
  CHECK_OK(st_arena_alloc(f.arena, 100 * 1024, 0, &q, &c)); /* the lowest that fits: 200 KiB */
  CHECK(q == p[4]);
  st_arena_free(f.arena, c, 0);
  /* above the big block: a hole of half a granule, then one just over a quarter */
  void *x, *y, *sep[2], *q2;
  st_arena_block *xb, *yb, *sepb[2], *qb;
  CHECK_OK(st_arena_alloc(f.arena, G / 2, 0, &x, &xb));
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &sep[0], &sepb[0]));
  CHECK_OK(st_arena_alloc(f.arena, G / 4 + 64 * 1024, 0, &y, &yb));
  CHECK_OK(st_arena_alloc(f.arena, MiB, 0, &sep[1], &sepb[1]));
  CHECK((uint8_t*)x < (uint8_t*)y);
  st_arena_free(f.arena, xb, 0);
  st_arena_free(f.arena, yb, 0);
  CHECK_OK(st_arena_alloc(f.arena, G / 4, 0, &q2, &qb)); /* a quarter granule is small: the lower */
  CHECK(q2 == x);
  st_arena_free(f.arena, qb, 0);
  CHECK_OK(st_arena_alloc(f.arena, G / 4 + 4096, 0, &q2, &qb)); /* just over it: best fit */
  CHECK(q2 == y);
  st_arena_free(f.arena, qb, 0);
  for (int i = 0; i < 2; i++) st_arena_free(f.arena, sepb[i], 0);
  st_arena_free(f.arena, bb, 0);
  for (int i = 0; i < 3; i++) st_arena_free(f.arena, b[2 * i + 1], 0);
  teardown(&f);
}

/* A long random run of small and large requests: each small one lands in the lowest free block
 * that fits (the free blocks found from the live ones), so the treap by start and the largest
 * size each subtree keeps stay right through every split, merge and growth of the top. */
static void test_lowest_fit_matches_a_scan(void) {
  fixture f;
  setup(&f);
  st_arena_index_addresses(f.arena);
  enum { SLOTS = 300, STEPS = 20000 };
  void* p[SLOTS] = {0};
  st_arena_block* b[SLOTS] = {0};
  CHECK_OK(st_arena_alloc(f.arena, 1024 * MiB, 0, &p[0], &b[0])); /* a range of 1 GiB on: every */
                                                                   /* request up to G/4 is small */
  uint64_t starts[SLOTS], sizes[SLOTS], tags[SLOTS];
  uint32_t rng = 12345;
  for (int step = 0; step < STEPS; step++) {
    rng = rng * 1664525u + 1013904223u;
    int i = 1 + (int)((rng >> 8) % (SLOTS - 1));
    if (b[i]) {
      st_arena_free(f.arena, b[i], 0);
      b[i] = NULL;
      continue;
    }
    rng = rng * 1664525u + 1013904223u;
    bool small = (rng >> 31) != 0;
    uint64_t size = small ? 512 + (rng >> 8) % (G / 4 - 1024) : G / 4 + 512 + (rng >> 8) % (6 * MiB);
    if (!small && (rng & 0x300) == 0) size = G * (1 + (rng >> 10) % 3); /* on a boundary: split twice */
    uint64_t need = (size + 511) & ~511ull;
    /* the lowest free block of at least need bytes, from the gaps between live blocks */
    size_t n = st_arena_taken(f.arena, starts, sizes, tags, SLOTS);
    for (size_t x = 1; x < n; x++) /* by start */
      for (size_t y = x; y > 0 && starts[y - 1] > starts[y]; y--) {
        uint64_t t = starts[y]; starts[y] = starts[y - 1]; starts[y - 1] = t;
        t = sizes[y]; sizes[y] = sizes[y - 1]; sizes[y - 1] = t;
      }
    uint64_t want = UINT64_MAX, want_end = 0, from = 0;
    for (size_t x = 0; x < n && want == UINT64_MAX; x++) {
      if (starts[x] - from >= need) {
        want = from;
        want_end = starts[x];
      }
      from = starts[x] + sizes[x];
    }
    CHECK_OK(st_arena_alloc(f.arena, size, 0, &p[i], &b[i]));
    uint64_t got = st_arena_offset(f.arena, p[i]);
    /* in that free block: at its start, or against its end where that shares a granule */
    if (small && want != UINT64_MAX) CHECK(got >= want && got + need <= want_end);
    if (small && want == UINT64_MAX) CHECK(got >= from); /* nothing fits below: the top */
  }
  for (int i = 0; i < SLOTS; i++)
    if (b[i]) st_arena_free(f.arena, b[i], 0);
  teardown(&f);
}

/* A plan made with sizes tolerated (each entry the largest size its position reached) whose
 * step begins with a request larger than any its position had, here the input batch, which
 * lives across the boundary and so is dynamic: a new shape, so the rest of the step goes to the
 * growable pool. Taking the next slots would leave each block alone in a granule of the plan's
 * region while the blocks planned beside it, now larger, go elsewhere. */
static void test_a_grown_input_leaves_a_tolerant_plan(void) {
  fixture f;
  setup(&f);
  st_plan_entry iter[3] = {{64 * 1024, PLAN_NO_OFFSET, PLAN_CLASS_DYNAMIC, 0},
                           {64 * 1024, 4 * MiB, PLAN_CLASS_PERIODIC, UINT32_MAX},
                           {4 * MiB, 8 * MiB, PLAN_CLASS_PERIODIC, UINT32_MAX}};
  st_reuse_window win = {0, 3, 0, 1};
  st_reuse_range range = {0, 4 * MiB};
  stalloc_plan p = {.pool_size = 12 * MiB, .alignment = 512, .iteration = iter, .iteration_count = 3,
                    .windows = &win, .window_count = 1, .ranges = &range, .range_count = 1,
                    .uses_step_markers = 1, .sizes_tolerated = 1};
  seal_plan(&p);
  st_runtime* rt;
  CHECK_OK(st_runtime_create(f.ops, f.backend, &f.caps, &f.budget, f.arena, 512, &p, 0, true, NULL, &rt));
  static const uint64_t input[3] = {48 * 1024, 128 * 1024, 64 * 1024}; /* smaller, grown, as planned */
  static const st_rt_outcome second[3] = {RT_HIT, RT_FALLBACK, RT_HIT};
  for (int step = 0; step < 3; step++) {
    void* ptr[3] = {0};
    st_range_node* node[3] = {0};
    st_rt_outcome out;
    CHECK_OK(st_runtime_alloc(rt, input[step], 0, &out, &ptr[0], &node[0]));
    CHECK(out == RT_DYNAMIC);
    CHECK_OK(st_runtime_alloc(rt, 64 * 1024, 0, &out, &ptr[1], &node[1]));
    CHECK(out == second[step]);
    CHECK_OK(st_runtime_alloc(rt, 4 * MiB, 0, &out, &ptr[2], &node[2]));
    CHECK(out == second[step]);
    for (int i = 0; i < 3; i++)
      if (node[i]) st_runtime_free(rt, node[i], 0);
    st_runtime_step(rt);
  }
  st_runtime_destroy(rt);
  teardown(&f);
}

int main(void) {
  RUN(test_granules_follow_live_blocks);
  RUN(test_region_maps_what_its_blocks_touch);
  RUN(test_runtime_in_a_region);
  RUN(test_plans_of_two_kinds_share_a_region);
  RUN(test_a_grown_input_leaves_a_tolerant_plan);
  RUN(test_pool_past_the_range);
  RUN(test_slab_chunks_share_granules);
  RUN(test_cached_list_stays_bounded);
  RUN(test_alloc_at_takes_only_free_bytes);
  RUN(test_region_free_on_a_lagging_device);
  RUN(test_whole_granules_go_on_a_boundary);
  RUN(test_a_block_goes_against_the_block_above);
  RUN(test_top_growth_on_a_boundary);
  RUN(test_fit_candidates_prefer_mapped_granules);
  RUN(test_looking_further_finds_mapped_granules);
  RUN(test_at_ends_a_block_takes_the_mapped_end);
  RUN(test_below_the_peak_cached_granules_stay);
  RUN(test_the_highest_idle_granule_moves_first);
  RUN(test_a_granule_the_layout_wants_stays);
  RUN(test_a_stale_entry_hides_no_cached_granule);
  RUN(test_a_limit_under_the_peak_moves_an_unused_granule);
  RUN(test_small_requests_go_low);
  RUN(test_lowest_fit_matches_a_scan);
  return 0;
}
