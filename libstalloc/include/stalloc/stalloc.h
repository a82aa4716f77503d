/* stalloc.h - the stable C API of libstalloc, a spatio-temporal GPU memory allocator.
 *
 * Sections: prologue (preprocessor logic, hidden from cffi) - version - status codes -
 * backends and options - allocator lifecycle - alloc and free - statistics - steps and record
 * mode - trace - placement - plan - runtime (plan mode and replay) - baseline simulators -
 * DLPack - PyTorch plug - epilogue.
 *
 * Status. A function that can fail returns a stalloc_status_t (STALLOC_OK == 0) and gives its
 * results through out-parameters; on failure it sets a thread-local detail message readable
 * with stalloc_last_error(). The others return no status:
 *   - the *_init functions fill a struct's defaults; stalloc_trace_destroy and
 *     stalloc_plan_destroy free a handle (all of them: NULL is a no-op);
 *   - stalloc_version, stalloc_version_string, stalloc_status_string, stalloc_backend_name and
 *     stalloc_last_error return a number or a string, stalloc_set_error_callback nothing;
 *   - the PyTorch plug's stalloc_torch_malloc and stalloc_torch_free have PyTorch's signatures,
 *     so they report a failure through stalloc_torch_last_error() (and torch_malloc's NULL);
 *     stalloc_torch_failed_frees counts those of torch_free.
 *
 * Versioned structs. Every struct that may grow in a later version starts with
 * `size_t struct_size` and has an *_init function that sets it to sizeof the struct as the
 * caller's header declares it, and fills the defaults. The library takes any struct_size from
 * sizeof(size_t) up, so a caller built against an older or a newer header keeps working:
 *   - a struct the library reads (options, params) is read only as far as struct_size reaches;
 *     the fields past it take their defaults, and fields the library does not know are ignored;
 *   - a struct the library fills (stats, info, results) is written only as far as struct_size
 *     reaches, never past it, and its struct_size is left as the caller set it;
 *   - a struct_size below sizeof(size_t) (never set) is STALLOC_ERR_INVALID_ARGUMENT, and then
 *     nothing is written.
 *
 * Between the prologue and the epilogue the header holds only declarations and explicit-valued
 * enums, so cffi's cdef can read the preprocessed copy (cc -E -P -DSTALLOC_CDEF).
 */
#ifndef STALLOC_H
#define STALLOC_H

/* ---------------------------------------------------------------------------------------
 * Prologue
 * ------------------------------------------------------------------------------------- */
