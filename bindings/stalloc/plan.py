"""Plans: ``stalloc.plan(trace) -> Plan``, an offset for every planned request.

The planner finds the steady-state iteration, classifies every request (persistent, periodic,
tiny, dynamic, warm-up), places the planned ones in one pool so the iteration can repeat
forever, and computes the reusable space for dynamic requests. Docs: docs/planner.md; the file
format: docs/plan-format.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ._lib import ffi, lib
from .errors import check
from .trace import Trace, _View

__all__ = [
    "PERSISTENT", "PERIODIC", "TINY", "DYNAMIC", "WARMUP", "CLASS_NAMES", "NO_OFFSET",
    "NO_WINDOW", "ENTRY_DTYPE", "WINDOW_DTYPE", "RANGE_DTYPE", "NEVER", "PlanInfo", "Plan",
    "plan", "lifetimes", "show",
]

PERSISTENT = lib.STALLOC_CLASS_PERSISTENT
PERIODIC = lib.STALLOC_CLASS_PERIODIC
TINY = lib.STALLOC_CLASS_TINY
DYNAMIC = lib.STALLOC_CLASS_DYNAMIC
WARMUP = lib.STALLOC_CLASS_WARMUP
CLASS_NAMES = {PERSISTENT: "persistent", PERIODIC: "periodic", TINY: "tiny",
               DYNAMIC: "dynamic", WARMUP: "warmup"}

NO_OFFSET = np.iinfo(np.uint64).max
NO_WINDOW = np.iinfo(np.uint32).max

ENTRY_DTYPE = np.dtype([("size", "<u8"), ("offset", "<u8"), ("cls", "<u4"), ("window", "<u4")])
"""One planned position, as ``stalloc_plan_entry_t``; offset is 2**64-1 for tiny and dynamic."""
WINDOW_DTYPE = np.dtype([("begin", "<u4"), ("end", "<u4"), ("first_range", "<u4"),
                         ("range_count", "<u4")])
RANGE_DTYPE = np.dtype([("offset", "<u8"), ("size", "<u8")])

assert ENTRY_DTYPE.itemsize == ffi.sizeof("stalloc_plan_entry_t")
assert WINDOW_DTYPE.itemsize == ffi.sizeof("stalloc_reuse_window_t")
assert RANGE_DTYPE.itemsize == ffi.sizeof("stalloc_reuse_range_t")

_INFO_INT_FIELDS = (
    "lower_bound", "trace_lower_bound", "plan_peak", "pool_size", "alignment", "fingerprint",
    "persistent", "periodic", "tiny", "dynamic", "warmup", "prologue_count", "iteration_count",
    "steps_found", "uses_step_markers", "window_count", "range_count", "reusable_bytes",
    "sizes_tolerated",
)


@dataclass(frozen=True)
class PlanInfo:
    """The figures of a plan (``stalloc_plan_info_t``). ``lower_bound`` is the lower bound of
    the planned requests (max over the trace's time of their live requested bytes); ``ratio``
    is ``plan_peak / lower_bound``; ``trace_lower_bound`` counts every request of the trace."""

    lower_bound: int
    trace_lower_bound: int
    plan_peak: int
    pool_size: int
    alignment: int
    fingerprint: int
    persistent: int
    periodic: int
    tiny: int
    dynamic: int
    warmup: int
    prologue_count: int
    iteration_count: int
    steps_found: int
    uses_step_markers: int
    window_count: int
    range_count: int
    reusable_bytes: int
    ratio: float
    seconds: float
    sizes_tolerated: int  # 1: each entry holds the largest size its position reached

    @property
    def classes(self) -> dict:
        return {name: getattr(self, name) for name in CLASS_NAMES.values()}

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["classes"] = self.classes
        return d


class Plan:
    """A plan in memory. Make one with :func:`plan` or :meth:`Plan.load`."""

    def __init__(self, _handle):
        self._handle = ffi.gc(_handle, lib.stalloc_plan_destroy)

    @classmethod
    def load(cls, path) -> "Plan":
        """Reads and validates a plan file; damaged files raise a BadFormatError subclass."""
        out = ffi.new("stalloc_plan_t**")
        check(lib.stalloc_plan_load(os.fsencode(os.fspath(path)), out))
        plan = cls(out[0])
        plan.path = os.fspath(path)  # names the plan in warnings (ForeignPlanWarning)
        return plan

    def save(self, path) -> None:
        """Writes the plan file (atomically)."""
        check(lib.stalloc_plan_save(self._handle, os.fsencode(os.fspath(path))))

    def info(self) -> PlanInfo:
        i = ffi.new("stalloc_plan_info_t*")
        lib.stalloc_plan_info_init(i)
        check(lib.stalloc_plan_info(self._handle, i))
        vals = {f: int(getattr(i, f)) for f in _INFO_INT_FIELDS}
        return PlanInfo(**vals, ratio=float(i.ratio), seconds=float(i.seconds))

    def check(self, trace: Trace) -> None:
        """Raises PlanMismatchError unless the trace's allocs are the ones the plan is for."""
        check(lib.stalloc_plan_check(self._handle, trace._handle))

    # figures, as attributes
    def __getattr__(self, name):
        if name in PlanInfo.__dataclass_fields__ or name in ("classes",):
            return getattr(self.info(), name)
        raise AttributeError(name)

    @property
    def steps(self) -> int:
        """Complete steady-state iterations found in the trace."""
        return self.info().steps_found

    def _entries(self, which: int) -> np.ndarray:
        ptr = ffi.new("const stalloc_plan_entry_t**")
        n = ffi.new("size_t*")
        check(lib.stalloc_plan_entries(self._handle, which, ptr, n))
        return self._view(ptr[0], n[0], ENTRY_DTYPE)

    @property
    def prologue(self) -> np.ndarray:
        """Entries of the allocs before the steady state, in run order (read-only view)."""
        return self._entries(0)

    @property
    def iteration(self) -> np.ndarray:
        """Entries of one steady-state iteration, in order (read-only view)."""
        return self._entries(1)

    def lifetimes(self) -> tuple[np.ndarray, np.ndarray]:
        """(prologue_end, iteration_end): per entry, the alloc index at which it is freed,
        absolute for the prologue, relative to the iteration's start for the iteration;
        2**64-1 for never (read-only views)."""
        out = []
        for which in (0, 1):
            ptr = ffi.new("const uint64_t**")
            n = ffi.new("size_t*")
            check(lib.stalloc_plan_lifetimes(self._handle, which, ptr, n))
            out.append(self._view(ptr[0], n[0], np.dtype("<u8")))
        return out[0], out[1]

    def reuse(self) -> tuple[np.ndarray, np.ndarray]:
        """(windows, ranges): the Dynamic Reusable Space table (read-only views)."""
        w = ffi.new("const stalloc_reuse_window_t**")
        wn = ffi.new("size_t*")
        r = ffi.new("const stalloc_reuse_range_t**")
        rn = ffi.new("size_t*")
        check(lib.stalloc_plan_reuse(self._handle, w, wn, r, rn))
        return self._view(w[0], wn[0], WINDOW_DTYPE), self._view(r[0], rn[0], RANGE_DTYPE)

    def _view(self, cptr, n: int, dtype: np.dtype) -> np.ndarray:
        if n == 0:
            return np.zeros(0, dtype)
        address = int(ffi.cast("uintptr_t", cptr))
        arr = np.asarray(_View(self, address, n, dtype)).view(dtype)
        arr.flags.writeable = False
        return arr

    def __repr__(self) -> str:
        i = self.info()
        return (f"<stalloc.Plan pool {i.pool_size} B, plan peak {i.plan_peak} B, lower bound "
                f"{i.lower_bound} B (ratio {i.ratio:.4f}), {i.prologue_count} prologue + "
                f"{i.iteration_count} iteration entries, {i.steps_found} steps>")


def plan(trace, time_limit: float = 2.0, *, detect_period: bool = True,
         use_step_markers: bool = True, classify: bool = True, reuse_space: bool = True,
         alignment: int = 512, tiny_threshold: int = 512, dynamic_headroom: float = 1.0,
         tolerate_sizes: bool = False) -> Plan:
    """Plans a trace (a :class:`Trace` or a path any loader reads). See docs/planner.md.
    ``dynamic_headroom``: each reuse window gets an arena of the most live dynamic bytes seen in
    a recorded iteration times this (>= 1; 0: no arenas, only the space planned requests leave).
    ``tolerate_sizes``: steps with the same number of allocs between step markers are one
    period even when their sizes differ (dynamic padding, a curriculum); each position is
    planned at the largest size it reached, and a request no larger takes its slot."""
    if not isinstance(trace, Trace):
        from .load import load_trace

        trace = load_trace(trace)
    p = ffi.new("stalloc_plan_params_t*")
    lib.stalloc_plan_params_init(p)
    p.time_limit = float(time_limit)
    p.detect_period = int(bool(detect_period))
    p.use_step_markers = int(bool(use_step_markers))
    p.classify = int(bool(classify))
    p.reuse_space = int(bool(reuse_space))
    if alignment <= 0 or tiny_threshold < 0:
        raise ValueError("alignment must be > 0 and tiny_threshold >= 0")
    p.alignment = int(alignment)
    p.tiny_threshold = int(tiny_threshold)
    p.dynamic_headroom = float(dynamic_headroom)
    p.tolerate_sizes = int(bool(tolerate_sizes))
    out = ffi.new("stalloc_plan_t**")
    check(lib.stalloc_plan_create(trace._handle, p, out))
    return Plan(out[0])


NEVER = np.iinfo(np.uint64).max

_LT_DTYPE = np.dtype([("begin", "<i8"), ("end", "<i8"), ("offset", "<u8"), ("size", "<u8"),
                      ("cls", "<u4")])


def lifetimes(p: Plan, trace: Trace | None = None, iterations: int = 3) -> np.ndarray:
    """Per request: (begin, end, offset, size, cls) in alloc time, offset 2**64-1 when unplanned.

    With a trace: its real requests, each with the entry its position matches. Without: the
    plan's own timeline, the prologue then ``iterations`` copies of the iteration (persistent
    and never-freed requests end at the end of the last copy)."""
    pro, it = p.prologue, p.iteration
    np_, ni = len(pro), len(it)
    if trace is not None:
        r = trace.requests
        n = len(r)
        end = np.searchsorted(r["alloc_event"], r["free_event"], side="left").astype(np.int64)
        end[r["free_event"] == NEVER] = n
        out = np.zeros(n, _LT_DTYPE)
        out["begin"] = np.arange(n)
        out["end"] = end
        out["size"] = r["size"]
        out["offset"] = NO_OFFSET
        k = min(np_, n)
        out["offset"][:k] = pro["offset"][:k]
        out["cls"][:k] = pro["cls"][:k]
        if ni and n > np_:
            pos = (np.arange(np_, n) - np_) % ni
            out["offset"][np_:] = it["offset"][pos]
            out["cls"][np_:] = it["cls"][pos]
        return out
    pe, ie = p.lifetimes()
    horizon = np_ + iterations * ni if ni else np_
    parts = []
    a = np.zeros(np_, _LT_DTYPE)
    a["begin"] = np.arange(np_)
    a["end"] = np.where(pe == NEVER, horizon, np.minimum(pe, horizon).astype(np.int64))
    a["offset"], a["size"], a["cls"] = pro["offset"], pro["size"], pro["cls"]
    parts.append(a)
    for k in range(iterations if ni else 0):
        b = np.zeros(ni, _LT_DTYPE)
        base = np_ + k * ni
        b["begin"] = base + np.arange(ni)
        b["end"] = np.where(ie == NEVER, horizon, base + ie.astype(np.int64))
        b["offset"], b["size"], b["cls"] = it["offset"], it["size"], it["cls"]
        parts.append(b)
    return np.concatenate(parts)


def show(p: Plan, path, *, trace: Trace | None = None, iterations: int = 3,
         title: str | None = None, max_rects: int = 200_000) -> None:
    """Draws the plan as address against time (alloc index), one rectangle per planned request
    (of the trace when given, else of the plan's own timeline; see :func:`lifetimes`), coloured
    by class; dynamic reuse windows are shaded. Needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import PolyCollection
        from matplotlib.patches import Patch
    except ImportError as e:
        raise RuntimeError("stalloc show needs matplotlib: pip install matplotlib") from e
    lt = lifetimes(p, trace, iterations)
    planned = lt[lt["offset"] != NO_OFFSET]
    if len(planned) > max_rects:
        planned = planned[np.argsort(-planned["size"].astype(np.float64))[:max_rects]]
    colours = {PERSISTENT: "#4c72b0", PERIODIC: "#55a868", WARMUP: "#dd8452",
               DYNAMIC: "#c44e52", TINY: "#8172b2"}
    mib = 1 / (1 << 20)
    x0 = planned["begin"].astype(float)
    x1 = planned["end"].astype(float)
    y0 = planned["offset"].astype(float) * mib
    y1 = (planned["offset"] + planned["size"]).astype(float) * mib
    verts = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1),
                      np.stack([x0, y1], 1)], 1)
    fig, ax = plt.subplots(figsize=(12, 6), dpi=110)
    fc = [colours.get(int(c), "grey") for c in planned["cls"]]
    ax.add_collection(PolyCollection(verts, facecolors=fc, edgecolors="black", linewidths=0.15))
    info = p.info()
    windows, _ = p.reuse()
    n = len(lt)
    if len(p.iteration):
        for k in range(info.prologue_count, n, info.iteration_count):
            ax.axvline(k, color="grey", lw=0.5, ls=":")
            for w in windows:
                ax.axvspan(k + int(w["begin"]), k + int(w["end"]), color=colours[DYNAMIC], alpha=0.06)
    ax.axhline(info.plan_peak * mib, color="black", lw=0.8, ls="--")
    ax.axhline(info.lower_bound * mib, color="red", lw=0.8, ls=":")
    ax.set_xlim(0, max(n, 1))
    ax.set_ylim(0, max(info.pool_size, 1) * mib * 1.05)
    ax.set_xlabel("time (alloc index)")
    ax.set_ylabel("address in pool (MiB)")
    ax.set_title(title or f"plan peak {info.plan_peak:,} B, lower bound {info.lower_bound:,} B "
                 f"(ratio {info.ratio:.4f}); dotted: iterations")
    handles = [Patch(color=colours[c], label=CLASS_NAMES[c]) for c in (PERSISTENT, WARMUP, PERIODIC)]
    if info.window_count:
        handles.append(Patch(color=colours[DYNAMIC], alpha=0.2, label="dynamic reuse window"))
    ax.legend(handles=handles, loc="upper right")
    fig.tight_layout()
    fig.savefig(os.fspath(path))
    plt.close(fig)
