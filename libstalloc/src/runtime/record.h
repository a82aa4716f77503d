/* record.h - record mode (record.c): the allocator's events to a streaming trace writer. */
#ifndef STALLOC_RECORD_H
#define STALLOC_RECORD_H

#include "base/internal.h"
#include "runtime/allocator.h"

/* Appends one event to the trace being recorded. Lock held. */
void st_record_append(stalloc_allocator_t* a, uint8_t kind, uint64_t id, uint64_t size,
                      const void* ptr, uint64_t stream, int32_t device, uint8_t flags);

/* st_record_append while recording; inline, so that the hot path, not recording, makes no call. */
static inline void st_record_event(stalloc_allocator_t* a, uint8_t kind, uint64_t id, uint64_t size,
                                   const void* ptr, uint64_t stream, int32_t device, uint8_t flags) {
  if (__builtin_expect(a->recorder != NULL, 0)) st_record_append(a, kind, id, size, ptr, stream, device, flags);
}

#endif
