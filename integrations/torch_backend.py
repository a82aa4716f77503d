"""stalloc as PyTorch's CUDA allocator, in one line:

    import torch
    from stalloc.integrations import torch_backend
    torch_backend.enable()                 # before the first CUDA tensor

libstalloc serves every CUDA allocation through ``CUDAPluggableAllocator``, pointed at the
same libstalloc the ``stalloc`` package loaded and at its exports with PyTorch's exact
signatures (``stalloc_torch_malloc``/``stalloc_torch_free``). The first ``record_steps``
optimizer steps are recorded, planned in the background and switched to at a step boundary
(stalloc.session). With ``plan_path`` the plan is saved, and reused by the next run when it
still fits. Under torch.distributed each rank keeps its own plan (``rank<R>.stplan``).

PyTorch's ``torch.cuda.memory_stats()`` does not see a pluggable allocator: use
:func:`memory_stats` and :func:`memory_summary` here. PyTorch offers no Python setters for
its allocator's reset, record_stream and memory-fraction hooks; :func:`empty_cache` and
``memory_limit`` cover the first and last.
On a CPU-only PyTorch, :func:`enable` explains what is missing; :func:`record` (the profiler
route) still records traces.
"""

from __future__ import annotations

import contextlib
import os

from .. import capture
from .._lib import ffi, lib, library_path
from ..allocator import Allocator
from ..errors import OutOfMemoryError
from ..session import PlanSession

__all__ = [
    "cuda_unavailable_reason", "enable", "step", "state", "save_plan", "empty_cache",
    "memory_stats", "memory_summary", "last_error", "oom_guard", "record",
]

_allocators: dict[int, Allocator] = {}
_sessions: dict[int, PlanSession] = {}
_hook = None


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("stalloc.integrations.torch_backend needs PyTorch: pip install torch") from e
    return torch


def _rank() -> int:
    torch = _torch()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def cuda_unavailable_reason() -> str | None:
    """Why stalloc cannot serve PyTorch's CUDA memory here, or None when it can."""
    torch = _torch()
    if torch.version.cuda is None:
        return (f"this PyTorch ({torch.__version__}) is a CPU-only build: stalloc's PyTorch "
                "allocator needs a CUDA build of PyTorch and an NVIDIA GPU. To record traces on "
                "this machine use torch_backend.record(path) or `stalloc record`.")
    if not torch.cuda.is_available():
        return ("PyTorch was built with CUDA but sees no GPU (torch.cuda.is_available() is False); "
                "stalloc's PyTorch allocator needs one.")
    return None


def enable(record_steps: int = 3, plan_path=None, memory_limit: int | None = None,
           time_limit: float = 2.0, hook_optimizer: bool = True, devices=None,
           backend: str = "cuda") -> None:
    """Installs libstalloc as PyTorch's CUDA allocator. Call it right after ``import torch``,
    before any CUDA tensor exists (PyTorch refuses to change allocators later).

    record_steps: steps recorded before planning (the first is warm-up).
    plan_path: a plan file or directory (one file per rank) to save and reuse plans.
    memory_limit: most bytes stalloc may reserve per device.
    hook_optimizer: mark steps from every optimizer.step(); else call :func:`step` yourself.
    """
    global _hook
    torch = _torch()
    reason = cuda_unavailable_reason()
    if reason:
        raise RuntimeError(f"stalloc: {reason}")
    if _allocators:
        raise RuntimeError("stalloc: torch_backend.enable() was already called")
    devices = list(range(torch.cuda.device_count())) if devices is None else list(devices)
    for d in devices:
        a = Allocator(backend=backend, device=d, memory_limit=memory_limit)
        _allocators[d] = a
        lib.stalloc_torch_register(d, a._h())
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(
        library_path, "stalloc_torch_malloc", "stalloc_torch_free")
    torch.cuda.memory.change_current_allocator(pluggable)
    rank = _rank()
    for d, a in _allocators.items():
        _sessions[d] = PlanSession(a, record_steps=record_steps, plan_path=_device_path(plan_path, d),
                                   rank=rank, time_limit=time_limit)
    if hook_optimizer:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _hook = register_optimizer_step_post_hook(lambda opt, args, kwargs: step())


