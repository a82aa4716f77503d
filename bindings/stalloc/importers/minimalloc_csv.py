"""The MiniMalloc CSV format: the one reader, sniffer and writer, and the import as a trace.

MiniMalloc (Google, ASPLOS 2023) states a static placement problem as a CSV with the header
``id,lower,upper,size`` (a solution adds ``offset``): buffer ``id`` lives over the half-open
interval ``[lower, upper)`` of integer time and needs ``size`` bytes. Columns are found by name
(in any order, case-insensitive); no other column is allowed. Every row has as many fields as
the header; lower, upper, size (and offset) are integers in [0, 2**63); ``upper > lower``, as a
buffer that lives for no time is no buffer. A malformed file raises ValueError naming the line.
``stalloc plan`` (through :func:`read_minimalloc_csv`) and ``stalloc import`` (through
:func:`load_minimalloc_csv`) read files with these same rules.

Import as a trace: every buffer becomes an ALLOC at ``lower`` and a FREE at ``upper``; events
are ordered by time, frees before allocs at the same time (half-open lifetimes: a buffer ending
at t and one starting at t do not overlap), then by row. Request ids are ``id + 1`` when every
id is a distinct non-negative integer (so MiniMalloc's ids stay readable), otherwise 1, 2, 3, ...
in row order (``info["ids"]`` maps them back). A trace's time is the event index, so the
import keeps which buffers overlap (and so the lower bound) but not the time values; an
``offset`` column is read and dropped.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass

import numpy as np

from ..trace import ALLOC, EVENT_DTYPE, FREE

REQUIRED = ("id", "lower", "upper", "size")
OPTIONAL = ("offset",)

__all__ = [
    "MinimallocRows", "is_minimalloc_csv", "load_minimalloc_csv", "looks_like_minimalloc_csv",
    "read_minimalloc_csv", "write_minimalloc_csv",
]


def _columns(first_line: str) -> list[str]:
    return [c.strip().lower() for c in first_line.lstrip("\ufeff").strip().split(",")]


def _header_problem(cols: list[str]) -> str | None:
    """Why a header is not MiniMalloc's, or None; the sniffer and the reader share it."""
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        return f"lacks {', '.join(missing)}"
    extra = [c for c in cols if c not in REQUIRED + OPTIONAL]
    if extra:
        return f"has the unknown column {extra[0]!r}"
    if len(set(cols)) != len(cols):
        return "names a column twice"
    return None


def looks_like_minimalloc_csv(head: bytes) -> bool:
    """True when the first line of ``head`` (a file's first bytes) is a MiniMalloc header."""
    first = head.split(b"\n", 1)[0].decode("utf-8", "replace")
    return _header_problem(_columns(first)) is None


def is_minimalloc_csv(path) -> bool:
    """The same for a file; False when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return looks_like_minimalloc_csv(f.read(4096))
    except OSError:
        return False


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


def read_minimalloc_csv(path) -> MinimallocRows:
    """Reads ``id,lower,upper,size[,offset]`` with the rules above."""
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a text file ({e})") from None
    if not rows:
        raise ValueError(f"{path}: empty file; expected the header id,lower,upper,size")
    cols = _columns(",".join(rows[0]))
    problem = _header_problem(cols)
    if problem:
        raise ValueError(f"{path}:1: header {','.join(cols)!r} {problem} "
                         "(expected id,lower,upper,size[,offset])")
    numeric = [c for c in ("lower", "upper", "size", "offset") if c in cols]
    at = {c: cols.index(c) for c in cols}
    ids: list[str] = []
    vals: list[tuple[int, int, int, int]] = []
    for n, row in enumerate(rows[1:], 2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{path}:{n}"
        if len(row) != len(cols):
            raise ValueError(f"{where}: {len(row)} fields, expected {len(cols)}")
        v = {"offset": -1}
        for c in numeric:
            t = row[at[c]].strip()
            try:
                v[c] = int(t)
            except ValueError:
                raise ValueError(f"{where}: {c} {t!r} is not an integer") from None
            if v[c] < 0:
                raise ValueError(f"{where}: {c} {t} is negative")
            if v[c] >= 2**63:
                raise ValueError(f"{where}: {c} {t} is too large")
        if v["upper"] <= v["lower"]:
            raise ValueError(f"{where}: empty lifetime [{v['lower']}, {v['upper']}) "
                             "(upper must exceed lower)")
        ids.append(row[at["id"]].strip())
        vals.append((v["lower"], v["upper"], v["size"], v["offset"]))
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


def load_minimalloc_csv(path, return_info: bool = False):
    """Reads a MiniMalloc CSV; returns an EVENT_DTYPE array (and an info dict if asked)."""
    rows = read_minimalloc_csv(path)
    count = len(rows)
    try:
        as_int = [int(x) for x in rows.ids]
        numeric = all(v >= 0 for v in as_int) and len(set(as_int)) == count
    except ValueError:
        numeric = False
    ids = np.array([v + 1 for v in as_int] if numeric else range(1, count + 1), dtype=np.uint64)
    # one key per event: (time, kind order: free 0 before alloc 1, row)
    times = np.concatenate([rows.upper, rows.lower])
    order_kind = np.concatenate([np.zeros(count, np.int64), np.ones(count, np.int64)])
    row_idx = np.concatenate([np.arange(count), np.arange(count)])
    order = np.lexsort((row_idx, order_kind, times))
    events = np.zeros(2 * count, dtype=EVENT_DTYPE)
    events["id"] = np.concatenate([ids, ids])[order]
    events["size"] = np.concatenate([rows.size, rows.size]).astype(np.uint64)[order] if count else []
    events["kind"] = np.where(order_kind[order] == 1, ALLOC, FREE)
    if not return_info:
        return events
    return events, {"buffers": count, "ids": dict(zip(ids.tolist(), rows.ids))}
