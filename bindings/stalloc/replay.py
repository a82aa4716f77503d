"""Replaying a trace through libstalloc's runtime (stalloc_replay in replay.c).

The replay runs in C: a fresh allocator (virtual or host backend) serves the trace's events,
from a plan when one is given, and is checked after every alloc for overlapping live blocks
(and, on the host backend with ``check=True``, for blocks overwritten while live).
"""

from __future__ import annotations

import os

import numpy as np

from ._lib import ffi, lib
from .errors import check as _check
from .trace import Trace

__all__ = ["RESULT_KEYS", "replay"]

RESULT_KEYS = (
    "peak_allocated", "peak_reserved", "fragmentation", "hits", "misses", "fallbacks",
    "resyncs", "dynamic", "tiny", "pool_size", "lower_bound", "events", "requests",
    "checked_events", "seconds",
)


def _as_trace(trace) -> Trace:
    if isinstance(trace, Trace):
        return trace
    from .load import load_trace

    return load_trace(os.fspath(trace))


def _as_plan(plan):
    if plan is None or hasattr(plan, "_handle"):
        return plan
    from .plan import Plan

    return Plan.load(plan)


def replay(trace, plan=None, backend: str = "virtual", check: bool = False, *,
           check_overlap: bool = True, use_steps: bool = True, alignment: int = 0,
           timeline_points: int = 0) -> dict:
    """Replays ``trace`` (a Trace or a path) through the runtime, from ``plan`` (a Plan, a plan
    file path, or None for the fallback pool alone).

    ``check=True`` fills every block with a pattern and verifies it at free (host backend
    only); the overlap check runs on every alloc unless ``check_overlap=False``. Returns a
    dict with RESULT_KEYS: peak allocated and reserved bytes, fragmentation ratio
    (1 - peak allocated / peak reserved), plan hits, misses, fallbacks, resyncs, ...
    """
    if backend not in ("virtual", "host"):
        raise ValueError(f"backend must be 'virtual' or 'host', not {backend!r}")
    if check and backend != "host":
        raise ValueError("check=True needs backend='host' (the virtual backend's memory cannot be touched)")
    t = _as_trace(trace)
    p = _as_plan(plan)
    o = ffi.new("stalloc_replay_options_t*")
    lib.stalloc_replay_options_init(o)
    o.backend = lib.STALLOC_BACKEND_HOST if backend == "host" else lib.STALLOC_BACKEND_VIRTUAL
    o.check_data = int(bool(check))
    o.check_overlap = int(bool(check_overlap))
    o.use_steps = int(bool(use_steps))
    if alignment < 0:
        raise ValueError("alignment must be >= 0")
    o.alignment = int(alignment)
    r = ffi.new("stalloc_replay_result_t*")
    lib.stalloc_replay_result_init(r)
    if timeline_points < 0:
        raise ValueError(f"timeline_points must be >= 0, not {timeline_points}")
    o.timeline_points = int(timeline_points)
    arrays = [np.zeros(timeline_points, dtype=np.uint64) for _ in range(3)]
    ptrs = [ffi.cast("uint64_t*", a.ctypes.data) if timeline_points else ffi.NULL for a in arrays]
    _check(lib.stalloc_replay_timeline(t._handle, p._handle if p is not None else ffi.NULL, o, r, *ptrs))
    out = {k: getattr(r, k) for k in RESULT_KEYS}
    out["fragmentation"] = float(out["fragmentation"])
    if timeline_points:
        n = int(r.timeline_count)
        out["timeline_event"], out["timeline_allocated"], out["timeline_reserved"] = (a[:n] for a in arrays)
    return out
