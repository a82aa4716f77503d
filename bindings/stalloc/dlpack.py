"""stalloc blocks as DLPack tensors, with zero copy, for any DLPack consumer (JAX, torch,
numpy, CuPy): the allocator that makes them and the tensor object with ``__dlpack__``.

The tensor, its C deleter and the reference count that keeps the allocator alive are in
libstalloc (interop/dlpack.c): a consumer may drop a buffer from any of its threads, so no
Python runs then. This module only builds the legacy "dltensor" capsule. Framework glue (JAX's
default device, its zero-copy check) is in stalloc.integrations; see docs/jax.md.
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ._lib import ffi, lib
from .allocator import Allocator, Stats, make_options
from .errors import check

__all__ = ["DL_CPU", "DL_CUDA", "DLPackAllocator", "StallocTensor", "dlpack_allocator_for"]

DL_CPU, DL_CUDA = 1, 2
# numpy dtype kind -> DLDataTypeCode; bfloat16 (ml_dtypes, kind 'V') is matched by name.
_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_DL_BFLOAT = 4


# ---- the PyCapsule, built with the CPython API through ctypes --------------------------------
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
# The capsule keeps a pointer to its name: a buffer that lives as long as the module.
_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A consumer renames the capsule "used_dltensor" and then owns the tensor (it calls the
    # deleter itself). Only a capsule nobody consumed still owns it and must delete it.
    if _api.PyCapsule_IsValid(capsule, _CAPSULE_NAME):
        lib.stalloc_dlpack_delete(ffi.cast("void*", _api.PyCapsule_GetPointer(capsule, _CAPSULE_NAME)))


_DESTRUCTOR_PTR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


# ---- the allocator ------------------------------------------------------------------------------
class DLPackAllocator:
    """A stalloc allocator whose blocks are handed out as DLPack tensors (to JAX, torch, numpy,
    CuPy). ``stalloc.integrations.jax_backend.JaxAllocator`` is this class.

    Either it makes and owns its own libstalloc allocator (``allocator=None``; the options are
    those of ``stalloc.Allocator``), which libstalloc destroys only once this object is closed
    *and* JAX has dropped the last array in it, so no order of teardown can free memory XLA
    still uses; or it wraps a ``stalloc.Allocator`` you own, which must then stay open while
    any array made from it exists (this object keeps a reference, so garbage collection never
    closes it early, but ``close()`` would)."""

    def __init__(self, allocator: Allocator | None = None, *, backend: str | None = None,
                 device: int | None = None, alignment: int | None = None,
                 memory_limit: int | None = None):
        self._lock = threading.Lock()
        self._exporter = None
        if allocator is None:
            opts = make_options(backend, device, alignment, memory_limit)
            out = ffi.new("stalloc_allocator_t**")
            check(lib.stalloc_allocator_create(opts, out))
            handle, owns, self._user = out[0], 1, None
            self.backend = ffi.string(lib.stalloc_backend_name(opts.backend)).decode()
            self.device = int(opts.device)
        else:
            handle, owns, self._user = allocator._h(), 0, allocator
            self.backend, self.device = allocator.backend, allocator.device
        exp = ffi.new("stalloc_dlpack_exporter_t**")
        rc = lib.stalloc_dlpack_exporter_create(handle, owns, exp)
        if rc != lib.STALLOC_OK and owns:
            lib.stalloc_allocator_destroy(handle)
        check(rc)
        self._handle, self._exporter = handle, exp[0]
        self.device_type = DL_CUDA if self.backend == "cuda" else DL_CPU

    def _exp(self):
        if self._exporter is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._exporter

    def stats(self) -> Stats:
        self._exp()
        s = ffi.new("stalloc_stats_t*")
        lib.stalloc_stats_init(s)
        check(lib.stalloc_allocator_stats(self._handle, s))
        return Stats(**{f: int(getattr(s, f)) for f in Stats.__dataclass_fields__})

    def live_tensors(self) -> int:
        """Arrays made here that JAX (or anyone) has not yet dropped."""
        n = ffi.new("uint64_t*")
        check(lib.stalloc_dlpack_exporter_live(self._exp(), n))
        return int(n[0])

    def step(self, n: int) -> None:
        """Marks the start of training step n (in the stats and in a recorded trace)."""
        self._exp()
        check(lib.stalloc_allocator_step_begin(self._handle, n))

    def record_start(self, path) -> None:
        """Writes every alloc and free of this allocator to a stalloc trace at path."""
        self._exp()
        check(lib.stalloc_allocator_record_start(self._handle, os.fsencode(os.fspath(path))))

    def record_stop(self) -> None:
        self._exp()
        check(lib.stalloc_allocator_record_stop(self._handle))

    def tensor(self, shape, dtype) -> "StallocTensor":
        return StallocTensor(self, shape, dtype)

    def close(self) -> None:
        """Drops this object's hold; the memory goes once JAX has dropped every array too."""
        with self._lock:
            exp, self._exporter = self._exporter, None
        if exp is not None:
            lib.stalloc_dlpack_exporter_release(exp)

    def __del__(self):
        if getattr(self, "_exporter", None) is not None:
            lib.stalloc_dlpack_exporter_release(self._exporter)


