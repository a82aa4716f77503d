/* place_search.h - the exact branch-and-bound search that place.c runs on small partitions.
 *
 * A partition is a set of items with time cut into sections (the intervals between
 * consecutive lifetime endpoints; an item covers the sections [slo, shi)). The question the
 * search answers: is there a placement whose peak is at most `capacity`? It places items in
 * canonical order (non-decreasing offset, each at the lowest offset its already-placed
 * overlaps and the obstacles allow, as MiniMalloc's published search does without obstacles)
 * and prunes with section bounds.
 * Defined in place_search.c. */
#ifndef STALLOC_PLACE_SEARCH_H
#define STALLOC_PLACE_SEARCH_H

#include <stdatomic.h>

#include "base/internal.h"

typedef struct st_search st_search;

typedef struct st_search_input {
  uint32_t n, sections;
  const uint64_t* size;   /* aligned, > 0 */
  const uint32_t* slo;    /* first section the item covers */
  const uint32_t* shi;    /* one past its last section */
  const uint64_t* length; /* lifetime length in time units (for the area preordering) */
  uint64_t alignment;     /* every offset the search gives is a multiple of it */
  bool lean;              /* with many sections: no raising of section floors to the unplaced
                             items' lowest offsets (a weaker bound, but nodes many times
                             cheaper; which finds the placement sooner varies by instance) */
  /* Obstacles: blocks already in place (fixed items) that the items must avoid. Copied at
   * creation; nfixed may be 0 (the arrays are then not read). */
  uint32_t nfixed;
  const uint64_t* fixed_offset;
  const uint64_t* fixed_size;
  const uint32_t* fixed_slo;
  const uint32_t* fixed_shi;
} st_search_input;

typedef enum st_search_outcome {
  ST_SEARCH_FOUND = 0,     /* offsets written, peak <= capacity */
  ST_SEARCH_NONE = 1,      /* proven: no placement fits in capacity */
  ST_SEARCH_ABORTED = 2,   /* node limit reached */
  ST_SEARCH_STOPPED = 3,   /* deadline or cancel */
  ST_SEARCH_NOMEM = 4
} st_search_outcome;

#define ST_SEARCH_HEURISTICS 6

stalloc_status_t st_search_create(const st_search_input* in, st_search** out);
void st_search_destroy(st_search* s);
/* One attempt at `capacity` with preordering `heuristic` (0 .. ST_SEARCH_HEURISTICS-1),
 * expanding at most node_limit nodes (with many sections, every sibling tried after a node's
 * first counts as one too). deadline is a CLOCK_MONOTONIC time in seconds; a
 * non-zero *cancel or *stop (either may be NULL) ends it with ST_SEARCH_STOPPED. */
st_search_outcome st_search_run(st_search* s, uint64_t capacity, int heuristic,
                                uint64_t node_limit, double deadline,
                                const volatile int* cancel, const atomic_int* stop,
                                uint64_t* offsets, uint64_t* backtracks);

#endif
