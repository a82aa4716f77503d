/* backend.c - picks a backend's ops table by kind, and names the kinds. */
#include <string.h>

#include "backends/backend.h"

const backend_ops* st_backend_get(stalloc_backend_kind_t kind) {
  switch (kind) {
    case STALLOC_BACKEND_HOST: return &st_backend_host;
    case STALLOC_BACKEND_VIRTUAL: return &st_backend_virtual;
    case STALLOC_BACKEND_CUDA: return &st_backend_cuda;
  }
  return NULL;
}

const char* stalloc_backend_name(stalloc_backend_kind_t kind) {
  const backend_ops* ops = st_backend_get(kind);
  return ops ? ops->name : "unknown";
}

stalloc_status_t stalloc_backend_parse(const char* name, stalloc_backend_kind_t* kind) {
  if (!name || !kind) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "backend_parse: NULL argument");
  const stalloc_backend_kind_t all[] = {STALLOC_BACKEND_HOST, STALLOC_BACKEND_VIRTUAL,
                                        STALLOC_BACKEND_CUDA};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (strcmp(name, stalloc_backend_name(all[i])) == 0) {
      *kind = all[i];
      return STALLOC_OK;
    }
  }
  return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "unknown backend '%s' (expected host, virtual or cuda)", name);
}
