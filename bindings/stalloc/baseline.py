"""The baseline: what PyTorch's caching allocator would reserve for a trace.

``simulate(trace)`` replays the trace through libstalloc's model of PyTorch's
CUDACachingAllocator (``stalloc_simulate``; rules and limits in docs/baseline.md) and returns
its peak reserved next to the trace's peak allocated. All the work is in C: a million events
take well under a second.
"""

from __future__ import annotations

import numpy as np

from ._lib import ffi, lib
from .errors import check
from .trace import Trace

ALLOCATORS = {
    "pytorch": lib.STALLOC_SIM_TORCH,
    "pytorch-expandable": lib.STALLOC_SIM_TORCH_EXPANDABLE,
}
"""Simulator names: the default allocator and ``expandable_segments:True``."""

MiB = 1 << 20


def _as_trace(trace) -> Trace:
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, np.ndarray):
        return Trace.from_events(trace)
    from .load import load_trace

    return load_trace(trace)


def simulate(trace, allocator: str = "pytorch", max_split_size_mb: float | None = None,
             memory_limit: int | None = None, timeline_points: int = 0) -> dict:
    """Simulates ``allocator`` on ``trace`` (a Trace, an EVENT_DTYPE array or a path).

    ``max_split_size_mb`` is PyTorch's option of that name (``None``: unlimited, its default;
    otherwise above 20). ``memory_limit`` is the device bytes available (``None``: no limit);
    at the limit the simulator frees cached memory and retries, then counts an OOM.
    ``timeline_points`` > 0 adds ``timeline_event``, ``timeline_allocated`` and
    ``timeline_reserved`` arrays: per bucket of consecutive events, its last event index and the
    largest allocated / reserved bytes within it.

    Returns a dict with ``allocator``, ``peak_allocated``, ``peak_reserved``, ``waste``
    (reserved - allocated at their peaks), ``fragmentation`` (1 - allocated / reserved),
    ``ooms``, ``segments`` (most held at once), ``segment_allocs``, ``cache_flushes``,
    ``final_reserved``, and the timeline arrays (empty when not asked for).
    """
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r} (one of {', '.join(ALLOCATORS)})")
    if timeline_points < 0:
        raise ValueError(f"timeline_points must be >= 0, not {timeline_points}")
    t = _as_trace(trace)
    p = ffi.new("stalloc_sim_params_t*")
    lib.stalloc_sim_params_init(p)
    p.kind = ALLOCATORS[allocator]
    if max_split_size_mb is not None:
        if max_split_size_mb <= 20:
            raise ValueError(f"max_split_size_mb must be above 20 (as in PyTorch), not {max_split_size_mb}")
        p.max_split_size = int(max_split_size_mb * MiB)
    if memory_limit is not None:
        if memory_limit <= 0:
            raise ValueError(f"memory_limit must be positive, not {memory_limit}")
        p.memory_limit = int(memory_limit)
    p.timeline_points = int(timeline_points)
    r = ffi.new("stalloc_sim_result_t*")
    lib.stalloc_sim_result_init(r)
    arrays = [np.zeros(timeline_points, dtype=np.uint64) for _ in range(3)]
    ptrs = [ffi.cast("uint64_t*", a.ctypes.data) if timeline_points else ffi.NULL for a in arrays]
    check(lib.stalloc_simulate(t._handle, p, r, *ptrs))
    n = int(r.timeline_count)
    return {
        "allocator": allocator,
        "peak_allocated": int(r.peak_allocated),
        "peak_reserved": int(r.peak_reserved),
        "waste": int(r.waste),
        "fragmentation": float(r.fragmentation),
        "ooms": int(r.ooms),
        "segments": int(r.segments),
        "segment_allocs": int(r.segment_allocs),
        "cache_flushes": int(r.cache_flushes),
        "final_reserved": int(r.final_reserved),
        "timeline_event": arrays[0][:n],
        "timeline_allocated": arrays[1][:n],
        "timeline_reserved": arrays[2][:n],
    }


def simulate_all(trace, **kwargs) -> dict[str, dict]:
    """``simulate`` for every allocator in ALLOCATORS, keyed by name."""
    t = _as_trace(trace)
    return {name: simulate(t, name, **kwargs) for name in ALLOCATORS}


__all__ = ["ALLOCATORS", "simulate", "simulate_all"]
