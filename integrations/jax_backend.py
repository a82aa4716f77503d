"""JAX arrays in stalloc memory, with zero copy through DLPack; XLA's allocator settings.

    from stalloc.integrations import jax_backend
    w = jax_backend.asarray(np.ones((256, 256), np.float32))   # stalloc bytes, seen by JAX
    x = jax_backend.empty((8, 256), "float32")
    print(jax_backend.default_allocator().stats())

The allocator and the DLPack tensors are stalloc.dlpack's (framework-neutral); this adapter
picks the allocator for JAX's default device, hands tensors to JAX and checks that JAX really
did not copy, and sets XLA's own allocator options. jax is imported lazily: importing this
module never needs it. See docs/jax.md.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

import numpy as np

from ..dlpack import DL_CPU, DLPackAllocator, StallocTensor, dlpack_allocator_for

# The adapter's name for the allocator, kept for its users.
JaxAllocator = DLPackAllocator


class ZeroCopyError(RuntimeError):
    """JAX copied the data although zero copy was asked for."""


def _jax():
    try:
        import jax
    except ImportError as e:
        raise ImportError("stalloc.integrations.jax_backend needs jax: pip install jax") from e
    return jax


_default = None
_default_lock = threading.Lock()


def default_allocator() -> JaxAllocator:
    """The module's allocator: the host backend when JAX's default device is a CPU, the cuda
    backend on the default GPU's ordinal when it is a GPU."""
    global _default
    with _default_lock:
        if _default is None:
            dev = _jax().devices()[0]
            if dev.platform == "gpu" or dev.platform == "cuda":
                try:
                    _default = JaxAllocator(backend="cuda", device=dev.local_hardware_id)
                except Exception as e:
                    raise RuntimeError(
                        f"stalloc: JAX runs on {dev}, but stalloc's cuda backend could not be "
                        f"created ({e}); pass allocator=JaxAllocator(...) explicitly") from e
            elif dev.platform == "cpu":
                _default = JaxAllocator(backend="host")
            else:
                raise RuntimeError(f"stalloc: no stalloc backend for JAX's {dev.platform} devices")
        return _default


def _resolve(allocator) -> JaxAllocator:
    return default_allocator() if allocator is None else dlpack_allocator_for(allocator)


def buffer_pointer(arr) -> int:
    """The device address of a single-device jax.Array's buffer."""
    return int(arr.addressable_data(0).unsafe_buffer_pointer())


def to_jax(tensor: StallocTensor, zero_copy: bool = True):
    """Hands a StallocTensor to JAX. With zero_copy, JAX is told not to copy (copy=False) and
    the result's buffer address is checked against the block's: ZeroCopyError if they differ."""
    jax = _jax()
    ptr = tensor.data_ptr
    try:
        arr = jax.dlpack.from_dlpack(tensor, copy=False if zero_copy else None)
    except (ValueError, RuntimeError) as e:
        if zero_copy:
            raise ZeroCopyError(f"stalloc: JAX refused to take the block at {ptr:#x} without a copy: {e}") from e
        raise
    if zero_copy and buffer_pointer(arr) != ptr:
        raise ZeroCopyError(f"stalloc: JAX copied the block at {ptr:#x} to {buffer_pointer(arr):#x} "
                            f"(dtype {tensor.dtype}, shape {tensor.shape})")
    return arr


def _canonical(dtype) -> np.dtype:
    # JAX narrows 64-bit types unless jax_enable_x64; allocate what JAX will keep, or it copies.
    return np.dtype(_jax().dtypes.canonicalize_dtype(np.dtype(dtype)))


def empty(shape, dtype="float32", allocator=None, zero_copy: bool = True):
    """An uninitialised jax.Array whose buffer is a stalloc block."""
    return to_jax(_resolve(allocator).tensor(shape, _canonical(dtype)), zero_copy)


def asarray(x, zero_copy: bool = True, allocator=None, dtype=None):
    """Copies x (numpy or jax array, or anything np.asarray takes) once into stalloc memory and
    hands it to JAX by DLPack with zero copy."""
    a = _resolve(allocator)
    src = np.asarray(x)
    t = a.tensor(src.shape, _canonical(dtype or src.dtype))
    if a.device_type != DL_CPU:
        # Filling device memory needs a host-to-device copy that libstalloc does not offer yet.
        raise NotImplementedError("stalloc: asarray into the cuda backend is not supported yet; "
                                  "use empty() and compute into it")
    np.copyto(t.numpy(), src, casting="same_kind" if dtype is None else "unsafe")
    return to_jax(t, zero_copy)


def tree_asarray(tree, zero_copy: bool = True, allocator=None):
    """asarray over every leaf of a pytree (parameters, optimizer state)."""
    jax = _jax()
    return jax.tree_util.tree_map(lambda v: asarray(v, zero_copy, allocator), tree)


# ---- XLA's own allocator ---------------------------------------------------------------------
def configure_xla_memory(fraction: float | None = None, preallocate: bool = False) -> dict:
    """Sets XLA's GPU client allocator options, which JAX reads once when it creates its
    backend: XLA_PYTHON_CLIENT_PREALLOCATE (False: XLA grows its pool on demand instead of
    taking 75% of the GPU at start, leaving room for stalloc) and, if given,
    XLA_PYTHON_CLIENT_MEM_FRACTION (the share of GPU memory XLA may take, in (0, 1]).
    Returns the variables set. Warns if JAX's backends already exist (then it is too late)."""
    if fraction is not None and not (0.0 < float(fraction) <= 1.0):
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "true" if preallocate else "false"}
    if fraction is not None:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{float(fraction):.4g}"
    if "jax" in sys.modules:
        try:
            from jax._src import xla_bridge
            started = xla_bridge.backends_are_initialized()
        except (ImportError, AttributeError):
            started = True  # cannot tell: assume the worst
        if started:
            warnings.warn("stalloc: JAX's backend is already initialised; XLA memory settings take "
                          "effect only in a new process (call configure_xla_memory before any JAX "
                          "computation)", RuntimeWarning, stacklevel=2)
    os.environ.update(env)
    return env


__all__ = ["JaxAllocator", "StallocTensor", "ZeroCopyError", "default_allocator", "empty", "asarray",
           "tree_asarray", "to_jax", "buffer_pointer", "configure_xla_memory"]
