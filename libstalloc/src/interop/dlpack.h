/* dlpack.h - the DLPack structs (legacy, unversioned ABI: the "dltensor" capsule that
 * jax.dlpack.from_dlpack asks for when it calls __dlpack__ without max_version), declared
 * from the public DLPack specification (dmlc/dlpack, include/dlpack/dlpack.h, v0.8 layout).
 * Only dlpack.c and its test use them; the public header hands the tensor out as void*. */
#ifndef STALLOC_DLPACK_H
#define STALLOC_DLPACK_H

#include <stdint.h>

/* DLDeviceType values used here (the full list is in the specification). */
enum { ST_DL_CPU = 1, ST_DL_CUDA = 2, ST_DL_CUDA_HOST = 3 };
/* DLDataTypeCode values. */
enum { ST_DL_INT = 0, ST_DL_UINT = 1, ST_DL_FLOAT = 2, ST_DL_OPAQUE = 3, ST_DL_BFLOAT = 4,
       ST_DL_COMPLEX = 5, ST_DL_BOOL = 6 };

typedef struct st_dl_device {
  int32_t device_type; /* DLDeviceType: a C enum, int-sized */
  int32_t device_id;
} st_dl_device;

typedef struct st_dl_data_type {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} st_dl_data_type;

typedef struct st_dl_tensor {
  void* data;
  st_dl_device device;
  int32_t ndim;
  st_dl_data_type dtype;
  int64_t* shape;
  int64_t* strides; /* in elements; NULL = compact row-major (we always fill it) */
  uint64_t byte_offset;
} st_dl_tensor;

typedef struct st_dl_managed_tensor {
  st_dl_tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct st_dl_managed_tensor* self);
} st_dl_managed_tensor;

#endif
