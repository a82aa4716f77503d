"""Reading a trace from any supported format, detected from the content or named.

Formats: ``native`` (docs/trace-format.md), ``torch-profiler`` (Chrome trace JSON from
``torch.profiler`` with ``profile_memory=True``, plain or gzipped), ``npz`` (a numpy file
with an ``events`` array of EVENT_DTYPE). More importers register in FORMATS.
"""

from __future__ import annotations

import gzip
import os
from typing import Callable

import numpy as np

from .trace import Trace

NATIVE_MAGIC = b"STALTRCE"


def _load_native(path) -> Trace:
    return Trace.load(path)


def _load_npz(path) -> Trace:
    with np.load(path) as data:
        if "events" not in data:
            raise ValueError(f"{path}: an .npz trace needs an 'events' array")
        return Trace.from_events(data["events"])


def _load_torch_profiler(path) -> Trace:
    from .importers.torch_profiler import load_profiler_json

    return Trace.from_events(load_profiler_json(path))


FORMATS: dict[str, Callable[[str], Trace]] = {
    "native": _load_native,
    "npz": _load_npz,
    "torch-profiler": _load_torch_profiler,
}


def _load_xla(path) -> Trace:
    from .importers.xla import load_xla_dump

    return load_xla_dump(path)


FORMATS["xla"] = _load_xla  # an XLA dump: a module's file prefix, one of its files, or the dump dir


def _head(path, n: int = 512) -> bytes:
    with open(path, "rb") as f:
        head = f.read(n)
    if head[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as f:
            head = f.read(n)
    return head


def detect_format(path) -> str:
    """The format name of a trace file, from its first bytes."""
    head = _head(path)
    if head.startswith(NATIVE_MAGIC):
        return "native"
    if head.startswith(b"PK"):
        return "npz"
    text = head.lstrip()
    if text.startswith(b"{") or text.startswith(b"["):
        return "torch-profiler"
    raise ValueError(
        f"{path}: cannot tell the trace format from its content; name it with --format "
        f"(one of {', '.join(sorted(FORMATS))})"
    )


def load_trace(path, fmt: str | None = None) -> Trace:
    """Loads a trace in any supported format (``fmt=None`` detects it)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    fmt = fmt or detect_format(path)
    try:
        loader = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown trace format {fmt!r} (one of {', '.join(sorted(FORMATS))})") from None
    return loader(path)
