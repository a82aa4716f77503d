/* status.c - status codes, their messages, the thread-local last error and the error callback. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/internal.h"

static _Thread_local char last_error[1024];

/* The callback and its argument change together, so they are swapped as one pair. */
typedef struct error_handler {
  stalloc_error_fn fn;
  void* arg;
} error_handler;
static error_handler handlers[2];
static _Atomic(error_handler*) current_handler = NULL;
static atomic_int next_slot = 0;

const char* stalloc_status_string(stalloc_status_t status) {
  switch (status) {
    case STALLOC_OK: return "ok";
    case STALLOC_ERR_INVALID_ARGUMENT: return "invalid argument";
    case STALLOC_ERR_OUT_OF_MEMORY: return "out of memory";
    case STALLOC_ERR_DOUBLE_FREE: return "double free";
    case STALLOC_ERR_UNKNOWN_POINTER: return "unknown pointer";
    case STALLOC_ERR_BAD_FORMAT: return "bad file format";
    case STALLOC_ERR_TRUNCATED: return "truncated file";
    case STALLOC_ERR_VERSION: return "unsupported format version";
    case STALLOC_ERR_PLAN_MISMATCH: return "plan does not match";
    case STALLOC_ERR_NO_DEVICE: return "no device";
    case STALLOC_ERR_BACKEND: return "backend error";
    case STALLOC_ERR_TIMEOUT: return "time limit reached";
    case STALLOC_ERR_CANCELLED: return "cancelled";
    case STALLOC_ERR_IO: return "input/output error";
    case STALLOC_ERR_UNSUPPORTED: return "unsupported";
    case STALLOC_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* stalloc_last_error(void) { return last_error; }

void stalloc_set_error_callback(stalloc_error_fn fn, void* arg) {
  if (!fn) {
    atomic_store(&current_handler, NULL);
    return;
  }
  /* Two slots: a reader holding the previous pair keeps a consistent copy while we write. */
  int slot = atomic_fetch_add(&next_slot, 1) & 1;
  handlers[slot].fn = fn;
  handlers[slot].arg = arg;
  atomic_store(&current_handler, &handlers[slot]);
}

void st_clear_error(void) { last_error[0] = '\0'; }

stalloc_status_t st_fail(stalloc_status_t status, const char* fmt, ...) {
  /* Formatted into a copy first: an argument may be stalloc_last_error() itself, the buffer
   * being written ("%s: ...", stalloc_last_error()), and overlapping vsnprintf is undefined. */
  char message[sizeof last_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  memcpy(last_error, message, sizeof last_error);
  error_handler* h = atomic_load(&current_handler);
  if (h && h->fn) h->fn(status, last_error, h->arg);
  return status;
}

int stalloc_version(void) { return STALLOC_VERSION; }

#define ST_STR2(x) #x
#define ST_STR(x) ST_STR2(x)
const char* stalloc_version_string(void) {
  return ST_STR(STALLOC_VERSION_MAJOR) "." ST_STR(STALLOC_VERSION_MINOR) "." ST_STR(
      STALLOC_VERSION_PATCH);
}
