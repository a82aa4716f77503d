/* host.c - aligned host memory: real bytes, for tests and CPU machines. Growable ranges too
 * (reserve: address space with no access; map: pages made readable and writable; unmap: their
 * bytes dropped and access taken away, so a stray read of an unmapped range faults). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/backend.h"

typedef struct host_state {
  uint64_t page;
} host_state;

static stalloc_status_t host_create(const stalloc_options_t* options, void** state, backend_caps* caps) {
  (void)options;
  host_state* h = calloc(1, sizeof *h);
  if (!h) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "host backend: no host memory");
  long page = sysconf(_SC_PAGESIZE);
  h->page = page > 0 ? (uint64_t)page : 4096;
  *state = h;
  *caps = (backend_caps){.granularity = h->page, .host_accessible = true, .can_grow = true};
  return STALLOC_OK;
}

static void host_destroy(void* state) { free(state); }

static stalloc_status_t host_alloc(void* state, uint64_t size, uint64_t alignment, uint64_t stream,
                                   void** ptr) {
  (void)stream;
  host_state* h = state;
  uint64_t align = ST_MAX(alignment, h->page);
  if (size > SIZE_MAX - align) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "host backend: %llu bytes is too large", (unsigned long long)size);
  void* p = NULL;
  int rc = posix_memalign(&p, (size_t)align, (size_t)size);
  if (rc != 0 || !p)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "host backend: cannot get %llu bytes: %s",
                   (unsigned long long)size, strerror(rc ? rc : ENOMEM));
  *ptr = p;
  return STALLOC_OK;
}

static stalloc_status_t host_free(void* state, void* ptr, uint64_t size) {
  (void)state;
  (void)size;
  free(ptr);
  return STALLOC_OK;
}

static stalloc_status_t host_reserve(void* state, uint64_t size, void** base) {
  (void)state;
  void* p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "host backend: cannot reserve %llu bytes of address space: %s",
                   (unsigned long long)size, strerror(errno));
  *base = p;
  return STALLOC_OK;
}

static stalloc_status_t host_release(void* state, void* base, uint64_t size) {
  (void)state;
  munmap(base, size);
  return STALLOC_OK;
}

static stalloc_status_t host_map(void* state, void* at, uint64_t size) {
  (void)state;
  if (mprotect(at, size, PROT_READ | PROT_WRITE) != 0)
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "host backend: cannot map %llu bytes at %p: %s",
                   (unsigned long long)size, at, strerror(errno));
  return STALLOC_OK;
}

static stalloc_status_t host_unmap(void* state, void* at, uint64_t size) {
  (void)state;
  madvise(at, size, MADV_DONTNEED);
  mprotect(at, size, PROT_NONE);
  return STALLOC_OK;
}

static stalloc_status_t host_total_memory(void* state, uint64_t* total) {
  host_state* h = state;
  long pages = sysconf(_SC_PHYS_PAGES);
  if (pages <= 0) return st_fail(STALLOC_ERR_UNSUPPORTED, "host backend: the system does not say how much RAM it has");
  *total = (uint64_t)pages * h->page;
  return STALLOC_OK;
}

const backend_ops st_backend_host = {
    .name = "host",
    .create = host_create,
    .destroy = host_destroy,
    .alloc = host_alloc,
    .free = host_free,
    .reserve = host_reserve,
    .release = host_release,
    .map = host_map,
    .unmap = host_unmap,
    .total_memory = host_total_memory,
};
