/* torch_shim.cpp - the optional C++ half of the PyTorch plug, built only where PyTorch's headers
 * are found (libstalloc_torch.so, linked to PyTorch's libc10). PyTorch turns a
 * c10::OutOfMemoryError thrown by an allocator into torch.cuda.OutOfMemoryError in Python (the
 * catch in torch/csrc/Exceptions.h), while a NULL from a pluggable allocator's malloc does not
 * (pytorch#133280). So malloc here is stalloc_torch_malloc that throws: c10::OutOfMemoryError
 * with stalloc's message (asked, allocated, reserved, planned) for an out-of-memory, c10::Error
 * for anything else. It also refuses CUDA graph capture into a private pool at its start, with
 * the setting that avoids it, instead of letting a capture fail halfway. Nothing here keeps
 * state: libstalloc holds it. */
#include <c10/util/Exception.h>

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

[[noreturn]] void raise_last(size_t size, int device) {
  stalloc_status_t status = STALLOC_OK;
  std::string msg = std::string("stalloc: ") + stalloc_torch_last_error(&status);
  if (status == STALLOC_ERR_OUT_OF_MEMORY)
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                msg + " (CUDA out of memory on device " + std::to_string(device) + ")");
  throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                   msg + " (allocating " + std::to_string(size) + " bytes on device " + std::to_string(device) + ")");
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
  throw c10::Error({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                   "stalloc does not serve CUDA graph capture (device " + std::to_string(device) +
                       "): torch.cuda.graph and torch.compile(mode=\"reduce-overhead\") need a private "
                       "memory pool, which stalloc's PyTorch allocator does not provide. Use "
                       "torch.compile(mode=\"max-autotune-no-cudagraphs\") or mode=\"default\", or set "
                       "torch._inductor.config.triton.cudagraphs = False.");
}

}  // extern "C"
