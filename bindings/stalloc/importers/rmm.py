"""Import a RAPIDS RMM memory-event log (CSV) as a stalloc event array.

RMM's ``logging_resource_adaptor`` (Python: ``rmm.mr.LoggingResourceAdaptor``, or the
``RMM_LOG_FILE`` variable) writes one header line and one row per call::

    Thread,Time,Action,Pointer,Size,Stream
    140573312345856,12:34:56.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020
    140573312345856,12:34:56.123470,free,0x7f8a40000000,1024,0x7f8a38001020

(the adaptor's row pattern is ``%t,%H:%M:%S.%f,%v`` with ``%v`` = ``action,%p,%zu,stream``).

* Thread: the calling thread's id (an integer; kept modulo 2**32 as the event's ``thread``).
* Time: a timestamp (``HH:MM:SS.us`` from the adaptor; older notes say ``HH:MM:SS:us`` and
  RMM's guide shows seconds since the epoch). Rows are taken in file order, which is time
  order: RMM's own replay benchmark relies on that too, so Time is only checked to be present.
* Action: ``allocate``, ``allocate failure`` or ``free`` (``deallocate``, as RMM's user
  guide spells it, is read as ``free``).
* Pointer: ``%p`` output, hexadecimal with or without ``0x``; ``(nil)`` for a failed
  allocation.
* Size: bytes, decimal. Stream: the CUDA stream handle, written with ``std::hex``: hexadecimal
  with or without ``0x`` (``0`` is the default stream).

Conversion: ``allocate`` -> ALLOC with a new request id; ``free`` -> FREE of the latest live
allocation at that pointer (its id and size); a free of a pointer with no live allocation ->
FREE flagged UNMATCHED; ``allocate failure`` -> ALLOC_FAILED. RMM logs carry no step markers
and no device; ``device`` sets the events' device (default 0).

A malformed file raises ValueError naming the line and the problem.
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np

from ._pointer_log import PointerLog

HEADER = ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
ACTIONS = {"allocate": "alloc", "allocate failure": "failed", "free": "free",
           "deallocate": "free"}

__all__ = ["load_rmm_csv", "HEADER", "looks_like_rmm_csv"]


def looks_like_rmm_csv(head: bytes) -> bool:
    """True when the first line is RMM's header (used by format detection)."""
    first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].strip()
    return [c.strip() for c in first.decode("utf-8", "replace").split(",")] == list(HEADER)


def _int(text: str, what: str, where: str, hex_default: bool = False) -> int:
    t = text.strip()
    try:
        if t.lower().startswith("0x"):
            v = int(t, 16)
        elif hex_default:
            v = int(t, 16)
        else:
            v = int(t, 10)
    except ValueError:
        raise ValueError(f"{where}: {what} {text!r} is not a{' hexadecimal' if hex_default else 'n'} integer") from None
    if v < 0:
        raise ValueError(f"{where}: {what} {text!r} is negative")
    return v


def load_rmm_csv(path, device: int = 0, return_info: bool = False):
    """Reads an RMM log CSV; returns an EVENT_DTYPE array (and an info dict if asked)."""
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a text file ({e})") from None
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    try:
        header = next(reader)
    except StopIteration:
        raise ValueError(f"{path}: empty file; expected the header {','.join(HEADER)}") from None
    if [h.strip() for h in header] != list(HEADER):
        raise ValueError(f"{path}:1: header is {','.join(header)!r}, expected {','.join(HEADER)!r}")
    log = PointerLog(device)
    failures = 0
    for row in reader:
        line = reader.line_num
        where = f"{path}:{line}"
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(HEADER):
            raise ValueError(f"{where}: {len(row)} fields, expected {len(HEADER)} ({','.join(HEADER)})")
        thread_s, time_s, action_s, ptr_s, size_s, stream_s = row
        action = ACTIONS.get(action_s.strip())
        if action is None:
            raise ValueError(f"{where}: unknown action {action_s!r} (expected allocate, "
                             "allocate failure or free)")
        if not time_s.strip():
            raise ValueError(f"{where}: empty Time")
        thread = _int(thread_s, "Thread", where)
        size = _int(size_s, "Size", where)
        stream = _int(stream_s, "Stream", where, hex_default=True)
        if action == "failed":
            failures += 1
            log.failed(size, stream, thread)
            continue
        if ptr_s.strip() == "(nil)":
            raise ValueError(f"{where}: {action_s.strip()} of a null pointer")
        ptr = _int(ptr_s, "Pointer", where, hex_default=True)
        if action == "alloc":
            log.alloc(ptr, size, stream, thread)
        else:
            log.free(ptr, size, stream, thread)
    events = log.events()
    if not return_info:
        return events
    info = log.info()
    info["failed_allocs"] = failures
    return events, info