_wrapped: dict[int, DLPackAllocator] = {}  # id(stalloc.Allocator) -> its wrapper, kept alive


def dlpack_allocator_for(allocator) -> DLPackAllocator:
    """A DLPackAllocator as is, or the one wrapper (made once, kept) of a stalloc.Allocator."""
    if isinstance(allocator, DLPackAllocator):
        return allocator
    if isinstance(allocator, Allocator):
        w = _wrapped.get(id(allocator))
        if w is None or w._user is not allocator:
            w = _wrapped[id(allocator)] = DLPackAllocator(allocator)
        return w
    raise TypeError(f"allocator must be a JaxAllocator or a stalloc.Allocator, not {type(allocator).__name__}")


# ---- the DLPack producer ------------------------------------------------------------------------
def _dl_dtype(dtype: np.dtype) -> tuple[int, int]:
    if dtype.name == "bfloat16":
        return _DL_BFLOAT, 16
    code = _DL_CODES.get(dtype.kind)
    if code is None or dtype.itemsize == 0:
        raise ValueError(f"stalloc: dtype {dtype} has no DLPack equivalent")
    return code, dtype.itemsize * 8


class StallocTensor:
    """A block of stalloc memory shaped as a tensor, with ``__dlpack__`` and
    ``__dlpack_device__`` so that JAX (or torch, numpy, CuPy) can take it with zero copy.
    It can be handed out once; until then it owns the block, afterwards the consumer does."""

    def __init__(self, allocator: DLPackAllocator, shape, dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        code, bits = _dl_dtype(self.dtype)
        self.allocator = allocator  # keeps a wrapped user allocator referenced
        out = ffi.new("void**")
        check(lib.stalloc_dlpack_create(allocator._exp(), ffi.new("int64_t[]", self.shape or [0]),
                                        len(self.shape), code, bits, 1, allocator.device_type,
                                        allocator.device if allocator.device_type == DL_CUDA else 0,
                                        out))
        self._managed = out[0]
        data, nbytes = ffi.new("void**"), ffi.new("uint64_t*")
        check(lib.stalloc_dlpack_data(self._managed, data, nbytes))
        self.data_ptr = int(ffi.cast("uintptr_t", data[0]))
        self.nbytes = int(nbytes[0])

    def numpy(self) -> np.ndarray:
        """A writable numpy view of host memory, valid only before the tensor is handed out."""
        if self._managed is None:
            raise BufferError("stalloc: the tensor was handed out; its memory belongs to the consumer")
        if self.allocator.device_type != DL_CPU:
            raise ValueError("stalloc: only host-backend tensors can be viewed from numpy")
        buf = ffi.buffer(ffi.cast("char*", self.data_ptr), self.nbytes)
        return np.frombuffer(buf, dtype=self.dtype).reshape(self.shape)

    def __dlpack_device__(self) -> tuple[int, int]:
        a = self.allocator
        return (a.device_type, a.device if a.device_type == DL_CUDA else 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # The producer is never asked to copy: the whole point is to share the block.
        if copy:
            raise BufferError("stalloc: __dlpack__(copy=True) is not supported; the tensor is shared")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"stalloc: the tensor lives on {self.__dlpack_device__()}, not {dl_device}")
        if self._managed is None:
            raise BufferError("stalloc: a StallocTensor can be handed out only once")
        # Legacy "dltensor" capsule: what jax.dlpack.from_dlpack asks for (no max_version),
        # and what every consumer accepts. Nothing stream-ordered happened on the block yet.
        managed, self._managed = self._managed, None
        return _api.PyCapsule_New(int(ffi.cast("uintptr_t", managed)), _CAPSULE_NAME, _DESTRUCTOR_PTR)

    def __del__(self):
        if getattr(self, "_managed", None) is not None:
            lib.stalloc_dlpack_delete(self._managed)
            self._managed = None
