"""Reading a trace from any supported format, detected from the content or named.

Formats: ``native`` (docs/trace-format.md), ``torch-profiler`` (Chrome trace JSON from
``torch.profiler`` with ``profile_memory=True``, plain or gzipped), ``npz`` (a numpy file
with an ``events`` array of EVENT_DTYPE), ``rmm`` (RMM logging CSV), ``torch-snapshot``
(``torch.cuda.memory._dump_snapshot`` pickle), ``stalloc-log`` (the reference STAlloc
tracer's text log), ``minimalloc`` (MiniMalloc CSV); docs/formats.md. More importers
register in FORMATS.
"""

from __future__ import annotations

import gzip
import os
import zipfile
import zlib
from typing import Callable

import numpy as np

from .trace import EVENT_DTYPE, Trace

__all__ = ["NATIVE_MAGIC", "FORMATS", "detect_format", "load_trace"]

NATIVE_MAGIC = b"STALTRCE"


def _load_native(path) -> Trace:
    return Trace.load(path)


def _load_npz(path) -> Trace:
    # Only a zip archive is an .npz: anything else would reach numpy's loader for pickles and
    # plain arrays, whose refusal suggests allow_pickle (never suggest an unsafe load).
    with open(path, "rb") as f:
        if f.read(4) not in (b"PK\x03\x04", b"PK\x05\x06"):
            raise ValueError(f"{path}: not an .npz archive (no zip header); "
                             f"its content says format {_detect_or_unknown(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            if "events" not in data:
                raise ValueError(f"{path}: an .npz trace needs an 'events' array")
            try:
                events = data["events"]
            except ValueError as e:  # an object array: numpy's message would suggest allow_pickle
                raise ValueError(f"{path}: the 'events' array holds Python objects, "
                                 f"not {len(EVENT_DTYPE)} numeric fields") from e
    except (zipfile.BadZipFile, EOFError, zlib.error) as e:  # cut short or damaged: say which file
        raise ValueError(f"{path}: a damaged .npz archive ({e})") from e
    return Trace.from_events(events)


def _detect_or_unknown(path) -> str:
    try:
        return detect_format(path)
    except ValueError:
        return "unknown"


def _load_torch_profiler(path) -> Trace:
    from .importers.torch_profiler import load_profiler_json

    return Trace.from_events(load_profiler_json(path))


def _load_rmm(path) -> Trace:
    from .importers.rmm import load_rmm_csv

    return Trace.from_events(load_rmm_csv(path))


def _load_torch_snapshot(path) -> Trace:
    from .importers.torch_snapshot import load_torch_snapshot

    return Trace.from_events(load_torch_snapshot(path))


def _load_stalloc_log(path) -> Trace:
    from .importers.stalloc_log import load_stalloc_log

    return Trace.from_events(load_stalloc_log(path))


def _load_minimalloc(path) -> Trace:
    from .importers.minimalloc_csv import load_minimalloc_csv

    return Trace.from_events(load_minimalloc_csv(path))


FORMATS: dict[str, Callable[[str], Trace]] = {
    "native": _load_native,
    "npz": _load_npz,
    "torch-profiler": _load_torch_profiler,
    "rmm": _load_rmm,
    "torch-snapshot": _load_torch_snapshot,
    "stalloc-log": _load_stalloc_log,
    "minimalloc": _load_minimalloc,
}


def _load_xla(path) -> Trace:
    from .importers.xla import load_xla_dump

    return load_xla_dump(path)


FORMATS["xla"] = _load_xla  # an XLA dump: a module's file prefix, one of its files, or the dump dir


def _head(path, n: int = 512) -> bytes:
    with open(path, "rb") as f:
        head = f.read(n)
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(n)
        except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
            raise ValueError(f"{path}: corrupt gzip data: {e}") from e
    return head


def detect_format(path) -> str:
    """The format name of a trace file, from its first bytes."""
    head = _head(path)
    if not head:
        raise ValueError(f"{path}: empty file")
    if head.startswith(NATIVE_MAGIC) or NATIVE_MAGIC.startswith(head):
        return "native"  # a prefix of the magic: the native reader says "truncated"
    if head.startswith(b"PK"):
        return "npz"
    if head.startswith(b"\x80"):  # a pickle: what torch.cuda.memory._dump_snapshot writes
        return "torch-snapshot"
    text = head.lstrip()
    if text.startswith(b"{") and (b'"device_traces"' in text or b'"segments"' in text):
        return "torch-snapshot"
    if text.startswith(b"{") or text.startswith(b"["):
        return "torch-profiler"
    from .importers.minimalloc_csv import looks_like_minimalloc_csv
    from .importers.rmm import looks_like_rmm_csv
    from .importers.stalloc_log import looks_like_stalloc_log

    if looks_like_rmm_csv(head):
        return "rmm"
    if looks_like_minimalloc_csv(head):
        return "minimalloc"
    if looks_like_stalloc_log(head):
        return "stalloc-log"
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
    trace = loader(path)
    trace.path = path  # names the trace in warnings (ForeignPlanWarning)
    return trace
