/* record.c - record mode: every alloc, free, failed alloc and step marker of an allocator goes
 * to a streaming trace writer. A write error stops the recording and is reported once on
 * stderr; allocation itself never fails because of the recorder. */
#include <stdio.h>

#include "base/thread.h"
#include "runtime/allocator.h"
#include "runtime/record.h"

void st_record_append(stalloc_allocator_t* a, uint8_t kind, uint64_t id, uint64_t size,
                      const void* ptr, uint64_t stream, int32_t device, uint8_t flags) {
  stalloc_event_t e = {
      .id = id,
      .size = size,
      .address = (uint64_t)(uintptr_t)ptr,
      .stream = stream,
      .thread = st_thread_number(),
      .device = (int16_t)device,
      .kind = kind,
      .flags = flags,
  };
  if (stalloc_trace_writer_append(a->recorder, &e, 1) != STALLOC_OK) {
    fprintf(stderr, "stalloc: recording stopped: %s\n", stalloc_last_error());
    stalloc_trace_writer_close(a->recorder);
    a->recorder = NULL;
  }
}

stalloc_status_t stalloc_allocator_record_start(stalloc_allocator_t* a, const char* path) {
  if (!a || !path) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "record_start: NULL argument");
  pthread_mutex_lock(&a->lock);
  stalloc_status_t s = STALLOC_OK;
  if (a->recorder) {
    s = st_fail(STALLOC_ERR_INVALID_ARGUMENT, "record_start: already recording");
  } else {
    s = stalloc_trace_writer_open(path, &a->recorder);
    if (!s) a->recording++;
  }
  pthread_mutex_unlock(&a->lock);
  return s;
}

stalloc_status_t stalloc_allocator_record_stop(stalloc_allocator_t* a) {
  if (!a) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "record_stop: NULL allocator");
  pthread_mutex_lock(&a->lock);
  stalloc_status_t s = STALLOC_OK;
  if (a->recorder) {
    s = stalloc_trace_writer_close(a->recorder);
    a->recorder = NULL;
  }
  pthread_mutex_unlock(&a->lock);
  return s;
}
