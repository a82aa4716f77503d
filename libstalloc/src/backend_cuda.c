/* backend_cuda.c - device memory through the CUDA driver API, loaded at run time.
 * Until the driver path lands (its own issue), creation reports that no CUDA driver is
 * usable, so every build links and loads on machines without a GPU. */
#include <dlfcn.h>

#include "backend.h"

static stalloc_status_t cuda_create(const stalloc_options_t* options, void** state, backend_caps* caps) {
  (void)options;
  (void)state;
  (void)caps;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return st_fail(STALLOC_ERR_NO_DEVICE, "cuda backend: no CUDA driver (libcuda.so.1 not loadable: %s)", dlerror());
  dlclose(lib);
  return st_fail(STALLOC_ERR_UNSUPPORTED, "cuda backend: not built into this version of stalloc");
}

const backend_ops st_backend_cuda = {
    .name = "cuda",
    .create = cuda_create,
};