def _device_path(plan_path, device: int):
    """One plan per rank and device; a single device keeps the plain per-rank name."""
    if plan_path is None or len(_allocators) == 1:
        return plan_path
    return os.path.join(os.fspath(plan_path), f"device{device}")


def step() -> None:
    """Marks the end of a training step (the optimizer hook does this unless disabled)."""
    for s in _sessions.values():
        s.step()


def state() -> dict:
    """Per device: the session's state (recording, planning, planned, failed) and plan source."""
    return {d: {"state": s.state, "steps": s.steps, "plan_source": s.plan_source,
                "plan_file": s.plan_file} for d, s in _sessions.items()}


def save_plan(path, device: int | None = None) -> None:
    """Saves the plan in use for a device (default: the current one) to path."""
    _session(device).save_plan(path)


def _session(device):
    if not _sessions:
        raise RuntimeError("stalloc: torch_backend.enable() has not been called")
    if device is None:
        device = _torch().cuda.current_device()
    return _sessions[device]


def empty_cache() -> None:
    """Returns stalloc's cached, unused fallback segments to the driver."""
    for a in _allocators.values():
        a.release_cached()


def memory_stats(device: int | None = None) -> dict:
    """What stalloc knows, under the key names of ``torch.cuda.memory_stats()``."""
    s = _session(device).allocator.stats()
    out = {
        "allocated_bytes.all.current": s.allocated_bytes,
        "allocated_bytes.all.peak": s.peak_allocated_bytes,
        "reserved_bytes.all.current": s.reserved_bytes,
        "reserved_bytes.all.peak": s.peak_reserved_bytes,
        "active.all.current": s.active_blocks,
        "active.all.peak": s.peak_active_blocks,
        "allocation.all.allocated": s.alloc_count,
        "allocation.all.freed": s.free_count,
        "segment.all.current": s.segment_count,
        "num_ooms": s.failed_allocs,
        "num_device_alloc": s.backend_allocs,
        "num_device_free": s.backend_frees,
    }
    out.update({f"stalloc.{k}": v for k, v in s.as_dict().items()})
    out["stalloc.failed_frees"] = int(lib.stalloc_torch_failed_frees())
    return out


def memory_summary(device: int | None = None) -> str:
    """A short human-readable report, like ``torch.cuda.memory_summary()``."""
    sess = _session(device)
    s = sess.allocator.stats()
    mib = 1 << 20
    lines = [
        f"stalloc memory summary (device {sess.allocator.device}, state {sess.state})",
        f"  allocated  {s.allocated_bytes / mib:10.1f} MiB   peak {s.peak_allocated_bytes / mib:10.1f} MiB",
        f"  reserved   {s.reserved_bytes / mib:10.1f} MiB   peak {s.peak_reserved_bytes / mib:10.1f} MiB",
        f"  fragmentation (1 - peak allocated / peak reserved): {s.fragmentation:.2%}",
        f"  plan hits {s.plan_hits:,}  misses {s.plan_misses:,}  resyncs {s.resyncs:,}  "
        f"dynamic {s.dynamic_allocs:,}  fallback {s.fallback_allocs:,}",
    ]
    if sess.plan is not None:
        info = sess.plan.info()
        lines.append(f"  plan: pool {info.pool_size / mib:.1f} MiB, ratio to lower bound "
                     f"{info.ratio:.4f} ({sess.plan_source})")
    return "\n".join(lines)


def last_error() -> str:
    """Why the last allocation or free from PyTorch failed; "" if none did."""
    return ffi.string(lib.stalloc_torch_last_error(ffi.NULL)).decode("utf-8", "replace")


@contextlib.contextmanager
def oom_guard():
    """Turns PyTorch's out-of-memory error into stalloc.OutOfMemoryError (also a MemoryError)
    that says how much was asked, allocated, reserved and planned."""
    torch = _torch()
    try:
        yield
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if "out of memory" not in str(e).lower() and not isinstance(e, torch.OutOfMemoryError):
            raise
        planned = ""
        for s in _sessions.values():
            if s.plan is not None:
                planned = f"; the plan's pool is {s.plan.info().pool_size:,} bytes"
        raise OutOfMemoryError(f"stalloc: {last_error() or e}{planned}") from e


def record(path, steps: int | None = None):
    """Records PyTorch allocations through the profiler (works on CPU-only PyTorch too)."""
    return capture.record(path, steps=steps)
