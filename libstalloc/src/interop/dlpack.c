/* dlpack.c - hands stalloc blocks to frameworks (JAX, PyTorch, CuPy) as DLPack tensors with
 * zero copy. An exporter wraps an allocator and counts the tensors it has made; each tensor's
 * deleter (called by the consumer, from any of its threads) frees the block and drops one
 * count, so the allocator stays alive until its last tensor is gone. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/allocator.h"
#include "interop/dlpack.h"

#define MAX_DIMS 64

struct stalloc_dlpack_exporter {
  stalloc_allocator_t* allocator;
  int owns_allocator;      /* destroy the allocator with the exporter */
  atomic_uint_fast64_t refs; /* 1 for the creator (until released) + 1 per live tensor */
  atomic_uint_fast64_t live; /* live tensors, for diagnostics */
};

/* One allocation per tensor: the managed tensor first (so manager_ctx == self), then the
 * exporter and the shape and strides arrays. */
typedef struct tensor_box {
  st_dl_managed_tensor managed;
  stalloc_dlpack_exporter_t* exporter;
  int64_t dims[]; /* shape[ndim] then strides[ndim] */
} tensor_box;

static void exporter_unref(stalloc_dlpack_exporter_t* e) {
  if (atomic_fetch_sub(&e->refs, 1) != 1) return;
  if (e->owns_allocator) stalloc_allocator_destroy(e->allocator);
  free(e);
}

stalloc_status_t stalloc_dlpack_exporter_create(stalloc_allocator_t* allocator,
                                                int32_t owns_allocator,
                                                stalloc_dlpack_exporter_t** exporter) {
  if (!allocator || !exporter)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_exporter_create: NULL argument");
  if (allocator->options.backend == STALLOC_BACKEND_VIRTUAL)
    return st_fail(STALLOC_ERR_UNSUPPORTED,
                   "dlpack_exporter_create: the virtual backend's memory cannot be accessed, "
                   "so it cannot back a DLPack tensor");
  stalloc_dlpack_exporter_t* e = calloc(1, sizeof *e);
  if (!e) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "dlpack_exporter_create: no host memory");
  e->allocator = allocator;
  e->owns_allocator = owns_allocator != 0;
  atomic_init(&e->refs, 1);
  atomic_init(&e->live, 0);
  *exporter = e;
  return STALLOC_OK;
}

stalloc_status_t stalloc_dlpack_exporter_release(stalloc_dlpack_exporter_t* exporter) {
  if (!exporter) return STALLOC_OK;
  exporter_unref(exporter);
  return STALLOC_OK;
}

stalloc_status_t stalloc_dlpack_exporter_live(const stalloc_dlpack_exporter_t* exporter,
                                              uint64_t* tensors) {
  if (!exporter || !tensors)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_exporter_live: NULL argument");
  *tensors = atomic_load(&((stalloc_dlpack_exporter_t*)exporter)->live);
  return STALLOC_OK;
}

/* Called by the consumer when it no longer needs the tensor; any thread. */
static void tensor_deleter(st_dl_managed_tensor* self) {
  if (!self) return;
  tensor_box* box = (tensor_box*)self->manager_ctx;
  stalloc_dlpack_exporter_t* e = box->exporter;
  /* The allocator locks internally; a failure here cannot be reported to the consumer. */
  stalloc_allocator_free(e->allocator, self->dl_tensor.data);
  atomic_fetch_sub(&e->live, 1);
  free(box);
  exporter_unref(e);
}

/* The device type the allocator's memory can be described as. */
static stalloc_status_t check_device(const stalloc_allocator_t* a, int32_t type, int32_t id) {
  switch (a->options.backend) {
    case STALLOC_BACKEND_HOST:
      if (type != ST_DL_CPU)
        return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                       "dlpack_create: host memory must be device type 1 (kDLCPU), got %d",
                       (int)type);
      if (id != 0)
        return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_create: kDLCPU needs device id 0, got %d",
                       (int)id);
      return STALLOC_OK;
    case STALLOC_BACKEND_CUDA:
      if (type != ST_DL_CUDA)
        return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                       "dlpack_create: CUDA device memory must be device type 2 (kDLCUDA), got %d",
                       (int)type);
      if (id != a->options.device)
        return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                       "dlpack_create: the allocator serves CUDA device %d, not %d",
                       (int)a->options.device, (int)id);
      return STALLOC_OK;
    default:
      return st_fail(STALLOC_ERR_UNSUPPORTED, "dlpack_create: the %s backend cannot back a tensor",
                     stalloc_backend_name(a->options.backend));
  }
}

