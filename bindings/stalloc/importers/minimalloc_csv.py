"""Import a MiniMalloc problem (CSV) as a stalloc event array.

MiniMalloc (Google, ASPLOS 2023) states a static placement problem as a CSV with the header
``id,lower,upper,size`` (a solution adds ``offset``): buffer ``id`` lives over the half-open
interval ``[lower, upper)`` of integer time and needs ``size`` bytes. The columns are found by
name; an ``offset`` column is read and ignored.

Conversion: every buffer becomes an ALLOC at ``lower`` and a FREE at ``upper``; events are
ordered by time, frees before allocs at the same time (half-open lifetimes: a buffer ending at
t and one starting at t do not overlap), then by row. Request ids are ``id + 1`` when every id
is a distinct non-negative integer (so MiniMalloc's ids stay readable), otherwise 1, 2, 3, ...
in row order (``info["ids"]`` maps them back). A trace's time is the event index, so the
import keeps which buffers overlap (and so the lower bound) but not the time values.

A malformed file raises ValueError naming the line and the problem.
"""

from __future__ import annotations

import csv
import os

import numpy as np

from ..trace import ALLOC, EVENT_DTYPE, FREE

REQUIRED = ("id", "lower", "upper", "size")

__all__ = ["load_minimalloc_csv", "looks_like_minimalloc_csv"]


def looks_like_minimalloc_csv(head: bytes) -> bool:
    first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].strip().decode("utf-8", "replace")
    cols = [c.strip() for c in first.split(",")]
    return all(c in cols for c in REQUIRED) and set(cols) <= set(REQUIRED) | {"offset"}


def load_minimalloc_csv(path, return_info: bool = False):
    """Reads a MiniMalloc CSV; returns an EVENT_DTYPE array (and an info dict if asked)."""
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a text file ({e})") from None
    if not rows:
        raise ValueError(f"{path}: empty file; expected the header id,lower,upper,size")
    header = [c.strip().lstrip("\ufeff") for c in rows[0]]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ValueError(f"{path}:1: header {','.join(header)!r} lacks {', '.join(missing)}")
    col = {c: header.index(c) for c in REQUIRED}
    names, lower, upper, size = [], [], [], []
    for n, row in enumerate(rows[1:], 2):
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{path}:{n}"
        if len(row) != len(header):
            raise ValueError(f"{where}: {len(row)} fields, expected {len(header)}")
        vals = {}
        for c in ("lower", "upper", "size"):
            t = row[col[c]].strip()
            try:
                vals[c] = int(t)
            except ValueError:
                raise ValueError(f"{where}: {c} {t!r} is not an integer") from None
            if vals[c] < 0:
                raise ValueError(f"{where}: {c} {t} is negative")
        if vals["upper"] <= vals["lower"]:
            raise ValueError(f"{where}: empty lifetime [{vals['lower']}, {vals['upper']}) "
                             "(upper must exceed lower)")
        names.append(row[col["id"]].strip())
        lower.append(vals["lower"])
        upper.append(vals["upper"])
        size.append(vals["size"])
    count = len(names)
    try:
        as_int = [int(x) for x in names]
        numeric = all(v >= 0 for v in as_int) and len(set(as_int)) == count
    except ValueError:
        numeric = False
    ids = np.array([v + 1 for v in as_int] if numeric else range(1, count + 1), dtype=np.uint64)
    lower_a = np.array(lower, dtype=np.int64)
    upper_a = np.array(upper, dtype=np.int64)
    # one key per event: (time, kind order: free 0 before alloc 1, row)
    times = np.concatenate([upper_a, lower_a])
    order_kind = np.concatenate([np.zeros(count, np.int64), np.ones(count, np.int64)])
    row_idx = np.concatenate([np.arange(count), np.arange(count)])
    order = np.lexsort((row_idx, order_kind, times))
    events = np.zeros(2 * count, dtype=EVENT_DTYPE)
    events["id"] = np.concatenate([ids, ids])[order]
    events["size"] = np.concatenate([size, size]).astype(np.uint64)[order] if count else []
    events["kind"] = np.where(order_kind[order] == 1, ALLOC, FREE)
    if not return_info:
        return events
    return events, {"buffers": count, "ids": dict(zip(ids.tolist(), names))}
