/* allocator.h - the allocator handle: its pools, pointer table, statistics and recorder. Read by
 * allocator.c (entry points), record.c, and the stages that drive an allocator (sim, interop). */
#ifndef STALLOC_ALLOCATOR_H
#define STALLOC_ALLOCATOR_H

#include <pthread.h>

#include "runtime/deferred.h"
#include "runtime/fallback.h"
#include "runtime/runtime.h"
#include "runtime/slab.h"
#include "base/u64map.h"

/* Where a live block came from. */
typedef enum block_origin {
  ORIGIN_FALLBACK = 1, /* handle: st_block* of the fallback pool */
  ORIGIN_PLAN = 2,     /* handle: st_range_node* of the runtime's pool (planned or dynamic) */
  ORIGIN_SLAB = 3      /* handle: st_slot* */
} block_origin;

/* One live allocation. */
typedef struct live_block {
  void* ptr;
  uint64_t size;      /* requested bytes */
  uint64_t id;        /* request id, for traces */
  uint64_t stream;
  uint32_t recording; /* the recording it was allocated in; 0 = none */
  int16_t device;
  uint8_t origin;     /* block_origin */
  void* handle;       /* the pool's own record, by origin */
  uint64_t* used_on;  /* other streams the block is used on (record_stream); NULL if none */
  uint32_t used_on_count, used_on_cap;
  struct live_block* next_spare;
} live_block;

#define FREED_RING 4096 /* recent frees remembered to tell a double free from a stray pointer */

struct stalloc_allocator {
  pthread_mutex_t lock;
  stalloc_options_t options;
  const backend_ops* ops;
  void* backend;
  backend_caps caps;
  st_budget budget;
  st_fallback* fallback;
  st_runtime* runtime;      /* non-NULL in plan mode */
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
};

#endif