stalloc_status_t stalloc_dlpack_create(stalloc_dlpack_exporter_t* exporter, const int64_t* shape,
                                       int32_t ndim, uint8_t dtype_code, uint8_t dtype_bits,
                                       uint16_t dtype_lanes, int32_t device_type,
                                       int32_t device_id, void** managed_tensor) {
  if (!exporter || !managed_tensor || (ndim > 0 && !shape))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_create: NULL argument");
  *managed_tensor = NULL;
  if (ndim < 0 || ndim > MAX_DIMS)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_create: ndim %d is not in [0, %d]",
                   (int)ndim, MAX_DIMS);
  if (dtype_bits == 0 || dtype_bits % 8 || dtype_lanes == 0 || dtype_code > ST_DL_BOOL)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT,
                   "dlpack_create: bad dtype (code %u, bits %u, lanes %u): bits must be a "
                   "non-zero multiple of 8, lanes >= 1, code <= 6",
                   (unsigned)dtype_code, (unsigned)dtype_bits, (unsigned)dtype_lanes);
  stalloc_status_t s = check_device(exporter->allocator, device_type, device_id);
  if (s != STALLOC_OK) return s;

  /* bytes = prod(shape) * bits/8 * lanes, with overflow checks. */
  uint64_t bytes = (uint64_t)(dtype_bits / 8) * dtype_lanes;
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_create: shape[%d] = %lld is negative",
                     (int)i, (long long)shape[i]);
    if (shape[i] && bytes > UINT64_MAX / (uint64_t)shape[i])
      return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_create: the tensor's size overflows");
    bytes *= (uint64_t)shape[i];
  }

  tensor_box* box = calloc(1, sizeof *box + 2 * (size_t)ndim * sizeof(int64_t));
  if (!box) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "dlpack_create: no host memory");
  /* An empty tensor still gets a real block: consumers may reject a NULL data pointer. */
  void* data = NULL;
  s = stalloc_allocator_alloc(exporter->allocator, bytes ? bytes : 1, device_id, 0, &data);
  if (s != STALLOC_OK) {
    free(box);
    return s; /* the allocator has set the detail */
  }
  int64_t* dims = box->dims;
  int64_t* strides = box->dims + ndim;
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    dims[i] = shape[i];
    strides[i] = stride;
    stride *= shape[i] ? shape[i] : 1;
  }
  box->exporter = exporter;
  box->managed.manager_ctx = box;
  box->managed.deleter = tensor_deleter;
  st_dl_tensor* t = &box->managed.dl_tensor;
  t->data = data;
  t->device.device_type = device_type;
  t->device.device_id = device_id;
  t->ndim = ndim;
  t->dtype.code = dtype_code;
  t->dtype.bits = dtype_bits;
  t->dtype.lanes = dtype_lanes;
  t->shape = ndim ? dims : NULL;
  t->strides = ndim ? strides : NULL;
  t->byte_offset = 0;
  atomic_fetch_add(&exporter->refs, 1);
  atomic_fetch_add(&exporter->live, 1);
  *managed_tensor = &box->managed;
  return STALLOC_OK;
}

stalloc_status_t stalloc_dlpack_data(const void* managed_tensor, void** data, uint64_t* bytes) {
  if (!managed_tensor || !data || !bytes)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_data: NULL argument");
  const st_dl_managed_tensor* m = managed_tensor;
  if (m->deleter != tensor_deleter)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "dlpack_data: not a tensor made by stalloc");
  const st_dl_tensor* t = &m->dl_tensor;
  uint64_t n = (uint64_t)(t->dtype.bits / 8) * t->dtype.lanes;
  for (int32_t i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
  *data = t->data;
  *bytes = n;
  return STALLOC_OK;
}

stalloc_status_t stalloc_dlpack_delete(void* managed_tensor) {
  if (!managed_tensor) return STALLOC_OK;
  st_dl_managed_tensor* m = managed_tensor;
  if (m->deleter) m->deleter(m);
  return STALLOC_OK;
}
