/* test_torch_shim.cpp - libstalloc_torch's malloc throws what PyTorch turns into
 * torch.cuda.OutOfMemoryError (c10::OutOfMemoryError) with stalloc's figures, other failures as
 * c10::Error, and graph capture into a private pool is refused with the setting that avoids it. */
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "stalloc/stalloc.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
extern "C" void* stalloc_torch_shim_malloc(size_t size, int device, cudaStream_t stream);
extern "C" void stalloc_torch_shim_begin_allocate_to_pool(int device, std::pair<unsigned long long, unsigned long long> pool,
                                                          std::function<bool(cudaStream_t)> filter);

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

static bool has(const std::string& text, const char* part) {
  if (text.find(part) != std::string::npos) return true;
  std::fprintf(stderr, "message \"%s\" lacks \"%s\"\n", text.c_str(), part);
  return false;
}

int main() {
  stalloc_options_t o;
  stalloc_options_init(&o);
  o.memory_limit = 4u << 20;
  stalloc_allocator_t* a = nullptr;
  CHECK(stalloc_allocator_create(&o, &a) == STALLOC_OK);
  CHECK(stalloc_torch_register(0, a) == STALLOC_OK);

  void* p = stalloc_torch_shim_malloc(1000, 0, nullptr); /* success: the block itself */
  CHECK(p != nullptr);
  CHECK(stalloc_torch_shim_malloc(0, 0, nullptr) == nullptr); /* size 0: NULL, no throw */

  bool oom = false;
  try {
    stalloc_torch_shim_malloc(64u << 20, 0, nullptr);
  } catch (const c10::OutOfMemoryError& e) {
    std::string m = e.what_without_backtrace();
    CHECK(has(m, "asked 67108864 bytes") && has(m, "allocated") && has(m, "reserved") && has(m, "planned"));
    CHECK(has(m, "device 0"));
    oom = true;
  }
  CHECK(oom);

  bool other = false;
  try {
    stalloc_torch_shim_malloc(100, 3, nullptr); /* no allocator there: an error, not an OOM */
  } catch (const c10::OutOfMemoryError&) {
    CHECK(!"a missing allocator is not an out-of-memory");
  } catch (const c10::Error& e) {
    CHECK(has(e.what_without_backtrace(), "no stalloc allocator is registered for device 3"));
    other = true;
  }
  CHECK(other);

  bool refused = false;
  try {
    stalloc_torch_shim_begin_allocate_to_pool(0, {1, 0}, [](cudaStream_t) { return true; });
  } catch (const c10::Error& e) {
    CHECK(has(e.what_without_backtrace(), "reduce-overhead") && has(e.what_without_backtrace(), "max-autotune-no-cudagraphs"));
    refused = true;
  }
  CHECK(refused);

  stalloc_torch_free(p, 1000, 0, nullptr);
  CHECK(stalloc_torch_register(0, nullptr) == STALLOC_OK);
  CHECK(stalloc_allocator_destroy(a) == STALLOC_OK);
  std::puts("ok");
  return 0;
}
