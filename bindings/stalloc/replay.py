"""Replaying a trace through libstalloc's runtime (stalloc_replay in replay.c).

The replay runs in C: a fresh allocator (virtual or host backend) serves the trace's events,
from a plan when one is given, and is checked after every alloc for overlapping live blocks
(and, on the host backend with ``check=True``, for blocks overwritten while live).
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from ._lib import ffi, lib
from .errors import ForeignPlanWarning, PlanMismatchError, check as _check
from .trace import Trace

__all__ = ["ONLINE_DEFAULTS", "PLAN_RECORD_KEYS", "RESULT_KEYS", "STEP_KEYS", "parse_online_params", "plan_record", "replay",
           "warn_if_foreign"]

RESULT_KEYS = (
    "peak_allocated", "peak_reserved", "fragmentation", "hits", "misses", "fallbacks",
    "resyncs", "dynamic", "tiny", "pool_size", "lower_bound", "events", "requests",
    "checked_events", "seconds", "hinted", "hint_layouts", "hint_layouts_kept", "hint_seconds_max",
    "device_waits", "backend_allocs",
)


def _as_trace(trace) -> Trace:
    if isinstance(trace, Trace):
        return trace
    from .load import load_trace

    return load_trace(os.fspath(trace))


def warn_if_foreign(plan, trace, trace_name=None, stacklevel: int = 3) -> bool:
    """Warns (ForeignPlanWarning) and returns True when ``plan`` was not made for ``trace``'s
    allocs (Plan.check): its hits and misses would be those of another run."""
    try:
        plan.check(trace)
        return False
    except PlanMismatchError as e:
        pname = getattr(plan, "path", None)
        tname = trace_name or getattr(trace, "path", None)
        pname = f"plan {pname}" if pname else "the plan"
        tname = f"trace {tname}" if tname else "this trace"
        warnings.warn(f"{pname} was not made for {tname} ({e}); "
                      f"its figures are those of a foreign plan", ForeignPlanWarning,
                      stacklevel=stacklevel)
        return True


def _as_plan(plan):
    if plan is None or hasattr(plan, "_handle"):
        return plan
    from .plan import Plan

    return Plan.load(plan)


STEP_KEYS = ("peak_allocated", "peak_reserved", "hit_bytes", "miss_bytes")
PLAN_RECORD_KEYS = ("started_step", "switched_step", "recorded_steps", "pool_size", "plan_peak",
                    "lower_bound", "plan_seconds", "delay_seconds", "status", "declined")


def plan_record(rec) -> dict:
    """One stalloc_online_plan_record_t as a dict with PLAN_RECORD_KEYS."""
    return {k: (float(v) if isinstance(v, float) else int(v))
            for k in PLAN_RECORD_KEYS for v in [getattr(rec, k)]}


# The defaults of the online lifecycle (stalloc_online_params_init), also those of
# torch_backend.enable().
ONLINE_DEFAULTS = dict(record_steps=3, replan_steps=2, time_limit=1.0, replan_miss_share=0.02,
                       replan_after=1, layout_hints=1, pool_fit_candidates=4, pool_at_ends_after=0)


def parse_online_params(pairs) -> dict:
    """KEY=VALUE strings (a command line's) as online parameters: whole numbers as int, others
    as float. ValueError names a pair without '=', a value that is not a number, or a key not in
    ONLINE_DEFAULTS."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"an online parameter is KEY=VALUE, not {pair!r}")
        if key not in ONLINE_DEFAULTS:
            raise ValueError(f"unknown online parameter {key!r} (known: {', '.join(ONLINE_DEFAULTS)})")
        try:
            params[key] = int(value)
        except ValueError:
            try:
                params[key] = float(value)
            except ValueError:
                raise ValueError(f"online parameter {key}: {value!r} is not a number") from None
    return params


def _online_params(o, online: dict) -> None:
    unknown = set(online) - set(ONLINE_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown online parameter(s): {', '.join(sorted(unknown))}")
    for k, v in online.items():
        try:
            setattr(o.online_params, k, v)
        except (OverflowError, TypeError) as e:  # a negative count, a fraction where a count goes
            raise ValueError(f"online parameter {k}: {v!r} does not fit ({e})") from None


def replay(trace, plan=None, backend: str = "virtual", check: bool = False, *,
           check_overlap: bool = True, use_steps: bool = True, alignment: int = 0,
           timeline_points: int = 0, online=False, steps: bool = False,
           growable_pool: bool = True, device_lag: int = 0) -> dict:
    """Replays ``trace`` (a Trace or a path) through the runtime, from ``plan`` (a Plan, a plan
    file path, or None for the fallback pool alone).

    ``online=True`` (or a dict of online parameters, see ONLINE_DEFAULTS) drives the online
    lifecycle instead, as a real run does: record the first steps, plan them in the
    background, switch at a step boundary, re-plan when the run drifts; it never reads ahead,
    and the first boundary after planning began waits for the plan, so the figures do not
    depend on the machine. Peak reserved counts everything the allocator held, the recording
    phase included. With ``online`` or ``steps=True`` the result also has ``steps`` (one dict
    per step with STEP_KEYS) and, online, ``plans`` (one dict per plan with PLAN_RECORD_KEYS);
    not with ``timeline_points``, which gives the timeline instead.

    ``growable_pool=False`` serves what no plan covers from PyTorch-style cached segments
    rather than the growable pool (docs/options.md).

    ``device_lag=N`` (virtual backend) models a GPU that runs N events behind the host: a
    free's queued work finishes N allocs and frees later, as on a real device, where the host
    enqueues ahead; ``device_waits`` in the result counts the times the host had to wait for
    it (docs/online.md, "On an asynchronous device").

    ``check=True`` fills every block with a pattern and verifies it at free (host backend
    only); the overlap check runs on every alloc unless ``check_overlap=False``. Returns a
    dict with RESULT_KEYS: peak allocated and reserved bytes, fragmentation ratio
    (1 - peak allocated / peak reserved), plan hits, misses, fallbacks, resyncs, ...
    """
    if backend not in ("virtual", "host"):
        raise ValueError(f"backend must be 'virtual' or 'host', not {backend!r}")
    if check and backend != "host":
        raise ValueError("check=True needs backend='host' (the virtual backend's memory cannot be touched)")
    if online and plan is not None:
        raise ValueError("an online replay makes its own plans: give no plan")
    t = _as_trace(trace)
    p = _as_plan(plan)
    if p is not None:
        warn_if_foreign(p, t, None if isinstance(trace, Trace) else os.fspath(trace))
    o = ffi.new("stalloc_replay_options_t*")
    lib.stalloc_replay_options_init(o)
    o.backend = lib.STALLOC_BACKEND_HOST if backend == "host" else lib.STALLOC_BACKEND_VIRTUAL
    o.check_data = int(bool(check))
    o.check_overlap = int(bool(check_overlap))
    o.use_steps = int(bool(use_steps))
    o.growable_pool = int(bool(growable_pool))
    if device_lag < 0 or (device_lag and backend != "virtual"):
        raise ValueError(f"device_lag must be >= 0 and needs backend='virtual', not {device_lag} with {backend!r}")
    o.device_lag = int(device_lag)
    if online:
        o.online = 1
        _online_params(o, online if isinstance(online, dict) else {})
    if alignment < 0:
        raise ValueError("alignment must be >= 0")
    o.alignment = int(alignment)
    r = ffi.new("stalloc_replay_result_t*")
    lib.stalloc_replay_result_init(r)
    if timeline_points < 0:
        raise ValueError(f"timeline_points must be >= 0, not {timeline_points}")
    o.timeline_points = int(timeline_points)
    phandle = p._handle if p is not None else ffi.NULL
    per_step = (online or steps) and not timeline_points  # a timeline replay has no per-step figures
    if per_step:
        nsteps = int(t.summary().steps) + 2
        step_arr = ffi.new("stalloc_replay_step_t[]", nsteps)
        plan_arr = ffi.new("stalloc_online_plan_record_t[]", max(nsteps, 1))
        nstep, nplan = ffi.new("size_t*"), ffi.new("size_t*")
        _check(lib.stalloc_replay_steps(t._handle, phandle, o, r, step_arr, nsteps, nstep,
                                        plan_arr, max(nsteps, 1), nplan))
    else:
        arrays = [np.zeros(timeline_points, dtype=np.uint64) for _ in range(3)]
        ptrs = [ffi.cast("uint64_t*", a.ctypes.data) if timeline_points else ffi.NULL for a in arrays]
        _check(lib.stalloc_replay_timeline(t._handle, phandle, o, r, *ptrs))
    out = {k: getattr(r, k) for k in RESULT_KEYS}
    out["fragmentation"] = float(out["fragmentation"])
    if per_step:
        out["steps"] = [{k: int(getattr(step_arr[i], k)) for k in STEP_KEYS}
                        for i in range(min(nstep[0], nsteps))]
    if online and per_step:
        out["plans"] = [plan_record(plan_arr[i]) for i in range(min(nplan[0], max(nsteps, 1)))]
    if timeline_points:
        n = int(r.timeline_count)
        out["timeline_event"], out["timeline_allocated"], out["timeline_reserved"] = (a[:n] for a in arrays)
    return out
