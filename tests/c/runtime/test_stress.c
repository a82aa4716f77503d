/* test_stress.c - 8 threads on 2 streams, 1M alloc/free events in total (STALLOC_STRESS_EVENTS
 * changes that), against an allocator serving a plan: planned sizes in planned order from one
 * thread, the same sizes shuffled and tiny and odd ones from the others, frees from other
 * threads and on other streams. Checked: no two live blocks ever overlap (a checker of its own,
 * which learns a block after its alloc returns and forgets it before its free is called, so it
 * never holds more than is live), every block's words survive until its free, and nothing is
 * lost (counts and bytes back to zero).
 * Under ThreadSanitizer: cmake -S . -B build-tsan -DSTALLOC_SANITIZE=thread && ... && ctest. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "hand_plan.h"
#include "plan/plan.h"

#define THREADS 8
#define SLOTS 48
#define M 40

static stalloc_allocator_t* shared;
static long events_per_thread;

/* ---- the independent overlap checker ---- */

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t live_start[THREADS * SLOTS + 64], live_end[THREADS * SLOTS + 64];
static size_t live_count;

static void learn(void* p, size_t size) {
  uintptr_t a = (uintptr_t)p, b = a + size;
  pthread_mutex_lock(&check_lock);
  size_t lo = 0, hi = live_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (live_start[mid] < a) lo = mid + 1;
    else hi = mid;
  }
  CHECK(lo == 0 || live_end[lo - 1] <= a);
  CHECK(lo == live_count || live_start[lo] >= b);
  memmove(&live_start[lo + 1], &live_start[lo], (live_count - lo) * sizeof live_start[0]);
  memmove(&live_end[lo + 1], &live_end[lo], (live_count - lo) * sizeof live_end[0]);
  live_start[lo] = a;
  live_end[lo] = b;
  live_count++;
  pthread_mutex_unlock(&check_lock);
}

static void forget(void* p) {
  pthread_mutex_lock(&check_lock);
  size_t i = 0;
  while (i < live_count && live_start[i] != (uintptr_t)p) i++;
  CHECK(i < live_count);
  memmove(&live_start[i], &live_start[i + 1], (live_count - i - 1) * sizeof live_start[0]);
  memmove(&live_end[i], &live_end[i + 1], (live_count - i - 1) * sizeof live_end[0]);
  live_count--;
  pthread_mutex_unlock(&check_lock);
}

/* ---- blocks: words at the start, the end and every 4 KiB hold the owner's tag ---- */

typedef struct block {
  void* p;
  size_t size;
  uint64_t tag;
} block;

static void stamp(const block* b) {
  for (size_t at = 0; at + 8 <= b->size; at += 4096) memcpy((char*)b->p + at, &b->tag, 8);
  if (b->size >= 8) memcpy((char*)b->p + b->size - 8, &b->tag, 8);
  else memset(b->p, (int)(b->tag & 0xFF), b->size);
}

static void verify(const block* b) {
  uint64_t w;
  for (size_t at = 0; at + 8 <= b->size; at += 4096) {
    memcpy(&w, (char*)b->p + at, 8);
    CHECK(w == b->tag);
  }
  if (b->size >= 8) {
    memcpy(&w, (char*)b->p + b->size - 8, 8);
    CHECK(w == b->tag);
  } else {
    CHECK(((unsigned char*)b->p)[b->size - 1] == (unsigned char)(b->tag & 0xFF));
  }
}

static uint64_t size_at(int i) { return i % 4 == 0 ? 16 + (uint64_t)i : 4096 * (1 + (uint64_t)(i * 13) % 9); }

/* Blocks handed to the next thread to free (cross-thread frees). */
static _Atomic(block*) mailbox[THREADS];

static void release(block* b, uint64_t stream) {
  verify(b);
  forget(b->p);
  CHECK_OK(stalloc_allocator_free_sized(shared, b->p, b->size, 0, stream));
  b->p = NULL;
}

