/* cuda_driver.h - the few CUDA driver API types, constants and signatures the cuda backend
 * uses, declared here so stalloc builds without a CUDA toolkit. Values and layouts are those
 * of cuda.h (driver API 12.x/13.x; the ABI of these has not changed since CUDA 10.2);
 * tests/c/backends/test_backend_cuda.c checks them against the real cuda.h when one is installed.
 * Names carry a cu_ / ST_CU_ prefix so this header and cuda.h can be included together. */
#ifndef STALLOC_CUDA_DRIVER_H
#define STALLOC_CUDA_DRIVER_H

#include <stddef.h>

typedef int cu_result; /* CUresult */
typedef int cu_device; /* CUdevice */
typedef struct cu_ctx_opaque* cu_context;
typedef struct cu_stream_opaque* cu_stream;
typedef struct cu_event_opaque* cu_event;
typedef unsigned long long cu_deviceptr;     /* CUdeviceptr (64-bit builds) */
typedef unsigned long long cu_mem_handle;    /* CUmemGenericAllocationHandle */

enum {
  ST_CU_SUCCESS = 0,
  ST_CU_ERROR_INVALID_VALUE = 1,
  ST_CU_ERROR_OUT_OF_MEMORY = 2,
  ST_CU_ERROR_NOT_INITIALIZED = 3,
  ST_CU_ERROR_STUB_LIBRARY = 34,
  ST_CU_ERROR_DEVICE_UNAVAILABLE = 46,
  ST_CU_ERROR_NO_DEVICE = 100,
  ST_CU_ERROR_INVALID_DEVICE = 101,
  ST_CU_ERROR_INVALID_CONTEXT = 201,
  ST_CU_ERROR_NOT_READY = 600,
  ST_CU_ERROR_ILLEGAL_ADDRESS = 700,
  ST_CU_ERROR_NOT_SUPPORTED = 801,
  ST_CU_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  ST_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
  ST_CU_ERROR_UNKNOWN = 999,
};

enum {
  ST_CU_EVENT_DISABLE_TIMING = 0x2,
  ST_CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
  ST_CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
  ST_CU_MEM_LOCATION_TYPE_DEVICE = 0x1,
  ST_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
  ST_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
  ST_CU_MEM_HANDLE_TYPE_NONE = 0x0,
};

typedef struct cu_mem_location { /* CUmemLocation */
  int type;
  int id;
} cu_mem_location;

typedef struct cu_mem_allocation_prop { /* CUmemAllocationProp */
  int type;
  int requested_handle_types;
  cu_mem_location location;
  void* win32_handle_meta_data;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
} cu_mem_allocation_prop;

typedef struct cu_mem_access_desc { /* CUmemAccessDesc */
  cu_mem_location location;
  int flags;
} cu_mem_access_desc;

/* The entry points: X(name, parameters, symbol, required). symbol is the exported name (the
 * _v2 one where the driver exports two); the virtual memory entry points (required 0) are
 * optional, their absence (an old driver) only turns the growable path off; one with required
 * 2 only turns its own use off. All return a cu_result. */
#define ST_CU_FUNCTIONS(X)                                                                      \
  X(cuInit, (unsigned), "cuInit", 1)                                                            \
  X(cuGetErrorName, (cu_result, const char**), "cuGetErrorName", 1)                             \
  X(cuGetErrorString, (cu_result, const char**), "cuGetErrorString", 1)                         \
  X(cuDeviceGet, (cu_device*, int), "cuDeviceGet", 1)                                           \
  X(cuDeviceGetAttribute, (int*, int, cu_device), "cuDeviceGetAttribute", 1)                    \
  X(cuDevicePrimaryCtxRetain, (cu_context*, cu_device), "cuDevicePrimaryCtxRetain", 1)          \
  X(cuDevicePrimaryCtxRelease, (cu_device), "cuDevicePrimaryCtxRelease_v2", 1)                  \
  X(cuCtxGetCurrent, (cu_context*), "cuCtxGetCurrent", 1)                                       \
  X(cuCtxSetCurrent, (cu_context), "cuCtxSetCurrent", 1)                                        \
  X(cuCtxPushCurrent, (cu_context), "cuCtxPushCurrent_v2", 1)                                   \
  X(cuCtxPopCurrent, (cu_context*), "cuCtxPopCurrent_v2", 1)                                    \
  X(cuCtxGetDevice, (cu_device*), "cuCtxGetDevice", 1)                                          \
  X(cuCtxSynchronize, (void), "cuCtxSynchronize", 1)                                            \
  X(cuMemAlloc, (cu_deviceptr*, size_t), "cuMemAlloc_v2", 1)                                    \
  X(cuMemFree, (cu_deviceptr), "cuMemFree_v2", 1)                                               \
  X(cuMemGetInfo, (size_t*, size_t*), "cuMemGetInfo_v2", 1)                                     \
  X(cuEventCreate, (cu_event*, unsigned), "cuEventCreate", 1)                                   \
  X(cuEventRecord, (cu_event, cu_stream), "cuEventRecord", 1)                                   \
  X(cuEventQuery, (cu_event), "cuEventQuery", 1)                                                \
  X(cuEventSynchronize, (cu_event), "cuEventSynchronize", 1)                                    \
  X(cuEventDestroy, (cu_event), "cuEventDestroy_v2", 1)                                         \
  X(cuStreamSynchronize, (cu_stream), "cuStreamSynchronize", 1)                                 \
  X(cuMemAddressReserve, (cu_deviceptr*, size_t, size_t, cu_deviceptr, unsigned long long),     \
    "cuMemAddressReserve", 0)                                                                   \
  X(cuMemAddressFree, (cu_deviceptr, size_t), "cuMemAddressFree", 0)                            \
  X(cuMemCreate, (cu_mem_handle*, size_t, const cu_mem_allocation_prop*, unsigned long long),   \
    "cuMemCreate", 0)                                                                           \
  X(cuMemRelease, (cu_mem_handle), "cuMemRelease", 0)                                           \
  X(cuMemMap, (cu_deviceptr, size_t, size_t, cu_mem_handle, unsigned long long), "cuMemMap", 0) \
  X(cuMemUnmap, (cu_deviceptr, size_t), "cuMemUnmap", 0)                                        \
  X(cuMemSetAccess, (cu_deviceptr, size_t, const cu_mem_access_desc*, size_t),                  \
    "cuMemSetAccess", 0)                                                                        \
  X(cuMemGetAllocationGranularity, (size_t*, const cu_mem_allocation_prop*, int),               \
    "cuMemGetAllocationGranularity", 0)                                                         \
  X(cuMemRetainAllocationHandle, (cu_mem_handle*, void*), "cuMemRetainAllocationHandle", 2)

#endif
