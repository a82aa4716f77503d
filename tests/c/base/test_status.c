/* test_status.c - the last-error buffer: a message may quote the previous one. */
#include <string.h>

#include "check.h"
#include "base/internal.h"

int main(void) {
  st_fail(STALLOC_ERR_DOUBLE_FREE, "free: %s", "pointer 0x10 was not given out");
  /* Callers wrap a callee's message in their own (replay.c does); the argument is the very
   * buffer st_fail writes, which must not garble it. */
  CHECK_STATUS(st_fail(STALLOC_ERR_DOUBLE_FREE, "replay: event %d: %s", 1, stalloc_last_error()),
               STALLOC_ERR_DOUBLE_FREE);
  CHECK(strcmp(stalloc_last_error(), "replay: event 1: free: pointer 0x10 was not given out") == 0);
  st_clear_error();
  CHECK(stalloc_last_error()[0] == '\0');
  return 0;
}