static void* worker(void* arg) {
  int me = (int)(intptr_t)arg;
  uint64_t stream = (uint64_t)(me % 2);
  uint32_t rng = 0x1234567u * (uint32_t)(me + 1);
  block mine[SLOTS] = {{0}};
  long events = 0;
  int pos = 0;
  uint64_t serial = 0;
  while (events < events_per_thread) {
    rng = rng * 1664525u + 1013904223u;
    int slot = (int)((rng >> 8) % SLOTS);
    block* b = &mine[slot];
    if (b->p) {
      /* Sometimes a free on the other stream, sometimes by the next thread. */
      block* handoff = NULL;
      if ((rng >> 20) % 8 == 0) {
        handoff = malloc(sizeof *handoff);
        CHECK(handoff);
        *handoff = *b;
        block* old = atomic_exchange(&mailbox[(me + 1) % THREADS], handoff);
        if (old) {
          release(old, stream ^ 1);
          free(old);
          events++;
        }
        b->p = NULL;
      } else {
        release(b, (rng >> 16) % 5 == 0 ? stream ^ 1 : stream);
        events++;
      }
    } else {
      /* Thread 0 follows the plan's order; the others draw sizes, some tiny, some odd. */
      size_t size = me == 0 ? size_at(pos++ % M) : (size_t)size_at((int)((rng >> 12) % M)) + ((rng >> 4) % 3 == 0 ? 24 : 0);
      CHECK_OK(stalloc_allocator_alloc(shared, size, 0, stream, &b->p));
      b->size = size;
      b->tag = ((uint64_t)me << 56) | ++serial;
      learn(b->p, size);
      stamp(b);
      events++;
    }
    block* in = atomic_exchange(&mailbox[me], NULL);
    if (in) {
      release(in, stream);
      free(in);
      events++;
    }
  }
  for (int i = 0; i < SLOTS; i++)
    if (mine[i].p) release(&mine[i], stream);
  return NULL;
}

int main(void) {
  const char* env = getenv("STALLOC_STRESS_EVENTS");
  long total = env ? atol(env) : 1000000;
  if (total < THREADS) total = THREADS;
  events_per_thread = total / THREADS;

  stalloc_options_t o;
  stalloc_options_init(&o);
  o.backend = STALLOC_BACKEND_HOST;
  CHECK_OK(stalloc_allocator_create(&o, &shared));
  st_plan_entry iter[M];
  uint64_t off = 0;
  for (int i = 0; i < M; i++) {
    uint64_t s = size_at(i);
    iter[i] = s <= 512 ? (st_plan_entry){s, PLAN_NO_OFFSET, PLAN_CLASS_TINY, UINT32_MAX}
                       : (st_plan_entry){s, off, PLAN_CLASS_PERIODIC, UINT32_MAX};
    if (s > 512) off += s;
  }
  stalloc_plan plan = {.pool_size = off, .alignment = 512, .iteration = iter, .iteration_count = M};
  seal_plan(&plan);
  CHECK_OK(stalloc_allocator_load_plan(shared, &plan));

  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++) {
    block* in = atomic_exchange(&mailbox[i], NULL);
    if (in) {
      release(in, 0);
      free(in);
    }
  }
  stalloc_stats_t s;
  stalloc_stats_init(&s);
  CHECK_OK(stalloc_allocator_stats(shared, &s));
  CHECK(live_count == 0);
  CHECK(s.active_blocks == 0 && s.allocated_bytes == 0 && s.alloc_count == s.free_count);
  CHECK(s.plan_hits > 0 && s.fallback_allocs > 0);
  fprintf(stderr, "%llu allocs: %llu plan hits, %llu misses, %llu resyncs, %llu fallback\n",
          (unsigned long long)s.alloc_count, (unsigned long long)s.plan_hits,
          (unsigned long long)s.plan_misses, (unsigned long long)s.resyncs,
          (unsigned long long)s.fallback_allocs);
  CHECK_OK(stalloc_allocator_destroy(shared));
  return 0;
}
