/* test_torch_plug.c - the PyTorch-signature entry points: per-device registration, errors kept
 * for the adapter, and bad frees counted instead of crashing. */
#include <string.h>

#include "check.h"

int main(void) {
  stalloc_status_t status;
  CHECK(stalloc_torch_malloc(100, 0, NULL) == NULL); /* nothing registered */
  CHECK(strstr(stalloc_torch_last_error(&status), "no stalloc allocator") != NULL);
  CHECK(status == STALLOC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(stalloc_torch_register(64, NULL), STALLOC_ERR_INVALID_ARGUMENT);

  stalloc_options_t o;
  stalloc_options_init(&o);
  o.memory_limit = 8 << 20;
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  CHECK_OK(stalloc_torch_register(0, a));
  void* stream = (void*)0x1234;
  void* p = stalloc_torch_malloc(1000, 0, stream);
  CHECK(p != NULL && (uintptr_t)p % 512 == 0);
  memset(p, 7, 1000);
  CHECK(stalloc_torch_malloc(100, 1, stream) == NULL); /* device 1 has none */
  CHECK(stalloc_torch_malloc((size_t)64 << 20, 0, stream) == NULL);
  CHECK(strstr(stalloc_torch_last_error(&status), "out of memory") != NULL);
  CHECK(status == STALLOC_ERR_OUT_OF_MEMORY);

  stalloc_torch_free(p, 999, 0, stream); /* wrong size: refused, counted, nothing freed */
  CHECK(stalloc_torch_failed_frees() == 1);
  size_t size;
  CHECK_OK(stalloc_allocator_block_size(a, p, &size));
  stalloc_torch_free(p, 1000, 0, stream);
  stalloc_torch_free(p, 1000, 0, stream); /* double free: counted */
  CHECK(stalloc_torch_failed_frees() == 2);
  CHECK(strstr(stalloc_torch_last_error(NULL), "already freed") != NULL);
  stalloc_stats_t s;
  stalloc_stats_init(&s);
  CHECK_OK(stalloc_allocator_stats(a, &s));
  CHECK(s.active_blocks == 0 && s.alloc_count == 1 && s.free_count == 1);
  CHECK_OK(stalloc_torch_register(0, NULL));
  CHECK_OK(stalloc_allocator_destroy(a));
  return 0;
}
