"""Static placement from Python: offsets for items with known lifetimes (libstalloc's
``stalloc_place``), and the MiniMalloc CSV format it is benchmarked on.

MiniMalloc CSV (github.com/google/minimalloc): a header ``id,lower,upper,size`` and one row
per buffer; lifetimes are half-open ``[lower, upper)``; a solved file adds an ``offset``
column. Algorithm and measured figures: docs/placement.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ._lib import ffi, lib
from .errors import check

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


@dataclass
class MinimallocRows:
    """The rows of a MiniMalloc CSV. ``offset`` is -1 where the file gives none."""

    ids: list[str]
    lower: np.ndarray
    upper: np.ndarray
    size: np.ndarray
    offset: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


_COLUMNS = ("id", "lower", "upper", "size")


def read_minimalloc_csv(path) -> MinimallocRows:
    """Reads ``id,lower,upper,size[,offset]``; a malformed file raises ValueError naming
    the line."""
    ids: list[str] = []
    vals: list[tuple[int, int, int, int]] = []
    with open(path, encoding="utf-8") as f:
        header = f.readline()
        cols = [c.strip() for c in header.strip().split(",")]
        if tuple(cols[:4]) != _COLUMNS or len(cols) > 5 or (len(cols) == 5 and cols[4] != "offset"):
            raise ValueError(
                f"{path}:1: expected the header id,lower,upper,size[,offset], got {header.strip()!r}"
            )
        width = len(cols)
        for lineno, line in enumerate(f, start=2):
            line = line.strip()
            if not line:
                continue
            parts = line.split(",")
            if len(parts) != width:
                raise ValueError(f"{path}:{lineno}: expected {width} fields, got {len(parts)}: {line!r}")
            try:
                nums = [int(p) for p in parts[1:]]
            except ValueError:
                raise ValueError(f"{path}:{lineno}: lower, upper, size and offset must be integers: {line!r}") from None
            lo, up, sz = nums[0], nums[1], nums[2]
            off = nums[3] if width == 5 else -1
            if lo < 0 or sz < 0 or (width == 5 and off < 0):
                raise ValueError(f"{path}:{lineno}: negative value: {line!r}")
            if up < lo:
                raise ValueError(f"{path}:{lineno}: upper {up} < lower {lo}")
            if max(up, sz, off) >= 2**63:
                raise ValueError(f"{path}:{lineno}: value too large: {line!r}")
            ids.append(parts[0].strip())
            vals.append((lo, up, sz, off))
    a = np.array(vals, dtype=np.int64).reshape(-1, 4)
    return MinimallocRows(ids, a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), a[:, 3].copy())


def write_minimalloc_csv(path, rows: MinimallocRows, offsets) -> None:
    """Writes ``id,lower,upper,size,offset`` with the given offsets."""
    off = np.asarray(offsets)
    if len(off) != len(rows):
        raise ValueError(f"{len(off)} offsets for {len(rows)} rows")
    with open(path, "w", encoding="utf-8") as f:
        f.write("id,lower,upper,size,offset\n")
        for i, ident in enumerate(rows.ids):
            f.write(f"{ident},{int(rows.lower[i])},{int(rows.upper[i])},{int(rows.size[i])},{int(off[i])}\n")


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