#ifndef STALLOC_CDEF
#include <stddef.h>
#include <stdint.h>
#if defined(STALLOC_BUILDING) && defined(__GNUC__)
#define STALLOC_API __attribute__((visibility("default")))
#else
#define STALLOC_API
#endif
#ifdef __cplusplus
extern "C" {
#endif
#else
#define STALLOC_API
#endif

/* ---------------------------------------------------------------------------------------
 * Version: the one place the number lives (CMake and pyproject.toml read these lines).
 * ------------------------------------------------------------------------------------- */
#define STALLOC_VERSION_MAJOR 0
#define STALLOC_VERSION_MINOR 1
#define STALLOC_VERSION_PATCH 0
/* major * 10000 + minor * 100 + patch, as returned by stalloc_version(). */
#define STALLOC_VERSION (STALLOC_VERSION_MAJOR * 10000 + STALLOC_VERSION_MINOR * 100 + STALLOC_VERSION_PATCH)

/* The version of the loaded library, to compare with the header's STALLOC_VERSION. */
STALLOC_API int stalloc_version(void);
/* The same as "MAJOR.MINOR.PATCH"; a static string. */
STALLOC_API const char* stalloc_version_string(void);

/* ---------------------------------------------------------------------------------------
 * Status codes
 * ------------------------------------------------------------------------------------- */
typedef enum stalloc_status {
  STALLOC_OK = 0,
  STALLOC_ERR_INVALID_ARGUMENT = 1, /* a NULL handle, a bad option, a size that overflows */
  STALLOC_ERR_OUT_OF_MEMORY = 2,    /* the backend or the memory limit refused */
  STALLOC_ERR_DOUBLE_FREE = 3,      /* the pointer was given out and already freed */
  STALLOC_ERR_UNKNOWN_POINTER = 4,  /* the pointer was never given out by this allocator */
  STALLOC_ERR_BAD_FORMAT = 5,       /* a file's content is not what its format says */
  STALLOC_ERR_TRUNCATED = 6,        /* a file ends before its end marker */
  STALLOC_ERR_VERSION = 7,          /* a file written by a newer format version */
  STALLOC_ERR_PLAN_MISMATCH = 8,    /* a plan made for another trace or model */
  STALLOC_ERR_NO_DEVICE = 9,        /* the backend's device or driver is not there */
  STALLOC_ERR_BACKEND = 10,         /* the backend (e.g. the CUDA driver) reported an error */
  STALLOC_ERR_TIMEOUT = 11,         /* a time limit ran out before a result was found */
  STALLOC_ERR_CANCELLED = 12,       /* cancelled by the caller */
  STALLOC_ERR_IO = 13,              /* a file could not be opened, read or written */
  STALLOC_ERR_UNSUPPORTED = 14,     /* the operation is not available in this build or mode */
  STALLOC_ERR_INTERNAL = 15         /* a broken invariant inside stalloc: please report it */
} stalloc_status_t;

/* A fixed message for a status code ("double free", ...); never NULL. */
STALLOC_API const char* stalloc_status_string(stalloc_status_t status);
/* The detail of the last failure on the calling thread ("trace.bin: chunk 3: checksum
 * mismatch"); "" when there was none. Valid until the thread's next stalloc call. */
STALLOC_API const char* stalloc_last_error(void);
/* Called on every failure, from the failing thread, before the call returns. NULL removes it. */
typedef void (*stalloc_error_fn)(stalloc_status_t status, const char* message, void* arg);
STALLOC_API void stalloc_set_error_callback(stalloc_error_fn fn, void* arg);

/* ---------------------------------------------------------------------------------------
 * Backends and options
 * ------------------------------------------------------------------------------------- */
typedef enum stalloc_backend_kind {
  STALLOC_BACKEND_HOST = 0,    /* aligned host memory: real bytes, for tests and CPU machines */
  STALLOC_BACKEND_VIRTUAL = 1, /* addresses from a reserved, never-touched range: replays big
                                  traces on small machines; the memory must not be accessed */
  STALLOC_BACKEND_CUDA = 2     /* device memory through the CUDA driver, loaded at run time */
} stalloc_backend_kind_t;

typedef struct stalloc_options {
  size_t struct_size;             /* sizeof(stalloc_options_t), set by stalloc_options_init */
  stalloc_backend_kind_t backend; /* default STALLOC_BACKEND_HOST */
  int32_t device;                 /* device ordinal for device backends; default 0 */
  uint64_t alignment;             /* every pointer is a multiple of this (tiny ones: see
                                     tiny_alignment); power of two; default 512 (as
                                     cudaMalloc's sub-allocations in PyTorch) */
  uint64_t memory_limit;          /* most bytes the allocator may reserve; 0 = no limit */
  uint64_t virtual_capacity;      /* address range the virtual backend reserves; default 1 TiB */
  const char* record_path;        /* non-NULL: start in record mode, writing a trace here */
  uint64_t tiny_alignment;        /* requests of at most 512 B, once a plan is loaded, sit in
                                     slots of their size rounded up to a power of two (>= this)
                                     and aligned to it, rather than in 512-B slots; power of two
                                     or 0 (= alignment); default 16 (docs/options.md) */
  int32_t growable_pool;          /* 1 (default): where the backend can map memory in place
                                     (CUDA virtual memory; host; virtual, which models CUDA's
                                     2 MiB granules), what no plan covers is served from one
                                     growable range whose unused granules go back before new
                                     ones are mapped; 0: PyTorch-style cached segments */
  int32_t virtual_lag;            /* virtual backend only: model an asynchronous device that
                                     runs this many allocator calls (allocs and frees) behind
                                     the host, so a free's queued work finishes that much later;
                                     0 (default): synchronous, as before (docs/online.md) */
} stalloc_options_t;

/* Fills the defaults, reading STALLOC_<NAME> environment overrides (see docs/options.md). */
STALLOC_API void stalloc_options_init(stalloc_options_t* options);
/* "host", "virtual", "cuda" -> kind; STALLOC_ERR_INVALID_ARGUMENT for another name. */
STALLOC_API stalloc_status_t stalloc_backend_parse(const char* name, stalloc_backend_kind_t* kind);
STALLOC_API const char* stalloc_backend_name(stalloc_backend_kind_t kind);

/* ---------------------------------------------------------------------------------------
 * Allocator lifecycle
 * ------------------------------------------------------------------------------------- */
typedef struct stalloc_allocator stalloc_allocator_t;

/* options may be NULL for the defaults. */
STALLOC_API stalloc_status_t stalloc_allocator_create(const stalloc_options_t* options,
                                                      stalloc_allocator_t** allocator);
/* Frees every block still live and returns all reserved memory; finishes a recording. */
STALLOC_API stalloc_status_t stalloc_allocator_destroy(stalloc_allocator_t* allocator);

/* ---------------------------------------------------------------------------------------
 * Alloc and free. Thread-safe: any thread may free what another allocated.
 * `stream` is an opaque stream handle (cudaStream_t cast to an integer; 0 = default stream).
 * ------------------------------------------------------------------------------------- */

/* size 0 gives *ptr = NULL and STALLOC_OK. Out of memory gives *ptr = NULL and
 * STALLOC_ERR_OUT_OF_MEMORY; it never aborts. */
STALLOC_API stalloc_status_t stalloc_allocator_alloc(stalloc_allocator_t* allocator, size_t size,
                                                     int32_t device, uint64_t stream, void** ptr);
/* NULL is a no-op. A pointer freed twice or never given out returns an error and changes nothing. */
STALLOC_API stalloc_status_t stalloc_allocator_free(stalloc_allocator_t* allocator, void* ptr);
/* The form PyTorch calls back with: size, device and stream as they were at alloc; the size is
 * checked against the record (STALLOC_ERR_INVALID_ARGUMENT on mismatch, nothing freed). */
STALLOC_API stalloc_status_t stalloc_allocator_free_sized(stalloc_allocator_t* allocator, void* ptr,
                                                          size_t size, int32_t device,
                                                          uint64_t stream);
/* The requested size of a live block; STALLOC_ERR_UNKNOWN_POINTER if ptr is not live. */
STALLOC_API stalloc_status_t stalloc_allocator_block_size(stalloc_allocator_t* allocator,
                                                          const void* ptr, size_t* size);
/* The block at ptr is also used by work queued on `stream` (PyTorch's record_stream). When it
 * is freed, no stream gets its bytes again until the work queued on every such stream before
 * the free is done (the backend's events; host and virtual memory are synchronous, so their
 * blocks are reusable at once). Recording the stream it is freed on changes nothing.
 * STALLOC_ERR_UNKNOWN_POINTER / _DOUBLE_FREE if ptr is not live. */
STALLOC_API stalloc_status_t stalloc_allocator_record_stream(stalloc_allocator_t* allocator,
                                                             const void* ptr, uint64_t stream);
/* The backend allocation that holds the live block at ptr (what cudaIpcGetMemHandle needs):
 * its base and size. STALLOC_ERR_UNSUPPORTED for blocks of a slab chunk or of a plan pool
 * mapped granule by granule, which are no single allocation. */
STALLOC_API stalloc_status_t stalloc_allocator_block_base(stalloc_allocator_t* allocator,
                                                          const void* ptr, void** base,
                                                          size_t* size);
/* Changes the memory limit (bytes the allocator may reserve; 0 = none). Memory already
 * reserved above a lower limit stays; new segments are refused until it is back under. */
STALLOC_API stalloc_status_t stalloc_allocator_set_memory_limit(stalloc_allocator_t* allocator,
                                                                uint64_t bytes);
/* The total memory of the allocator's device (a GPU's, the host's RAM, the virtual range). */
STALLOC_API stalloc_status_t stalloc_allocator_device_memory(stalloc_allocator_t* allocator,
                                                             uint64_t* total);
/* Returns every cached, unused segment to the backend (as torch.cuda.empty_cache()). */
STALLOC_API stalloc_status_t stalloc_allocator_release_cached(stalloc_allocator_t* allocator);

/* ---------------------------------------------------------------------------------------
 * Statistics. "allocated" counts requested bytes of live blocks (so its peak over a trace is
 * the trace's lower bound); "reserved" counts bytes held from the backend.
 * ------------------------------------------------------------------------------------- */
typedef struct stalloc_stats {
  size_t struct_size;
  uint64_t allocated_bytes;
  uint64_t peak_allocated_bytes;
  uint64_t reserved_bytes;
  uint64_t peak_reserved_bytes;
  uint64_t active_blocks;       /* live allocations */
  uint64_t peak_active_blocks;
  uint64_t alloc_count;         /* successful allocs since creation or the last reset */
  uint64_t free_count;
  uint64_t failed_allocs;       /* allocs that returned STALLOC_ERR_OUT_OF_MEMORY */
  uint64_t segment_count;       /* backend allocations held now */
  uint64_t backend_allocs;      /* backend alloc calls, a measure of cache misses */
  uint64_t backend_frees;
  uint64_t plan_hits;           /* requests served at their planned offset */
  uint64_t plan_misses;         /* requests in plan mode that the plan did not cover */
  uint64_t resyncs;             /* times the runtime found its plan position again */
  uint64_t dynamic_allocs;      /* requests placed in the plan's reusable space */
  uint64_t fallback_allocs;     /* requests served by the fallback pool */
  uint64_t steps;               /* step markers seen */
  uint64_t deferred_frees;      /* freed blocks held back now until streams recorded with
                                   stalloc_allocator_record_stream are done with them */
  uint64_t memory_limit;        /* the limit in force now (0 = none) */
  uint64_t hinted_allocs;       /* requests the growable pool placed where the online
                                   lifecycle's layout hints put them (docs/online.md) */
} stalloc_stats_t;

STALLOC_API void stalloc_stats_init(stalloc_stats_t* stats);
STALLOC_API stalloc_status_t stalloc_allocator_stats(stalloc_allocator_t* allocator,
                                                     stalloc_stats_t* stats);
/* Sets the peaks to the current values and the counters to 0. */
STALLOC_API stalloc_status_t stalloc_allocator_reset_peaks(stalloc_allocator_t* allocator);

/* ---------------------------------------------------------------------------------------
 * Steps and record mode
 * ------------------------------------------------------------------------------------- */

/* Marks the start of training step `step` (optional for callers; helps the planner). */
STALLOC_API stalloc_status_t stalloc_allocator_step_begin(stalloc_allocator_t* allocator,
                                                          uint64_t step);
/* Starts writing every alloc, free, failed alloc and step marker to a trace file at path.
 * Blocks already live are not in the trace: their frees are recorded without an alloc and
 * flagged STALLOC_EVENT_FLAG_UNMATCHED. */
STALLOC_API stalloc_status_t stalloc_allocator_record_start(stalloc_allocator_t* allocator,
                                                            const char* path);
/* Finishes the trace file (writes its end marker). STALLOC_OK if not recording. */
STALLOC_API stalloc_status_t stalloc_allocator_record_stop(stalloc_allocator_t* allocator);

/* ---------------------------------------------------------------------------------------
 * Trace: the ordered alloc/free events of a run with optional step markers; time is the
 * event index. File format: docs/trace-format.md.
 * ------------------------------------------------------------------------------------- */
typedef enum stalloc_event_kind {
  STALLOC_EVENT_ALLOC = 1,
  STALLOC_EVENT_FREE = 2,
  STALLOC_EVENT_STEP = 3,        /* start of a step; id is the step number */
  STALLOC_EVENT_ALLOC_FAILED = 4 /* an alloc the allocator refused; id unused */
} stalloc_event_kind_t;

enum {
  STALLOC_EVENT_FLAG_UNMATCHED = 1 /* a free whose alloc happened before recording began */
};

/* 40 bytes, little-endian on disk exactly as in memory. */
typedef struct stalloc_event {
  uint64_t id;      /* request id: an alloc and its free share it; the step number for STEP */
  uint64_t size;    /* requested bytes (ALLOC, FREE, ALLOC_FAILED) */
  uint64_t address; /* address in the recorded run; 0 if unknown */
  uint64_t stream;
  uint32_t thread;  /* small per-process thread number */
  int16_t device;
  uint8_t kind;     /* stalloc_event_kind_t */
  uint8_t flags;    /* STALLOC_EVENT_FLAG_* */
} stalloc_event_t;

/* A request: one alloc paired with its free. Lifetimes are half-open event-index intervals
 * [alloc_event, free_event); free_event is UINT64_MAX for a request never freed. */
typedef struct stalloc_request {
  uint64_t id;
  uint64_t size;
  uint64_t alloc_event;
  uint64_t free_event;
  uint64_t stream;
  uint32_t step;    /* number of step markers before the alloc */
  int16_t device;
  uint16_t reserved;
} stalloc_request_t;

typedef struct stalloc_trace_summary {
  size_t struct_size;
  uint64_t events;
  uint64_t requests;          /* allocs */
  uint64_t unfreed_requests;  /* allocs with no free in the trace */
  uint64_t unmatched_frees;   /* frees flagged UNMATCHED (their alloc predates the trace) */
  uint64_t failed_allocs;
  uint64_t distinct_sizes;
  uint64_t steps;             /* step markers */
  uint64_t total_bytes;       /* sum of requested bytes over all allocs (saturates at UINT64_MAX) */
  uint64_t lower_bound;       /* max over time of live requested bytes (saturates likewise) */
  uint64_t lower_bound_event; /* the first event index at which the lower bound is reached */
  uint64_t max_request;       /* largest single request */
  uint64_t streams;           /* distinct streams */
  uint64_t devices;           /* distinct devices */
} stalloc_trace_summary_t;

typedef struct stalloc_trace stalloc_trace_t;

STALLOC_API stalloc_status_t stalloc_trace_create(stalloc_trace_t** trace);
STALLOC_API void stalloc_trace_destroy(stalloc_trace_t* trace);
/* Appends events after checking them (known kind; an alloc's id not live; a free's id live
 * unless flagged UNMATCHED, with the alloc's size or size 0). On error nothing is appended and
 * the message names the event's index. */
STALLOC_API stalloc_status_t stalloc_trace_append(stalloc_trace_t* trace,
                                                  const stalloc_event_t* events, size_t count);
/* Reads a trace file; every structural and semantic problem is an error naming its place. */
STALLOC_API stalloc_status_t stalloc_trace_load(const char* path, stalloc_trace_t** trace);
/* Writes the native format (atomically: a temporary file renamed over path). */
STALLOC_API stalloc_status_t stalloc_trace_save(const stalloc_trace_t* trace, const char* path);
/* Borrowed views, valid until the trace is changed or destroyed. */
STALLOC_API stalloc_status_t stalloc_trace_events(const stalloc_trace_t* trace,
                                                  const stalloc_event_t** events, size_t* count);
STALLOC_API stalloc_status_t stalloc_trace_requests(const stalloc_trace_t* trace,
                                                    const stalloc_request_t** requests,
                                                    size_t* count);
STALLOC_API void stalloc_trace_summary_init(stalloc_trace_summary_t* summary);
STALLOC_API stalloc_status_t stalloc_trace_summary(const stalloc_trace_t* trace,
                                                   stalloc_trace_summary_t* summary);

/* Streaming writer with bounded memory (what record mode uses). */
typedef struct stalloc_trace_writer stalloc_trace_writer_t;
STALLOC_API stalloc_status_t stalloc_trace_writer_open(const char* path,
                                                       stalloc_trace_writer_t** writer);
STALLOC_API stalloc_status_t stalloc_trace_writer_append(stalloc_trace_writer_t* writer,
                                                         const stalloc_event_t* events,
                                                         size_t count);
/* Writes the end marker and closes; the writer is freed whatever the status. */
STALLOC_API stalloc_status_t stalloc_trace_writer_close(stalloc_trace_writer_t* writer);

/* ---------------------------------------------------------------------------------------
 * Placement: offsets for items with known lifetimes so that no two items live at the same
 * time share a byte, with the plan peak (largest offset + size) as close as possible to the
 * lower bound (the most bytes live at once). The planner's core, usable alone (it is the
 * MiniMalloc CSV problem). Algorithm and measured quality: docs/placement.md.
 * ------------------------------------------------------------------------------------- */
typedef struct stalloc_place_item {
  uint64_t lower, upper;  /* lifetime, half-open [lower, upper); upper >= lower */
  uint64_t size;          /* bytes; rounded up to the alignment inside the solver */
  uint64_t fixed_offset;  /* UINT64_MAX (free), or an offset the placement must keep */
} stalloc_place_item_t;

typedef struct stalloc_place_params {
  size_t struct_size;     /* sizeof(stalloc_place_params_t), set by stalloc_place_params_init */
  uint64_t alignment;     /* offsets of free items are multiples of this; default 1 */
  double time_limit;      /* seconds for the improving search; 0 = heuristics only; default 10 */
  const volatile int* cancel; /* optional: set non-zero (from any thread, with an atomic store
                                 such as __atomic_store_n) to stop the search early, keeping
                                 the best placement found; default NULL */
} stalloc_place_params_t;

typedef struct stalloc_place_result {
  size_t struct_size;     /* sizeof(stalloc_place_result_t), set by stalloc_place_result_init */
  uint64_t peak;          /* plan peak: largest offset + size over items live for some time */
  uint64_t lower_bound;   /* max over time of live bytes (sizes aligned) */
  uint32_t orderings_tried; /* heuristic orderings plus search attempts */
  uint32_t optimal;       /* 1 when peak is proven minimal (e.g. peak == lower_bound) */
  uint64_t backtracks;    /* search nodes that found no way on */
  double seconds;         /* wall time of the call */
} stalloc_place_result_t;

STALLOC_API void stalloc_place_params_init(stalloc_place_params_t* params);
STALLOC_API void stalloc_place_result_init(stalloc_place_result_t* result);
/* Fills offsets[i] for each of the n items (offsets has n entries). Items of size 0 or with
 * upper == lower occupy nothing and get offset 0 (or their fixed offset). params may be
 * NULL for the defaults; result may be NULL. Fails with INVALID_ARGUMENT on upper < lower,
 * sizes that overflow, fixed items that overlap each other or a bad parameter; on
 * OUT_OF_MEMORY; with CANCELLED only if cancelled before any placement existed. */
STALLOC_API stalloc_status_t stalloc_place(const stalloc_place_item_t* items, size_t n,
                                           const stalloc_place_params_t* params,
                                           uint64_t* offsets, stalloc_place_result_t* result);

/* ---------------------------------------------------------------------------------------
 * Plan: the offline planner. It finds the steady-state iteration of a trace (step markers, or
 * the period of the alloc-size sequence), classifies every request, places the persistent,
 * warm-up and periodic ones in one pool so that the steady iteration can repeat forever, and
 * computes the reusable space for dynamic requests. Docs: docs/planner.md, docs/plan-format.md.
 * ------------------------------------------------------------------------------------- */
typedef struct stalloc_plan stalloc_plan_t;

typedef enum stalloc_request_class {
  STALLOC_CLASS_PERSISTENT = 1, /* lives across the whole steady state (weights, optimizer state) */
  STALLOC_CLASS_PERIODIC = 2,   /* same position and size every iteration: planned */
  STALLOC_CLASS_TINY = 3,       /* <= tiny_threshold bytes: served by a slab, not planned */
  STALLOC_CLASS_DYNAMIC = 4,    /* varies between iterations: placed online in reusable space */
  STALLOC_CLASS_WARMUP = 5      /* once before the steady state, freed: planned */
} stalloc_request_class_t;

typedef struct stalloc_plan_params {
  size_t struct_size;       /* sizeof(stalloc_plan_params_t), set by stalloc_plan_params_init */
  double time_limit;        /* seconds for the placement's improving search; default 2; 0 = greedy only */
  int32_t detect_period;    /* 1 (default): find the steady state; 0: plan the trace as one static timeline */
  int32_t use_step_markers; /* 1 (default): use step markers when the trace has them */
  int32_t classify;         /* 1 (default): tiny requests go to the slab; 0: they are planned too */
  int32_t reuse_space;      /* 1 (default): compute the reusable space for dynamic requests */
  uint64_t alignment;       /* every offset is a multiple of this; power of two; default 512 */
  uint64_t tiny_threshold;  /* requests of at most this many bytes are tiny; default 512 */
  double dynamic_headroom;  /* >= 1 (default 1): each reuse window gets an arena in the pool of
                               the most live bytes its dynamic requests reached in a recorded
                               iteration * this; the runtime places them there. 0: no arenas */
  int32_t tolerate_sizes;   /* 1: steps of one kind (same alloc count between step markers)
                               are one iteration whatever their sizes, and a position whose size
                               varies is planned at the largest size seen (a smaller request
                               takes the slot); 0 (default): a varying size makes it dynamic */
  int32_t reserved0;
} stalloc_plan_params_t;

/* One planned position (prologue or iteration), as the plan file stores it. */
typedef struct stalloc_plan_entry {
  uint64_t size;   /* requested bytes expected at this position */
  uint64_t offset; /* offset in the pool; UINT64_MAX for tiny and dynamic requests */
  uint32_t cls;    /* stalloc_request_class_t */
  uint32_t window; /* dynamic: index of its reuse window; else UINT32_MAX */
} stalloc_plan_entry_t;

typedef struct stalloc_reuse_window {
  uint32_t begin, end;  /* alloc positions in the iteration, half-open; end may pass the
                           iteration's count (then it runs into the next iteration) */
  uint32_t first_range; /* index into the ranges */
  uint32_t range_count;
} stalloc_reuse_window_t;

typedef struct stalloc_reuse_range {
  uint64_t offset, size; /* free bytes of the pool during the whole window */
} stalloc_reuse_range_t;

typedef struct stalloc_plan_info {
  size_t struct_size;
  uint64_t lower_bound;       /* of the planned requests: max over the trace's time of their live
                                 requested bytes (no pool holding them can be smaller) */
  uint64_t trace_lower_bound; /* of the whole trace (tiny and dynamic requests included) */
  uint64_t plan_peak;         /* largest offset + size */
  uint64_t pool_size;         /* bytes the runtime reserves (plan peak, aligned) */
  uint64_t alignment;
  uint64_t fingerprint;       /* of the trace's alloc-size sequence the plan covers */
  uint64_t persistent, periodic, tiny, dynamic, warmup; /* entries of each class */
  uint64_t prologue_count;    /* allocs before the steady state */
  uint64_t iteration_count;   /* allocs per steady-state iteration (0: static plan) */
  uint64_t steps_found;       /* complete steady-state iterations found in the trace */
  uint64_t uses_step_markers; /* 1: the iterations came from step markers */
  uint64_t window_count, range_count;
  uint64_t reusable_bytes;    /* sum of the reuse ranges' sizes over all windows */
  double ratio;               /* plan_peak / lower_bound (1 when nothing is planned); pool_size /
                                 lower_bound when an arena lies above every entry */
  double seconds;             /* planning time */
  uint64_t sizes_tolerated;   /* 1: planned with tolerate_sizes (each entry holds the largest size
                                 its position reached; a request no larger takes the slot) */
} stalloc_plan_info_t;

STALLOC_API void stalloc_plan_params_init(stalloc_plan_params_t* params);
/* Plans a trace; params may be NULL for the defaults. */
STALLOC_API stalloc_status_t stalloc_plan_create(const stalloc_trace_t* trace,
                                                 const stalloc_plan_params_t* params,
                                                 stalloc_plan_t** plan);
STALLOC_API void stalloc_plan_destroy(stalloc_plan_t* plan);
/* Writes the plan file (atomically: a temporary file renamed over path). */
STALLOC_API stalloc_status_t stalloc_plan_save(const stalloc_plan_t* plan, const char* path);
/* Reads and validates a plan file: STALLOC_ERR_BAD_FORMAT, _TRUNCATED or _VERSION when damaged. */
STALLOC_API stalloc_status_t stalloc_plan_load(const char* path, stalloc_plan_t** plan);
STALLOC_API void stalloc_plan_info_init(stalloc_plan_info_t* info);
STALLOC_API stalloc_status_t stalloc_plan_info(const stalloc_plan_t* plan, stalloc_plan_info_t* info);
/* STALLOC_OK when the trace's allocs (its first prologue + one iteration) are the ones the plan
 * was made for (fingerprint, dynamic positions masked); STALLOC_ERR_PLAN_MISMATCH otherwise. */
STALLOC_API stalloc_status_t stalloc_plan_check(const stalloc_plan_t* plan,
                                                const stalloc_trace_t* trace);
/* Borrowed views, valid while the plan lives. which: 0 = prologue, 1 = iteration. */
STALLOC_API stalloc_status_t stalloc_plan_entries(const stalloc_plan_t* plan, int32_t which,
                                                  const stalloc_plan_entry_t** entries,
                                                  size_t* count);
/* Per entry, the alloc index at which it is freed: absolute for the prologue, relative to the
 * iteration's start for the iteration (may pass its count); UINT64_MAX for never. */
STALLOC_API stalloc_status_t stalloc_plan_lifetimes(const stalloc_plan_t* plan, int32_t which,
                                                    const uint64_t** ends, size_t* count);
STALLOC_API stalloc_status_t stalloc_plan_reuse(const stalloc_plan_t* plan,
                                                const stalloc_reuse_window_t** windows,
                                                size_t* window_count,
                                                const stalloc_reuse_range_t** ranges,
                                                size_t* range_count);


/* ---------------------------------------------------------------------------------------
 * Runtime: serving a run from a plan, and replaying a trace through it (docs/runtime.md).
 * ------------------------------------------------------------------------------------- */

/* Switches the allocator to plan mode: reserves the plan's pool once and from then on answers
 * each request that matches the plan (position, then size) with its planned address; the plan
 * is copied, so the caller may destroy it. Blocks already live stay where they are. Requests
 * the plan does not cover go to the reusable space of the plan's windows, a slab (<= 512 B)
 * or the fallback pool; after a divergence the runtime finds its position again (resync).
 * The plan is checked against the same rules as when it was built or loaded (a plan that
 * passes one passes all). STALLOC_ERR_PLAN_MISMATCH when the plan's offsets break the
 * allocator's alignment; STALLOC_ERR_BAD_FORMAT when the plan breaks those rules;
 * STALLOC_ERR_INVALID_ARGUMENT when a plan is already loaded. */
STALLOC_API stalloc_status_t stalloc_allocator_load_plan(stalloc_allocator_t* allocator,
                                                         const stalloc_plan_t* plan);

/* ---------------------------------------------------------------------------------------
 * Online lifecycle (docs/online.md): what a real run does, in the library, so the PyTorch
 * adapter, C trainers and `stalloc replay --online` run the same code. The allocator records
 * its first steps in memory, plans them on a background thread, switches to the plan at a
 * step boundary, watches how well each step fits and, when the run drifts (new shapes, a
 * curriculum, a batch ramp), records a few steps more and re-plans. Step markers
 * (stalloc_allocator_step_begin) drive it; it never reads ahead.
 * ------------------------------------------------------------------------------------- */
typedef struct stalloc_online_params {
  size_t struct_size;         /* sizeof(stalloc_online_params_t), set by _init */
  uint32_t record_steps;      /* steps recorded before the first plan; default 3 (the first is
                                 warm-up: the optimizer creates its state there) */
  uint32_t replan_steps;      /* steps recorded for a re-plan; default 2 */
  double time_limit;          /* seconds of improving search per plan; default 1 */
  double replan_miss_share;   /* a step whose bytes that missed the plan pass this share of
                                 its allocated bytes is drifting, and a kind of step another
                                 kind's plan serves within it gets no plan; default 0.02 */
  uint32_t replan_after;      /* drifting steps in a row that start a re-plan; default 1 */
  int32_t wait_for_plan;      /* 1: the first step boundary after planning started waits for
                                 it (deterministic, for replay); 0 (default): the switch comes
                                 at the first boundary after planning finished, never blocking */
  int32_t layout_hints;       /* 1 (default): while the growable pool serves, each request goes
                                 where a plan of the step before put its position, if free
                                 (docs/online.md, "Layout hints"); 0: best fit alone */
  uint32_t pool_fit_candidates; /* once the growable pool serves for good (shapes vary), free
                                 blocks each request weighs, from best fit up, for the one
                                 needing the fewest granules mapped; 1: best fit alone (more
                                 granule moves, on a GPU tens of us each); 0 or default: 4.
                                 (It lies in bytes that were padding before it came, so sizeof
                                 and struct_size did not change: fill the struct with _init.) */
  uint32_t pool_at_ends_after; /* once the growable pool serves for good and its peak has held
                                 for this many steps, a request may also go at either end of its
                                 free block where fewer granules need mapping (on a GPU, fewer
                                 granule moves a step; it can cost a granule or two of peak on
                                 short runs, docs/online.md); 0 (default): never */
} stalloc_online_params_t;

typedef enum stalloc_online_state {
  STALLOC_ONLINE_OFF = 0,
  STALLOC_ONLINE_RECORDING = 1, /* no plan yet: recording the first steps */
  STALLOC_ONLINE_PLANNING = 2,  /* no plan yet: the first plan is being made */
  STALLOC_ONLINE_SERVING = 3,   /* serving a plan (and maybe recording or planning the next) */
  STALLOC_ONLINE_POOL = 4       /* no plan: the growable pool serves the run with less memory
                                   than the plan made from it would need */
} stalloc_online_state_t;

typedef struct stalloc_online_info {
  size_t struct_size;
  int32_t state;             /* stalloc_online_state_t */
  uint32_t plans_switched;   /* plans switched to so far */
  uint64_t steps;            /* step boundaries seen since online_start */
  uint64_t plan_records;     /* plans started (see stalloc_allocator_online_plans) */
  int32_t recording;         /* 1 while steps are being recorded for a (re-)plan */
  int32_t step_kinds;        /* kinds of step (same allocs per step: training, evaluation)
                                served from a plan of their own now */
  uint64_t hint_layouts;     /* layouts the layout hints made (one per step the growable pool
                                served whole, on their thread) */
  uint64_t hint_layouts_kept;/* of those, kept: they beat best fit on the step they came from */
  double hint_seconds_max;   /* the longest one took (placement and the two replays) */
  double hint_seconds_total;
} stalloc_online_info_t;

/* One plan the lifecycle made: when, from what, how long it took, and when it was used. */
typedef struct stalloc_online_plan_record {
  uint64_t started_step;     /* boundary (counted from online_start) at which planning began */
  uint64_t switched_step;    /* boundary at which the plan was switched to; UINT64_MAX: never */
  uint64_t recorded_steps;   /* steps the plan was made from */
  uint64_t pool_size;        /* bytes of its pool */
  uint64_t plan_peak;
  uint64_t lower_bound;      /* of the planned requests */
  double plan_seconds;       /* planning time on the background thread */
  double delay_seconds;      /* from planning done to the switch; negative: the boundary
                                waited that long for it (wait_for_plan) */
  int32_t status;            /* the planner's or the switch's status; STALLOC_OK when used */
  int32_t declined;          /* 1: not switched to, because the pool it needs plus what is live
                                outside it would pass the most the allocator has reserved so
                                far (the growable pool already serves the run with less) */
} stalloc_online_plan_record_t;

STALLOC_API void stalloc_online_params_init(stalloc_online_params_t* params);
/* Starts the lifecycle on an allocator that serves no plan yet (params NULL: defaults). */
STALLOC_API stalloc_status_t stalloc_allocator_online_start(stalloc_allocator_t* allocator,
                                                            const stalloc_online_params_t* params);
STALLOC_API void stalloc_online_info_init(stalloc_online_info_t* info);
STALLOC_API stalloc_status_t stalloc_allocator_online_info(stalloc_allocator_t* allocator,
                                                           stalloc_online_info_t* info);
/* Copies up to capacity plan records, oldest first; *count gets how many exist. */
STALLOC_API stalloc_status_t stalloc_allocator_online_plans(stalloc_allocator_t* allocator,
                                                            stalloc_online_plan_record_t* records,
                                                            size_t capacity, size_t* count);

typedef struct stalloc_replay_options {
  size_t struct_size;             /* sizeof(stalloc_replay_options_t), set by _init */
  stalloc_backend_kind_t backend; /* STALLOC_BACKEND_VIRTUAL (default) or STALLOC_BACKEND_HOST */
  uint64_t alignment;             /* 0 (default): the plan's alignment, or 512 without a plan */
  int32_t check_overlap;          /* 1 (default): after every alloc, check that no two live
                                     blocks share a byte (an interval check of its own) */
  int32_t check_data;             /* 1: host backend only: fill every block with a pattern at
                                     alloc and verify it at free; default 0 */
  int32_t use_steps;              /* 1 (default): pass the trace's step markers on */
  int32_t reserved0;
  uint64_t virtual_capacity;      /* address range for the virtual backend; 0 = 1 TiB */
  uint64_t timeline_points;       /* capacity of stalloc_replay_timeline's arrays; 0 = none */
  int32_t online;                 /* 1: drive the online lifecycle (no plan may be given), with
                                     online_params; the first boundary after planning started
                                     waits for it, so a replay is deterministic */
  int32_t growable_pool;          /* 1 (default): the allocator's growable_pool option (docs/
                                     options.md); 0: PyTorch-style cached segments */
  stalloc_online_params_t online_params; /* _init fills the defaults; wait_for_plan is forced */
  int32_t device_lag;             /* virtual backend: model a GPU that runs this many events
                                     behind the host (options.virtual_lag); 0 (default): none */
  int32_t reserved1;
} stalloc_replay_options_t;

typedef struct stalloc_replay_result {
  size_t struct_size;
  uint64_t events;            /* events replayed */
  uint64_t requests;          /* allocs replayed */
  uint64_t lower_bound;       /* of the replayed trace */
  uint64_t peak_allocated;    /* = lower_bound when every event replayed */
  uint64_t peak_reserved;
  double fragmentation;       /* 1 - peak_allocated / peak_reserved */
  uint64_t hits;              /* served at their planned offset */
  uint64_t misses;            /* the plan did not cover them */
  uint64_t fallbacks;         /* served by the fallback pool */
  uint64_t resyncs;
  uint64_t dynamic;           /* served in the plan's reusable space */
  uint64_t tiny;              /* served by the slab */
  uint64_t pool_size;         /* bytes of the plan's pool (0 without a plan) */
  uint64_t checked_events;    /* events after which the overlap check ran */
  double seconds;             /* wall time of the replay, checks included */
  uint64_t timeline_count;    /* timeline entries written (<= options.timeline_points) */
  uint64_t hinted;            /* online: requests the growable pool placed where layout hints
                                 put them */
  uint64_t hint_layouts;      /* online: layouts the hints made, and kept (stalloc_online_info_t) */
  uint64_t hint_layouts_kept;
  double hint_seconds_max;    /* online: the longest a layout took on the hints' thread */
  uint64_t device_waits;      /* device_lag > 0: times the host waited for the modelled GPU
                                 (an unmap of memory queued work may use, a spin on an event) */
  uint64_t backend_allocs;    /* the allocator's backend allocations (stalloc_stats_t): with a
                                 growable pool, the granules it mapped, moves included; on a GPU
                                 each costs driver calls of tens of us (README, "On a GPU") */
} stalloc_replay_result_t;

/* One step of a replay: the events from one step marker to the next (the first also holds
 * what comes before the first marker). */
typedef struct stalloc_replay_step {
  uint64_t peak_allocated;
  uint64_t peak_reserved;
  uint64_t hit_bytes;         /* bytes served at a planned offset */
  uint64_t miss_bytes;        /* bytes of requests (> 512 B) the plan did not cover */
} stalloc_replay_step_t;

STALLOC_API void stalloc_replay_options_init(stalloc_replay_options_t* options);
STALLOC_API void stalloc_replay_result_init(stalloc_replay_result_t* result);
/* Drives a fresh allocator with the trace's events (plan may be NULL: fallback pool only).
 * Frees of allocs before the trace and failed allocs are skipped. An overlap or a damaged
 * pattern is STALLOC_ERR_INTERNAL naming the event. */
STALLOC_API stalloc_status_t stalloc_replay(const stalloc_trace_t* trace, const stalloc_plan_t* plan,
                                            const stalloc_replay_options_t* options,
                                            stalloc_replay_result_t* result);
/* The same, also filling per-step figures (steps: NULL or step_capacity entries; *step_count
 * gets the number of steps, which may pass the capacity) and, for an online replay, the plan
 * records (plans: NULL or plan_capacity entries; *plan_count likewise). */
STALLOC_API stalloc_status_t stalloc_replay_steps(const stalloc_trace_t* trace,
                                                  const stalloc_plan_t* plan,
                                                  const stalloc_replay_options_t* options,
                                                  stalloc_replay_result_t* result,
                                                  stalloc_replay_step_t* steps,
                                                  size_t step_capacity, size_t* step_count,
                                                  stalloc_online_plan_record_t* plans,
                                                  size_t plan_capacity, size_t* plan_count);
/* The same, also filling a timeline as stalloc_simulate does: per bucket of consecutive events
 * (options->timeline_points buckets), its last event index and the largest allocated and
 * reserved bytes within it. Each array is NULL or holds timeline_points entries. */
STALLOC_API stalloc_status_t stalloc_replay_timeline(const stalloc_trace_t* trace,
                                                     const stalloc_plan_t* plan,
                                                     const stalloc_replay_options_t* options,
                                                     stalloc_replay_result_t* result,
                                                     uint64_t* timeline_event,
                                                     uint64_t* timeline_allocated,
                                                     uint64_t* timeline_reserved);


/* ---------------------------------------------------------------------------------------
 * Baseline simulators: replay a trace through a model of PyTorch's CUDACachingAllocator
 * (default, or expandable_segments:True) and report its peak reserved. What is and is not
 * modelled: docs/baseline.md.
 * ------------------------------------------------------------------------------------- */
typedef enum stalloc_sim_kind {
  STALLOC_SIM_TORCH = 0,           /* segments from cudaMalloc, split and cached */
  STALLOC_SIM_TORCH_EXPANDABLE = 1 /* PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True */
} stalloc_sim_kind_t;

typedef struct stalloc_sim_params {
  size_t struct_size;        /* sizeof(stalloc_sim_params_t), set by stalloc_sim_params_init */
  stalloc_sim_kind_t kind;   /* default STALLOC_SIM_TORCH */
  uint64_t max_split_size;   /* bytes; 0 = unlimited (PyTorch's default); else > 20 MiB,
                                as max_split_size_mb requires */
  uint64_t memory_limit;     /* device bytes the allocator may reserve; 0 = no limit */
  uint64_t timeline_points;  /* capacity of the timeline arrays; 0 = no timeline */
} stalloc_sim_params_t;

typedef struct stalloc_sim_result {
  size_t struct_size;
  uint64_t peak_allocated;   /* max over time of live requested bytes */
  uint64_t peak_reserved;    /* max over time of device bytes held (segments or mapped pages) */
  uint64_t waste;            /* peak_reserved - peak_allocated */
  double fragmentation;      /* 1 - peak_allocated / peak_reserved; 0 when nothing reserved */
  uint64_t ooms;             /* allocs refused at the memory limit after flushing the cache */
  uint64_t segments;         /* most segments held at once (expandable: segments created) */
  uint64_t segment_allocs;   /* cudaMalloc calls (expandable: page-mapping calls) */
  uint64_t cache_flushes;    /* times cached memory was released to retry an alloc */
  uint64_t final_reserved;   /* bytes held after the last event */
  uint64_t timeline_count;   /* timeline entries written (<= timeline_points) */
} stalloc_sim_result_t;

STALLOC_API void stalloc_sim_params_init(stalloc_sim_params_t* params);
STALLOC_API void stalloc_sim_result_init(stalloc_sim_result_t* result);
/* Replays every event of trace through the simulated allocator. The timeline arrays (each NULL
 * or with params->timeline_points entries) receive, per bucket of consecutive events, the last
 * event index of the bucket and the largest allocated and reserved bytes within it, so a plot
 * of them keeps every peak. */
STALLOC_API stalloc_status_t stalloc_simulate(const stalloc_trace_t* trace,
                                              const stalloc_sim_params_t* params,
                                              stalloc_sim_result_t* result,
                                              uint64_t* timeline_event,
                                              uint64_t* timeline_allocated,
                                              uint64_t* timeline_reserved);

/* ---------------------------------------------------------------------------------------
 * DLPack: stalloc blocks handed to frameworks (JAX, PyTorch, CuPy) as DLPack tensors, zero
 * copy. The tensor is a legacy (unversioned) DLManagedTensor, given out as void* so this
 * header needs no dlpack.h; wrap it in a PyCapsule named "dltensor". Its deleter frees the
 * block back to the allocator and may be called from any thread. An exporter counts the
 * tensors it made and keeps the allocator alive until the last one is deleted. See docs/jax.md.
 * ------------------------------------------------------------------------------------- */
typedef struct stalloc_dlpack_exporter stalloc_dlpack_exporter_t;

/* owns_allocator != 0: the exporter destroys the allocator once it has been released and its
 * last tensor deleted (so nobody else may destroy it). With 0 the caller must keep the
 * allocator alive while any tensor exists. The virtual backend is refused (UNSUPPORTED). */
STALLOC_API stalloc_status_t stalloc_dlpack_exporter_create(stalloc_allocator_t* allocator,
                                                            int32_t owns_allocator,
                                                            stalloc_dlpack_exporter_t** exporter);
/* Drops the creator's reference; memory goes when the last tensor is deleted too. NULL: no-op. */
STALLOC_API stalloc_status_t stalloc_dlpack_exporter_release(stalloc_dlpack_exporter_t* exporter);
/* Tensors made by the exporter and not yet deleted. */
STALLOC_API stalloc_status_t stalloc_dlpack_exporter_live(const stalloc_dlpack_exporter_t* exporter,
                                                          uint64_t* tensors);
/* Allocates a compact row-major tensor (explicit strides, byte_offset 0) and gives its
 * DLManagedTensor*. dtype is DLDataType (code: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex,
 * 6 bool; bits a multiple of 8). device_type is DLDeviceType: 1 (kDLCPU, device_id 0) for the
 * host backend, 2 (kDLCUDA, the allocator's device) for the cuda backend. An empty tensor
 * gets a 1-byte block so that its data pointer is never NULL. */
STALLOC_API stalloc_status_t stalloc_dlpack_create(stalloc_dlpack_exporter_t* exporter,
                                                   const int64_t* shape, int32_t ndim,
                                                   uint8_t dtype_code, uint8_t dtype_bits,
                                                   uint16_t dtype_lanes, int32_t device_type,
                                                   int32_t device_id, void** managed_tensor);
/* The data pointer and byte size of a tensor made by stalloc_dlpack_create. */
STALLOC_API stalloc_status_t stalloc_dlpack_data(const void* managed_tensor, void** data,
                                                 uint64_t* bytes);
/* Calls the tensor's deleter (for a capsule that was never consumed). NULL: no-op. */
STALLOC_API stalloc_status_t stalloc_dlpack_delete(void* managed_tensor);

/* ---------------------------------------------------------------------------------------
 * PyTorch plug: the C functions torch.cuda.memory.CUDAPluggableAllocator calls, with
 * PyTorch's exact signatures. They take no context, so they serve the allocator registered
 * for the device (one process-wide table, in torch_plug.c). cudaStream_t is a pointer type;
 * void* has its size and calling convention.
 * ------------------------------------------------------------------------------------- */

/* Registers the allocator that serves `device` (0..63); NULL unregisters. The caller keeps
 * the allocator alive while registered and while blocks it gave out are live. */
STALLOC_API stalloc_status_t stalloc_torch_register(int32_t device, stalloc_allocator_t* allocator);
/* PyTorch's malloc signature: NULL on failure (no allocator for the device, out of memory);
 * the reason is in stalloc_torch_last_error(). Not for CUDAPluggableAllocator itself, which
 * takes a NULL as a tensor at address 0: give it stalloc_torch_shim_malloc from
 * libstalloc_torch.so or libstalloc_torch_generic.so, which throws instead (torch_shim.cpp). */
STALLOC_API void* stalloc_torch_malloc(size_t size, int device, void* stream);
/* PyTorch's free. It cannot return an error: a failure is counted, kept in
 * stalloc_torch_last_error() and reported once on stderr; nothing is freed then. */
STALLOC_API void stalloc_torch_free(void* ptr, size_t size, int device, void* stream);
/* The last failure of stalloc_torch_malloc/free in this process, with its status; "" if none. */
STALLOC_API const char* stalloc_torch_last_error(stalloc_status_t* status);
/* Frees that failed since the process started (double frees, foreign pointers). */
STALLOC_API uint64_t stalloc_torch_failed_frees(void);
/* The hooks CUDAPluggableAllocator(...).allocator() takes through set_init_fn, set_reset_fn,
 * set_memory_fraction_fn, set_base_alloc_fn and set_record_stream_fn, with those signatures.
 * Failures are kept in stalloc_torch_last_error() and, where PyTorch cannot see them, said on
 * stderr. */
/* init_fn(device_count): remembers the count PyTorch reported (stalloc_torch_device_count). */
STALLOC_API void stalloc_torch_init(int device_count);
/* The count init received; -1 before PyTorch called it. */
STALLOC_API int stalloc_torch_device_count(void);
/* reset_fn (torch.cuda.empty_cache()): every registered allocator returns its cached, unused
 * segments. */
STALLOC_API void stalloc_torch_reset(void);
/* memory_fraction_fn(fraction, device) (torch.cuda.set_per_process_memory_fraction): the
 * device's allocator may reserve at most fraction x its device's total memory. */
STALLOC_API void stalloc_torch_set_memory_fraction(double fraction, int device);
/* base_alloc_fn(ptr, &size): the backend allocation holding the block (for CUDA IPC); NULL and
 * size 0 when there is none (stalloc_allocator_block_base), so the caller fails loudly. */
STALLOC_API void* stalloc_torch_base_alloc(void* ptr, size_t* size);
/* record_stream_fn(ptr, stream) (Tensor.record_stream): stalloc_allocator_record_stream on the
 * allocator that owns ptr. */
STALLOC_API void stalloc_torch_record_stream(void* ptr, void* stream);
/* record_stream calls that failed since the process started (pointer not live). */
STALLOC_API uint64_t stalloc_torch_failed_record_streams(void);

/* ---------------------------------------------------------------------------------------
 * Epilogue
 * ------------------------------------------------------------------------------------- */
#ifndef STALLOC_CDEF
#ifdef __cplusplus
}
#endif
#endif

#endif /* STALLOC_H */
