/* test_torch_shim.cpp - the plug's malloc throws where stalloc has no block, never returns NULL
 * for a request: libstalloc_torch's throws what PyTorch turns into torch.cuda.OutOfMemoryError
 * (c10::OutOfMemoryError) with stalloc's figures and other failures as c10::Error;
 * libstalloc_torch_generic's (built with STALLOC_TORCH_GENERIC) throws std::runtime_error for
 * both, which PyTorch raises as RuntimeError. Graph capture into a private pool is refused with
 * the setting that avoids it. */
#ifdef STALLOC_TORCH_GENERIC
#include <stdexcept>
typedef std::runtime_error oom_error;
typedef std::runtime_error other_error;
static std::string text(const std::exception& e) { return e.what(); }
#else
#include <c10/util/Exception.h>
typedef c10::OutOfMemoryError oom_error;
typedef c10::Error other_error;
static std::string text(const c10::Error& e) { return e.what_without_backtrace(); }
#endif

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
  } catch (const oom_error& e) {
    std::string m = text(e);
    CHECK(has(m, "out of memory") && has(m, "asked 67108864 bytes") && has(m, "allocated") && has(m, "reserved") &&
          has(m, "planned"));
    CHECK(has(m, "device 0"));
    oom = true;
  }
  CHECK(oom);

  bool other = false;
  try {
    stalloc_torch_shim_malloc(100, 3, nullptr); /* no allocator there: an error, not an OOM */
#ifndef STALLOC_TORCH_GENERIC
  } catch (const oom_error&) {
    CHECK(!"a missing allocator is not an out-of-memory");
#endif
  } catch (const other_error& e) {
    CHECK(has(text(e), "no stalloc allocator is registered for device 3"));
    CHECK(text(e).find("out of memory") == std::string::npos);
    other = true;
  }
  CHECK(other);

  bool refused = false;
  try {
    stalloc_torch_shim_begin_allocate_to_pool(0, {1, 0}, [](cudaStream_t) { return true; });
  } catch (const other_error& e) {
    CHECK(has(text(e), "reduce-overhead") && has(text(e), "max-autotune-no-cudagraphs"));
    refused = true;
  }
  CHECK(refused);

  stalloc_torch_free(p, 1000, 0, nullptr);
  CHECK(stalloc_torch_register(0, nullptr) == STALLOC_OK);
  CHECK(stalloc_allocator_destroy(a) == STALLOC_OK);
  std::puts("ok");
  return 0;
}
