/* backend.h - the contract every memory backend fulfils (host, virtual, cuda).
 *
 * A backend hands out large, aligned regions ("segments"); the pools above it cut them up.
 * Every op returns a status and leaves its out-parameters untouched on failure. Ops marked
 * optional may be NULL. A backend is one file exporting one const backend_ops table. */
#ifndef STALLOC_BACKEND_H
#define STALLOC_BACKEND_H

#include "base/internal.h"

typedef struct backend_caps {
  uint64_t granularity;    /* segments are multiples of this (a page, a CUDA granule) */
  bool device_accessible;  /* memory is on a device, not readable by the host */
  bool host_accessible;    /* the host may read and write the bytes */
  bool can_grow;           /* reserve/map/unmap are provided */
  uint64_t map_granularity;/* map/unmap work in multiples of this; 0 = granularity */
} backend_caps;

typedef struct backend_ops {
  const char* name;
  /* Creates the backend's state for these options. Fails with STALLOC_ERR_NO_DEVICE where
   * the device or its driver is missing. */
  stalloc_status_t (*create)(const stalloc_options_t* options, void** state, backend_caps* caps);
  void (*destroy)(void* state);
  /* A segment of at least size bytes (a multiple of caps.granularity), aligned to alignment. */
  stalloc_status_t (*alloc)(void* state, uint64_t size, uint64_t alignment, uint64_t stream,
                            void** ptr);
  /* Gives back a segment alloc returned, with its size. */
  stalloc_status_t (*free)(void* state, void* ptr, uint64_t size);

  /* Optional growable ranges: reserve address space, then back parts of it with memory. */
  stalloc_status_t (*reserve)(void* state, uint64_t size, void** base);
  stalloc_status_t (*release)(void* state, void* base, uint64_t size);
  stalloc_status_t (*map)(void* state, void* at, uint64_t size);
  stalloc_status_t (*unmap)(void* state, void* at, uint64_t size);
  /* Optional: unmap for a range the caller knows no queued work uses, so it need not wait for
   * the device (unmap does); NULL: unmap serves. */
  stalloc_status_t (*unmap_unused)(void* state, void* at, uint64_t size);
  /* Optional: maps the memory mapped at [from, from + size) at [to, to + size) instead (to
   * unmapped), with no allocation, under unmap_unused's condition for `from`. On failure
   * nothing is mapped at either. NULL: unmap and map serve. */
  stalloc_status_t (*move)(void* state, void* from, void* to, uint64_t size);
  /* Optional: maps the memory mapped at [from, from + size) at [to, to + size) too (to
   * unmapped), with no allocation; `from` stays mapped until unmapped (unmap_unused once its
   * queued work is done), and the memory is held once. On failure nothing changes. */
  stalloc_status_t (*alias)(void* state, void* from, void* to, uint64_t size);
  /* Optional pair: from access_begin to access_end, map, move and alias may leave granting the
   * device's access to what they map until access_end, which grants contiguous runs in one
   * call each (CUDA: one cuMemSetAccess per run, not per granule). If access_end fails,
   * some of those mappings may be inaccessible: the caller unmaps them all. */
  void (*access_begin)(void* state);
  stalloc_status_t (*access_end)(void* state);

  /* Optional stream ordering. event_record notes the point in `stream`'s work reached now;
   * event_done says whether the work before that point has finished. NULL ops mean work is
   * synchronous (host, virtual): every recorded point is already done. */
  stalloc_status_t (*event_record)(void* state, uint64_t stream, void** event);
  bool (*event_done)(void* state, void* event);
  void (*event_destroy)(void* state, void* event);
  /* Optional: blocks until the event's work is done (NULL: callers poll event_done). */
  void (*event_wait)(void* state, void* event);

  /* Optional: one allocator call (alloc or free) happened; the lagged virtual backend's clock. */
  void (*tick)(void* state);

  /* Optional: the memory the device has in all (a GPU's total, the host's RAM, the virtual
   * range); what a memory fraction is a fraction of. */
  stalloc_status_t (*total_memory)(void* state, uint64_t* total);
} backend_ops;

/* backend.c: the table for a kind; NULL for a kind not built in. */
const backend_ops* st_backend_get(stalloc_backend_kind_t kind);

extern const backend_ops st_backend_host;
extern const backend_ops st_backend_virtual;
extern const backend_ops st_backend_cuda;

#endif
