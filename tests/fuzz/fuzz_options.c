/* fuzz_options.c - libFuzzer target for the option parser (runtime/options.c: sizes such as
 * "512MiB", integers, backend names through stalloc_backend_parse) and for creating an
 * allocator from whatever options it yields (runtime/allocator.c's checks of them).
 *
 * Input: up to 8 values separated by NUL bytes, one per STALLOC_<NAME> variable in the order
 * below; an empty value unsets it. The options' record path is dropped (the fuzzer must not
 * write files where it pleases) and the CUDA backend becomes the virtual one (no driver here). */
#include <fcntl.h>

#include "fuzz_input.h"

static const char* const VARS[] = {
    "STALLOC_BACKEND", "STALLOC_DEVICE", "STALLOC_ALIGNMENT", "STALLOC_MEMORY_LIMIT",
    "STALLOC_VIRTUAL_CAPACITY", "STALLOC_RECORD_PATH", "STALLOC_TINY_ALIGNMENT",
    "STALLOC_GROWABLE_POOL"};
enum { NVARS = sizeof VARS / sizeof VARS[0] };

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  char* text = malloc(size + 1);
  FUZZ_ASSERT(text);
  memcpy(text, data, size);
  text[size] = '\0';
  const char* value[NVARS] = {0};
  size_t at = 0;
  for (int i = 0; i < NVARS && at <= size; i++) {
    value[i] = text + at;
    at += strlen(text + at) + 1;
  }
  for (int i = 0; i < NVARS; i++) {
    if (value[i] && *value[i]) setenv(VARS[i], value[i], 1);
    else unsetenv(VARS[i]);
  }
  /* The parser says "ignoring X=..." on stderr for each bad value: keep libFuzzer's log
   * readable by sending those lines to /dev/null. */
  int saved = dup(2), null = open("/dev/null", O_WRONLY);
  if (saved >= 0 && null >= 0) dup2(null, 2);
  stalloc_options_t o;
  stalloc_options_init(&o);
  if (saved >= 0) dup2(saved, 2), close(saved);
  if (null >= 0) close(null);

  stalloc_backend_kind_t kind;
  if (value[0] && stalloc_backend_parse(value[0], &kind) == STALLOC_OK)
    FUZZ_ASSERT(strcmp(stalloc_backend_name(kind), value[0]) == 0 || kind == o.backend);
  FUZZ_ASSERT(o.struct_size == sizeof o && o.device >= 0);
  o.record_path = NULL;
  if (o.backend == STALLOC_BACKEND_CUDA) o.backend = STALLOC_BACKEND_VIRTUAL;
  if (o.virtual_capacity > (1ull << 40)) o.virtual_capacity = 1ull << 40;
  if (o.backend == STALLOC_BACKEND_HOST && o.memory_limit == 0) o.memory_limit = 64u << 20;
  stalloc_allocator_t* a = NULL;
  if (stalloc_allocator_create(&o, &a) == STALLOC_OK) {
    void* p[4] = {0};
    const uint64_t sizes[4] = {1, 512, 4096, 3u << 20};
    for (int i = 0; i < 4; i++) {
      if (stalloc_allocator_alloc(a, sizes[i], 0, 0, &p[i]) == STALLOC_OK)
        FUZZ_ASSERT(p[i] && (uintptr_t)p[i] % o.alignment == 0);
    }
    for (int i = 0; i < 4; i++)
      if (p[i]) FUZZ_ASSERT(stalloc_allocator_free(a, p[i]) == STALLOC_OK);
    FUZZ_ASSERT(stalloc_allocator_destroy(a) == STALLOC_OK);
  }
  free(text);
  return 0;
}
