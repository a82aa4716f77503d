/* allocator.h - the allocator handle: its pools, pointer table, statistics and recorder. Read by
 * allocator.c (entry points), record.c, and the stages that drive an allocator (sim, interop). */
#ifndef STALLOC_ALLOCATOR_H
#define STALLOC_ALLOCATOR_H

#include <pthread.h>

#include "runtime/arena.h"
#include "runtime/deferred.h"
#include "runtime/fallback.h"
#include "runtime/hints.h"
#include "runtime/online.h"
#include "runtime/runtime.h"
#include "runtime/slab.h"
#include "base/u64map.h"

/* Where a live block came from. */
typedef enum block_origin {
  ORIGIN_FALLBACK = 1, /* handle: st_block* of the fallback pool */
  ORIGIN_PLAN = 2,     /* handle: st_range_node* of the runtime's pool (planned or dynamic) */
  ORIGIN_SLAB = 3,     /* handle: st_slot* */
  ORIGIN_ARENA = 4     /* handle: st_arena_block* of the growable pool */
} block_origin;

/* One live allocation. */
typedef struct live_block {
  void* ptr;
  uint64_t size;      /* requested bytes */
  uint64_t id;        /* request id, for traces */
  uint64_t stream;
  uint32_t recording; /* the recording it was allocated in; 0 = none */
  uint32_t online_recording; /* the online lifecycle's recording it was allocated in; 0 = none */
  int16_t device;
  uint8_t origin;     /* block_origin */
  void* handle;       /* the pool's own record, by origin */
  uint64_t* used_on;  /* other streams the block is used on (record_stream); NULL if none */
  uint32_t used_on_count, used_on_cap;
  struct live_block* next_spare;
} live_block;

#define KIND_PROBE 16   /* first requests of a step that may still tell its kind apart */
#define FREED_RING 4096 /* recent frees remembered to tell a double free from a stray pointer */

struct stalloc_allocator {
  pthread_mutex_t lock;
  stalloc_options_t options;
  const backend_ops* ops;
  void* backend;
  backend_caps caps;
  st_budget budget;
  st_fallback* fallback;
  st_arena* arena;          /* non-NULL: serves what the fallback pool would (growable backends) */
  st_runtime* runtime;      /* the plan serving now (one of kinds[]), NULL: none */
  st_slab* slab;            /* tiny requests in plan mode */
  uint64_t allocs_seen;     /* every alloc call since creation: the run's position */

  u64map live;              /* ptr -> live_block* */
  live_block* spare_records;
  uintptr_t freed[FREED_RING];
  size_t freed_next;

  st_deferred_list deferred; /* frees waiting for the streams of record_stream */

  stalloc_stats_t stats;    /* the allocated/count/plan fields; reserved comes from budget */
  uint64_t next_id;

  stalloc_trace_writer_t* recorder; /* non-NULL while recording */
  uint32_t recording;               /* number of the current or last recording */

  st_online* online;                /* non-NULL once the online lifecycle started */
  st_hints* hints;                  /* layout hints for the growable pool (online, with one) */
  st_runtime** retired;             /* replaced plans' pools that still hold live blocks */
  size_t retired_count, retired_cap;
  st_runtime_counters past;         /* counters of the plans replaced so far */
  uint64_t step_hit_bytes, step_miss_bytes; /* hit and missed bytes at the last marker */
  uint64_t step_allocs_at;          /* allocs_seen at the last marker */
  uint64_t step_first_id;           /* next_id at the last marker */
  uint64_t step_arena_maps;         /* st_arena_maps at the last marker */
  uint64_t peak_at_marker;          /* budget.peak_reserved at the last marker */
  uint32_t peak_held_steps;         /* markers since the peak reserved last grew */
  bool churning;                    /* the pool places at the ends of free blocks for its moves */
  uint64_t want_version;            /* the hints' layout the arena was last told of (0: none) */
  st_runtime* kinds[ST_ONLINE_KINDS]; /* one plan per kind of step (a loaded plan: kinds[0]) */
  uint64_t probe[KIND_PROBE];       /* the first request sizes of the step under way, while */
  uint32_t probe_count;             /* several kinds have plans and it is not yet told apart */
  bool probing;
  bool hints_follow, hints_tried;   /* the step under way outgrew its plan and the hints record
                                       it (st_hints_follow); that was tried this step */
  /* The last step so recorded: its requests before it outgrew the plan (follow_count of them,
   * ids from follow_first_id) are positions 0.. of hints step follow_step, told to the hints at
   * their frees by id. A field in live_block would do it too, but a larger record slowed every
   * planned hit (about 40 -> 45 ns a pair, bench_hot_path). */
  uint64_t follow_first_id, follow_count;
  uint32_t follow_step;
};

/* The counters of every plan served so far, every kind's and the replaced ones'. Lock held. */
st_runtime_counters st_allocator_plan_counters(const stalloc_allocator_t* a);

#endif
