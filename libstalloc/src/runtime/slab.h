/* slab.h - tiny requests in fixed-size slots (slab.c). Called by allocator.c with the
 * allocator's lock held. */
#ifndef STALLOC_SLAB_H
#define STALLOC_SLAB_H

#include "backends/backend.h"
#include "runtime/arena.h"
#include "runtime/budget.h"

#define ST_TINY_MAX 512 /* requests up to this many bytes are tiny (DESIGN.md) */

typedef struct st_slab st_slab;
typedef struct st_slot st_slot;

stalloc_status_t st_slab_create(const backend_ops* ops, void* backend, const backend_caps* caps,
                                st_budget* budget, st_arena* arena, uint64_t alignment, st_slab** out);
/* Gives every chunk back, live slots included. */
void st_slab_destroy(st_slab* slab);
/* A slot of at least size (<= ST_TINY_MAX) bytes usable on stream. */
stalloc_status_t st_slab_alloc(st_slab* slab, uint64_t size, uint64_t stream, void** ptr, st_slot** slot);
void st_slab_free(st_slab* slab, st_slot* slot, uint64_t stream);

#endif
