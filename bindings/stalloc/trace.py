"""Traces: the ordered alloc/free events of a run, with optional step markers.

A :class:`Trace` owns a C ``stalloc_trace_t``; ``events`` and ``requests`` are zero-copy,
read-only numpy views into it. File format: docs/trace-format.md.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ._handle import OwnedHandle
from ._lib import ffi, lib
from .errors import InvalidArgumentError, check

__all__ = [
    "ALLOC", "FREE", "STEP", "ALLOC_FAILED", "FLAG_UNMATCHED", "EVENT_DTYPE", "REQUEST_DTYPE",
    "NEVER_FREED", "TraceSummary", "Trace", "TraceWriter",
]

ALLOC = lib.STALLOC_EVENT_ALLOC
FREE = lib.STALLOC_EVENT_FREE
STEP = lib.STALLOC_EVENT_STEP
ALLOC_FAILED = lib.STALLOC_EVENT_ALLOC_FAILED
FLAG_UNMATCHED = lib.STALLOC_EVENT_FLAG_UNMATCHED

EVENT_DTYPE = np.dtype(
    [("id", "<u8"), ("size", "<u8"), ("address", "<u8"), ("stream", "<u8"),
     ("thread", "<u4"), ("device", "<i2"), ("kind", "u1"), ("flags", "u1")]
)
"""One event, laid out exactly as ``stalloc_event_t`` (40 bytes)."""

REQUEST_DTYPE = np.dtype(
    [("id", "<u8"), ("size", "<u8"), ("alloc_event", "<u8"), ("free_event", "<u8"),
     ("stream", "<u8"), ("step", "<u4"), ("device", "<i2"), ("reserved", "<u2")]
)
"""One request (an alloc paired with its free), as ``stalloc_request_t``. Lifetimes are
half-open event-index intervals; ``free_event`` is 2**64-1 for a request never freed."""

NEVER_FREED = np.iinfo(np.uint64).max

assert EVENT_DTYPE.itemsize == ffi.sizeof("stalloc_event_t")
assert REQUEST_DTYPE.itemsize == ffi.sizeof("stalloc_request_t")


@dataclass(frozen=True)
class TraceSummary:
    """What a trace holds (field names as in ``stalloc_trace_summary_t``)."""

    events: int
    requests: int
    unfreed_requests: int
    unmatched_frees: int
    failed_allocs: int
    distinct_sizes: int
    steps: int
    total_bytes: int
    lower_bound: int
    lower_bound_event: int
    max_request: int
    streams: int
    devices: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class _View:
    """Lends numpy a C array while keeping its owner alive (numpy keeps this as ``base``)."""

    def __init__(self, owner, address: int, count: int, dtype: np.dtype):
        self._owner = owner
        self.__array_interface__ = {
            "shape": (count,),
            "typestr": "|V%d" % dtype.itemsize,
            "descr": dtype.descr,
            "data": (address or 0, True),
            "version": 3,
        }


def _c_path(path) -> bytes:
    return os.fsencode(os.fspath(path))


class Trace:
    """A trace in memory. Create with :meth:`load`, :meth:`from_events` or ``Trace()``."""

    def __init__(self, _handle=None):
        if _handle is None:
            out = ffi.new("stalloc_trace_t**")
            check(lib.stalloc_trace_create(out))
            _handle = out[0]
        self._handle = ffi.gc(_handle, lib.stalloc_trace_destroy)
        # The _View objects behind arrays handed out by .events and .requests, while any
        # array over them lives: append may move the C arrays, so it refuses while one does.
        self._views = weakref.WeakSet()

    @classmethod
    def load(cls, path) -> "Trace":
        """Reads a native trace file; damaged files raise a BadFormatError subclass."""
        out = ffi.new("stalloc_trace_t**")
        check(lib.stalloc_trace_load(_c_path(path), out))
        return cls(out[0])

    @classmethod
    def from_events(cls, events) -> "Trace":
        """A trace from a numpy array of EVENT_DTYPE (checked as ``stalloc_trace_append``)."""
        t = cls()
        t.append(events)
        return t

    def scaled(self, factor: int, min_size: int = 0) -> "Trace":
        """A new trace with the size of every request of at least ``min_size`` bytes multiplied
        by ``factor``, the order of events unchanged: what a model with ``factor`` times larger
        tensors allocates (how the benchmarks turn a small CPU recording into a GPU-sized run).
        ``min_size`` keeps requests the slab serves (``<= 512`` bytes) as they are."""
        factor = int(factor)
        if factor < 1:
            raise InvalidArgumentError(f"trace: scale factor must be at least 1, got {factor}")
        ev = np.array(self.events)  # a copy: the view is read-only and may move
        big = ev["size"] >= np.uint64(min_size)
        limit = np.iinfo(np.uint64).max // factor
        if np.any(ev["size"][big] > limit):
            raise InvalidArgumentError(f"trace: a size times {factor} does not fit in 64 bits")
        ev["size"][big] *= np.uint64(factor)
        return Trace.from_events(ev)

    def append(self, events) -> None:
        """Adds events. Refused while an array from .events or .requests is alive: those are
        views of memory that appending may move (copy them with np.array to keep them)."""
        arr = np.ascontiguousarray(events, dtype=EVENT_DTYPE)
        if len(arr):
            if len(self._views):
                raise InvalidArgumentError(
                    "trace: cannot append while arrays from .events or .requests are alive "
                    "(appending moves the memory they view); copy them with np.array or drop them")
            ptr = ffi.cast("const stalloc_event_t*", arr.ctypes.data)
            check(lib.stalloc_trace_append(self._handle, ptr, len(arr)))

    def save(self, path) -> None:
        """Writes the native format (atomically)."""
        check(lib.stalloc_trace_save(self._handle, _c_path(path)))

    @property
    def events(self) -> np.ndarray:
        """All events, a read-only view of EVENT_DTYPE."""
        ptr = ffi.new("const stalloc_event_t**")
        n = ffi.new("size_t*")
        check(lib.stalloc_trace_events(self._handle, ptr, n))
        return self._view(ptr[0], n[0], EVENT_DTYPE)

    @property
    def requests(self) -> np.ndarray:
        """All requests in alloc order, a read-only view of REQUEST_DTYPE."""
        ptr = ffi.new("const stalloc_request_t**")
        n = ffi.new("size_t*")
        check(lib.stalloc_trace_requests(self._handle, ptr, n))
        return self._view(ptr[0], n[0], REQUEST_DTYPE)

    @property
    def sizes(self) -> np.ndarray:
        """Requested bytes of every request."""
        return self.requests["size"]

    @property
    def lifetimes(self) -> np.ndarray:
        """(n, 2) array of [alloc_event, free_event) per request; unfreed ones end at len(self)."""
        r = self.requests
        end = np.where(r["free_event"] == NEVER_FREED, np.uint64(len(self)), r["free_event"])
        return np.stack([r["alloc_event"], end], axis=1)

    def _view(self, cptr, n: int, dtype: np.dtype) -> np.ndarray:
        address = int(ffi.cast("uintptr_t", cptr))
        view = _View(self, address, n, dtype)
        if n:
            self._views.add(view)
        arr = np.asarray(view).view(dtype)
        arr.flags.writeable = False
        return arr

    def summary(self) -> TraceSummary:
        s = ffi.new("stalloc_trace_summary_t*")
        lib.stalloc_trace_summary_init(s)
        check(lib.stalloc_trace_summary(self._handle, s))
        return TraceSummary(**{f: int(getattr(s, f)) for f in TraceSummary.__dataclass_fields__})

    @property
    def lower_bound(self) -> int:
        """The most requested bytes live at once: no allocator can reserve less."""
        return self.summary().lower_bound

    def __len__(self) -> int:
        n = ffi.new("size_t*")
        ptr = ffi.new("const stalloc_event_t**")
        check(lib.stalloc_trace_events(self._handle, ptr, n))
        return n[0]

    def __iter__(self) -> Iterator[np.void]:
        return iter(self.events)

    def __repr__(self) -> str:
        s = self.summary()
        return (f"<stalloc.Trace {s.events} events, {s.requests} requests, {s.steps} steps, "
                f"lower bound {s.lower_bound} B>")


class TraceWriter(OwnedHandle):
    """Streams events to a trace file with bounded memory; use as a context manager."""

    def __init__(self, path):
        out = ffi.new("stalloc_trace_writer_t**")
        check(lib.stalloc_trace_writer_open(_c_path(path), out))
        self._handle = out[0]

    def append(self, events) -> None:
        if self._handle is None:
            raise ValueError("trace writer is closed")
        arr = np.ascontiguousarray(events, dtype=EVENT_DTYPE)
        if len(arr):
            ptr = ffi.cast("const stalloc_event_t*", arr.ctypes.data)
            check(lib.stalloc_trace_writer_append(self._handle, ptr, len(arr)))

    @staticmethod
    def _release(handle) -> int:
        return lib.stalloc_trace_writer_close(handle)
