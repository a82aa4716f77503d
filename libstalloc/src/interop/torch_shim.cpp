/* torch_shim.cpp - the C++ half of the PyTorch plug: a malloc that throws where stalloc has no
 * block to give. PyTorch's CUDAPluggableAllocator takes a NULL from malloc as a tensor at address
 * 0 (PyTorch 2.11 on an H200 made one, and raised nothing: the seventh GPU session), so a failed
 * allocation must leave by an exception; a C function cannot throw one. Built twice from this
 * file:
 * - libstalloc_torch.so, where PyTorch's headers are found, linked to its libc10: an
 *   out-of-memory throws c10::OutOfMemoryError, which PyTorch raises as
 *   torch.cuda.OutOfMemoryError (the catch in torch/csrc/Exceptions.h), anything else c10::Error.
 *   It loads only against a PyTorch whose libc10 has the symbols it was compiled for.
 * - libstalloc_torch_generic.so (STALLOC_TORCH_GENERIC), with no PyTorch header: everything
 *   throws std::runtime_error, which PyTorch raises as RuntimeError with stalloc's message
 *   (torch_backend.oom_guard() turns it into the typed error). It loads against any PyTorch.
 * Both refuse CUDA graph capture into a private pool at its start, with the setting that
 * avoids it, instead of letting a capture fail halfway. Nothing here keeps state: libstalloc
 * holds it. */
#ifdef STALLOC_TORCH_GENERIC
#include <stdexcept>
#else
#include <c10/util/Exception.h>
#endif

#include <functional>
#include <string>
#include <utility>

#include "stalloc/stalloc.h"

/* The CUDA runtime's own spelling, so the signatures below are PyTorch's exactly without any
 * CUDA header (the CPU build of PyTorch ships none). */
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
/* c10::cuda::MempoolId_t (c10/cuda/CUDAGraphsC10Utils.h). */
typedef std::pair<unsigned long long, unsigned long long> stalloc_mempool_id;

namespace {

#ifdef STALLOC_TORCH_GENERIC
[[noreturn]] void raise_error(const std::string& msg, bool) { throw std::runtime_error(msg); }
#else
[[noreturn]] void raise_error(const std::string& msg, bool out_of_memory) {
  if (out_of_memory) throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
  throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}
#endif

[[noreturn]] void raise_last(size_t size, int device) {
  stalloc_status_t status = STALLOC_OK;
  std::string msg = std::string("stalloc: ") + stalloc_torch_last_error(&status);
  if (status == STALLOC_ERR_OUT_OF_MEMORY)
    raise_error(msg + " (CUDA out of memory on device " + std::to_string(device) + ")", true);
  raise_error(msg + " (allocating " + std::to_string(size) + " bytes on device " + std::to_string(device) + ")", false);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* stalloc_torch_shim_malloc(size_t size, int device, cudaStream_t stream) {
  void* p = stalloc_torch_malloc(size, device, stream);
  if (!p && size) raise_last(size, device);
  return p;
}

__attribute__((visibility("default"))) void stalloc_torch_shim_begin_allocate_to_pool(
    int device, stalloc_mempool_id pool, std::function<bool(cudaStream_t)> filter) {
  (void)pool;
  (void)filter;
  raise_error("stalloc does not serve CUDA graph capture (device " + std::to_string(device) +
                  "): torch.cuda.graph and torch.compile(mode=\"reduce-overhead\") need a private "
                  "memory pool, which stalloc's PyTorch allocator does not provide. Use "
                  "torch.compile(mode=\"max-autotune-no-cudagraphs\") or mode=\"default\", or set "
                  "torch._inductor.config.triton.cudagraphs = False.",
              false);
}

}  // extern "C"
