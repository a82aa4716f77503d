"""Static placement from Python: offsets for items with known lifetimes (libstalloc's
``stalloc_place``), and the MiniMalloc CSV format it is benchmarked on.

MiniMalloc CSV (github.com/google/minimalloc): a header ``id,lower,upper,size`` and one row
per buffer; lifetimes are half-open ``[lower, upper)``; a solved file adds an ``offset``
column. The format's reader and writer live in :mod:`stalloc.importers.minimalloc_csv` (one
set of rules for ``stalloc plan`` and ``stalloc import``) and are re-exported here.
Algorithm and measured figures: docs/placement.md.
"""

from __future__ import annotations

import time

import numpy as np

from ._lib import ffi, lib
from .errors import check
from .importers.minimalloc_csv import MinimallocRows, read_minimalloc_csv, write_minimalloc_csv

FREE = np.iinfo(np.uint64).max
"""``fixed`` value for an item the solver may move (UINT64_MAX in C)."""

ITEM_DTYPE = np.dtype(
    [("lower", "<u8"), ("upper", "<u8"), ("size", "<u8"), ("fixed_offset", "<u8")]
)
"""Layout of stalloc_place_item_t."""


def _as_u64(name: str, values, n: int | None = None) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if n is not None and len(a) != n:
        raise ValueError(f"{name}: {len(a)} values, expected {n}")
    if a.size and a.dtype.kind not in "ui":
        raise ValueError(f"{name}: expected integers, got {a.dtype}")
    if a.size and a.dtype.kind == "i" and a.min() < 0:
        raise ValueError(f"{name}: negative value {a.min()}")
    return a.astype(np.uint64, copy=False)


def place(lower, upper, size, *, fixed=None, alignment: int = 1, time_limit: float = 10.0):
    """Places items with lifetimes ``[lower[i], upper[i])`` and ``size[i]`` bytes.

    ``fixed`` (optional) holds an offset to keep per item, or ``FREE``. Returns
    ``(offsets, result)``: a uint64 array and a dict with ``peak`` (plan peak),
    ``lower_bound``, ``ratio``, ``optimal``, ``orderings_tried``, ``backtracks``, ``seconds``.
    Raises InvalidArgumentError (a ValueError) on bad input.
    """
    lo = _as_u64("lower", lower)
    n = len(lo)
    items = np.empty(n, dtype=ITEM_DTYPE)
    items["lower"] = lo
    items["upper"] = _as_u64("upper", upper, n)
    items["size"] = _as_u64("size", size, n)
    items["fixed_offset"] = FREE if fixed is None else _as_u64("fixed", fixed, n)
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    if not time_limit >= 0:
        raise ValueError(f"time_limit must be >= 0, got {time_limit}")
    offsets = np.zeros(n, dtype=np.uint64)
    params = ffi.new("stalloc_place_params_t*")
    lib.stalloc_place_params_init(params)
    params.alignment = int(alignment)
    params.time_limit = float(time_limit)
    res = ffi.new("stalloc_place_result_t*")
    lib.stalloc_place_result_init(res)
    item_ptr = ffi.from_buffer("stalloc_place_item_t[]", items) if n else ffi.NULL
    off_ptr = ffi.from_buffer("uint64_t[]", offsets) if n else ffi.NULL
    check(lib.stalloc_place(item_ptr, n, params, off_ptr, res))
    result = {
        "peak": int(res.peak),
        "lower_bound": int(res.lower_bound),
        "ratio": (res.peak / res.lower_bound) if res.lower_bound else 1.0,
        "optimal": bool(res.optimal),
        "orderings_tried": int(res.orderings_tried),
        "backtracks": int(res.backtracks),
        "seconds": float(res.seconds),
    }
    return offsets, result


def solve_minimalloc_csv(in_path, out_path, time_limit: float = 10.0) -> dict:
    """Solves a MiniMalloc CSV (any offset column in the input is ignored) and writes the
    solution with an offset column. Returns ``lower_bound``, ``plan_peak``, ``ratio``,
    ``seconds`` (solver time), plus ``items``, ``optimal`` and ``total_seconds``."""
    t0 = time.perf_counter()
    rows = read_minimalloc_csv(in_path)
    offsets, res = place(rows.lower, rows.upper, rows.size, time_limit=time_limit)
    write_minimalloc_csv(out_path, rows, offsets)
    return {
        "lower_bound": res["lower_bound"],
        "plan_peak": res["peak"],
        "ratio": res["ratio"],
        "seconds": res["seconds"],
        "items": len(rows),
        "optimal": res["optimal"],
        "total_seconds": time.perf_counter() - t0,
    }


__all__ = [
    "FREE", "ITEM_DTYPE", "place", "MinimallocRows", "read_minimalloc_csv",
    "write_minimalloc_csv", "solve_minimalloc_csv",
]
