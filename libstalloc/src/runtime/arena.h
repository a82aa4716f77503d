/* arena.h - the growable pool (arena.c): one reserved address range, mapped granule by granule
 * as blocks need it, best fit with coalescing, and granules that hold no live byte handed back
 * before new ones are mapped. Serves what no plan covers where the backend can grow (CUDA
 * virtual memory; the host and virtual backends model it). Called with the allocator's lock. */
#ifndef STALLOC_ARENA_H
#define STALLOC_ARENA_H

#include "backends/backend.h"
#include "runtime/budget.h"

typedef struct st_arena st_arena;
typedef struct st_arena_block st_arena_block;

/* Reserves `capacity` bytes of address space (nothing mapped yet). */
stalloc_status_t st_arena_create(const backend_ops* ops, void* backend, const backend_caps* caps,
                                 uint64_t alignment, uint64_t capacity, st_budget* budget,
                                 st_arena** out);
/* Unmaps and releases everything, live blocks included. */
void st_arena_destroy(st_arena* arena);
/* A block of at least size bytes; *block is the handle for free. */
stalloc_status_t st_arena_alloc(st_arena* arena, uint64_t size, uint64_t stream, void** ptr,
                                st_arena_block** block);
/* How many free blocks, by size from best fit up, a request weighs: it takes the one whose
 * placement needs the fewest granules mapped (1, the default: best fit alone). */
void st_arena_set_fit_candidates(st_arena* arena, unsigned candidates);
/* On (with more than one candidate): a request may also go at either end of its free block,
 * where fewer granules need mapping (default off; see allocator.c, the pool's steady peak). */
void st_arena_set_at_ends(st_arena* arena, bool on);
/* On (with more than one candidate): where none of the candidates places a block on granules
 * already mapped, up to 60 more free blocks up the sizes are looked at for one that does
 * (default off; see allocator.c, steps that repeat). */
void st_arena_set_look_further(st_arena* arena, bool on);
/* The layout the step under way follows: blocks at `offsets` of `sizes` (n of them; 0: none).
 * At the peak a granule it does not want moves before one it does. */
void st_arena_want(st_arena* arena, const uint64_t* offsets, const uint64_t* sizes, size_t n);
/* On: a block of whole granules that grows the top starts on a granule boundary, so it holds
 * exactly its own granules and all of them come back when it is freed (else it starts where
 * the top is, sharing a granule with the block below; default off). What suits blocks made end
 * to end that live on together (weights, optimizer state) is the default; see allocator.c. */
void st_arena_set_top_on_boundary(st_arena* arena, bool on);
/* Keeps the free blocks indexed by address from now on, which alloc_at needs (each free and
 * split then costs a second treap update, so only users of alloc_at ask for it). */
void st_arena_index_addresses(st_arena* arena);
/* The block [offset, offset + size) from the arena's first byte, if all of it is free (and
 * usable on stream; past the top the top grows): false, with nothing changed, if not (or if
 * addresses are not indexed). How layout hints (hints.c) put a request where a plan of the
 * last step would. */
bool st_arena_alloc_at(st_arena* arena, uint64_t offset, uint64_t size, uint64_t stream, void** ptr,
                       st_arena_block** block);
/* The blocks in use (live blocks and plan regions) as offsets, sizes and (tags non-NULL) tags
 * (0 for a region), the highest first; returns how many there are (only the first `capacity`
 * are written). */
size_t st_arena_taken(const st_arena* arena, uint64_t* starts, uint64_t* sizes, uint64_t* tags,
                      size_t capacity);
/* A word the arena keeps for the user of a live block (0 when it is handed out). */
uint64_t* st_arena_tag(st_arena_block* block);
/* The offset of ptr (inside the arena's range) from its first byte. */
uint64_t st_arena_offset(const st_arena* arena, const void* ptr);
#define ST_ARENA_ANY_STREAM UINT64_MAX /* a request for no one stream */

/* Frees a live block; stream is where its last use was queued (reused elsewhere only once
 * that work is done). */
void st_arena_free(st_arena* arena, st_arena_block* block, uint64_t stream);
/* A plan's pool inside the arena: `size` bytes of address space starting at a multiple of
 * `align` (and of the granule), nothing mapped. Its user maps what it uses with region_ref
 * (counted on the granules like a block) and lets go with region_unref, so the pool costs the
 * granules it holds, and a pool that is dropped gives them back as its blocks are freed. */
stalloc_status_t st_arena_region(st_arena* arena, uint64_t size, uint64_t align, void** ptr,
                                 st_arena_block** region);
/* Makes the region `size` bytes long where the address space after it is free (the top grows
 * if it must): false, with nothing changed, where a block lies there. Address space only. */
bool st_arena_region_extend(st_arena* arena, st_arena_block* region, uint64_t size);
/* Counts [ptr, ptr + size) of a region on its granules, mapping those not mapped; `stream`:
 * the request's (at the peak a granule whose queued work is that stream's may then be aliased),
 * or ST_ARENA_ANY_STREAM. */
stalloc_status_t st_arena_region_ref(st_arena* arena, const void* ptr, uint64_t size, uint64_t stream);
/* Lets go of a range no queued work uses. */
void st_arena_region_unref(st_arena* arena, const void* ptr, uint64_t size);
/* Lets go of a range freed on `stream` whose queued work may still run: its granules go
 * elsewhere only once that work is done (or are aliased for that stream's later work). false:
 * no host memory to follow the stream, and the range stays counted. */
bool st_arena_region_free(st_arena* arena, const void* ptr, uint64_t size, uint64_t stream);
/* How many granules' memory came by an alias while queued work may still use it (a pointer,
 * for a caller that reads it on every request without a call). */
const size_t* st_arena_shared_count(const st_arena* arena);
/* A request of `stream` takes [ptr, ptr + size) of a region without asking for its granules
 * (they are held): on such granules it waits for that queued work first, if not its own. */
void st_arena_settle(st_arena* arena, const void* ptr, uint64_t size, uint64_t stream);
/* Gives the region's address space back; every range it counted is unref'd already. */
void st_arena_region_release(st_arena* arena, st_arena_block* region);
/* The alignment of every block (the allocator's). */
uint64_t st_arena_alignment(const st_arena* arena);
/* The granule memory is mapped in (the backend's map granularity). */
uint64_t st_arena_granule(const st_arena* arena);
/* Entries in the list of cached granules (at most one per granule of the range). */
size_t st_arena_cached_entries(const st_arena* arena);
/* Unmaps every granule that holds no live byte; gives the bytes returned. */
uint64_t st_arena_trim(st_arena* arena);
/* Granules mapped at an address so far, new, moved or aliased (a move is a cuMemUnmap,
 * cuMemMap and cuMemSetAccess on a GPU); never reset. */
uint64_t st_arena_maps(const st_arena* arena);
/* The bytes of the granules that no live block would touch once the live `blocks` were freed
 * (those they share with other live blocks stay). */
uint64_t st_arena_released_by(const st_arena* arena, st_arena_block* const* blocks, size_t n);
/* The bytes st_arena_trim would return now, unmapping nothing. */
uint64_t st_arena_idle_bytes(const st_arena* arena);

#endif
