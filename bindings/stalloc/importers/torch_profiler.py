"""Import PyTorch profiler Chrome-trace JSON as a stalloc event array.

The input is the file written by
``torch.profiler.profile(profile_memory=True, ...).export_chrome_trace(path)``
(plain JSON, or gzip-compressed: detected from the content, not the name).
Only the JSON is read, so this module needs numpy but not torch.

What the profiler writes (checked against torch 2.13):

* every allocator call while memory profiling is active becomes an instant
  event ``{"ph": "i", "name": "[memory]", "ts": <us, float>, "tid": ...,
  "args": {...}}`` whose args are

  - ``"Addr"``: the pointer, an integer;
  - ``"Bytes"``: the size, positive for an allocation, negative for a free
    (a free carries minus the size of the block it releases);
  - ``"Device Type"``: c10 DeviceType (0 = CPU, 1 = CUDA, ...);
  - ``"Device Id"``: device index (-1 for the CPU);
  - ``"Total Allocated"``: the allocator's live bytes right after this call,
    counted over the blocks it has tracked since memory profiling was first
    enabled in the process (for CPU: a running sum in c10's
    ProfiledCPUMemoryReporter; for CUDA: the caching allocator's allocated
    bytes, which includes memory allocated before profiling started);
  - ``"Total Reserved"``: bytes held by the caching allocator (0 on CPU);
  - ``"Ev Idx"``, ``"finished"``: bookkeeping, ignored here.

  Blocks allocated before profiling started are not reported when freed on
  the CPU; on CUDA their frees appear and are counted as unmatched.
* a failed allocation becomes ``"[OutOfMemory]"`` with ``Bytes``,
  ``Device Type``, ``Device Id`` (CUDA only in practice).
* ``prof.step()`` with a ``schedule=`` records complete events
  ``{"ph": "X", "name": "ProfilerStep#N", "ts": ...}``; without a schedule
  no step annotations are written.

Conversion rules:

* All ``[memory]``/``[OutOfMemory]`` events of the selected device and all
  ``ProfilerStep#N`` events are sorted by timestamp (stable: ties keep file
  order; in exported files the step annotations come before the memory events,
  so a step marker precedes an allocation with the same timestamp).
* A positive ``Bytes`` is an ALLOC with a new request id (1, 2, 3, ... in time
  order). A negative one is a FREE of the latest live allocation at that
  address; it gets that allocation's id and size. A free whose address has no
  live allocation is skipped and counted in ``info["unmatched_frees"]``; a
  free whose size differs from the allocation's is kept (with the
  allocation's size) and counted in ``info["size_mismatches"]``. Events with
  ``Bytes == 0`` are skipped (``info["zero_size"]``).
* ``ProfilerStep#N`` becomes a STEP event with ``id = N`` at its start time.
* ``[OutOfMemory]`` becomes ALLOC_FAILED with a fresh request id, address 0.
* ``thread`` is the event's ``tid`` (0 when not an integer); ``stream`` and
  ``flags`` are 0 (the profiler does not record streams); ``device`` is the
  profiler's Device Id (-1 for the CPU).

A malformed file raises ``ValueError`` that names the problem and, for a bad
event, its index in ``traceEvents``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

try:  # the package-wide definition, once bindings/stalloc/trace.py exists
    from ..trace import EVENT_DTYPE  # type: ignore
except Exception:  # pragma: no cover - exercised before trace.py exists
    EVENT_DTYPE = np.dtype([
        ("id", "<u8"), ("size", "<u8"), ("address", "<u8"), ("stream", "<u8"),
        ("thread", "<u4"), ("device", "<i2"), ("kind", "u1"), ("flags", "u1"),
    ])

ALLOC = 1
FREE = 2
STEP = 3
ALLOC_FAILED = 4

MEMORY_EVENT = "[memory]"
OOM_EVENT = "[OutOfMemory]"
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

DEVICE_TYPES = {"cpu": 0, "cuda": 1}

__all__ = ["load_profiler_json", "EVENT_DTYPE", "ALLOC", "FREE", "STEP", "ALLOC_FAILED"]

DeviceSpec = Union[None, str, int, Tuple[int, int]]


def _read_json(path: Union[str, os.PathLike]) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read profiler trace: {e}") from e
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise ValueError(f"{path}: corrupt gzip data: {e}") from e
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON (truncated?): {e}") from e


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _parse_device(device: DeviceSpec) -> Optional[Tuple[int, int]]:
    """Turn a device spec into (Device Type, Device Id); None means 'pick'."""
    if device is None:
        return None
    if isinstance(device, tuple) and len(device) == 2 and all(_is_int(x) for x in device):
        return (int(device[0]), int(device[1]))
    if _is_int(device):
        return (0, -1) if device < 0 else (1, int(device))
    if isinstance(device, str):
        name, _, idx = device.strip().lower().partition(":")
        if name == "cpu" and idx in ("", "-1", "0"):
            return (0, -1)
        if name == "cuda":
            if idx == "":
                return (1, 0)
            if idx.isdigit():
                return (1, int(idx))
    raise ValueError(f"unrecognised device {device!r}: use None, 'cpu', 'cuda:N', "
                     "an int (-1 = CPU, N >= 0 = cuda:N) or a (Device Type, Device Id) tuple")


def load_profiler_json(path: Union[str, os.PathLike], device: DeviceSpec = None,
                       return_info: bool = False):
    """Read a PyTorch profiler Chrome trace and return stalloc events.

    Parameters
    ----------
    path:
        The ``.json`` or gzip-compressed ``.json.gz`` file.
    device:
        Which device's allocator to keep. ``None`` (default) keeps the device
        with the most ``[memory]`` events (ties: the first seen in the file).
        Otherwise ``'cpu'``, ``'cuda'``/``'cuda:N'``, an int (``-1`` = CPU,
        ``N >= 0`` = ``cuda:N``) or a ``(Device Type, Device Id)`` tuple.
    return_info:
        If true, return ``(events, info)`` where ``info`` is a dict with
        ``device`` (the (type, id) kept, or None if there were no memory
        events), ``unmatched_frees`` (frees skipped because no live
        allocation had their address), ``size_mismatches``, ``zero_size``,
        ``other_device_events`` (memory events of devices not kept),
        ``steps`` (number of STEP events) and ``live_at_end`` (allocations
        never freed).

    Returns
    -------
    numpy.ndarray of ``EVENT_DTYPE`` (or ``(array, info)``).
    """
    want = _parse_device(device)
    doc = _read_json(path)
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise ValueError(f"{path}: no 'traceEvents' key; not a Chrome trace")
        events = doc["traceEvents"]
    elif isinstance(doc, list):
        events = doc
    else:
        raise ValueError(f"{path}: top level is {type(doc).__name__}, "
                         "expected an object with 'traceEvents' or a list")
    if not isinstance(events, list):
        raise ValueError(f"{path}: 'traceEvents' is {type(events).__name__}, expected a list")

    # Pass 1: collect (ts, file index, kind, payload) for relevant events.
    mem: List[Tuple[float, int, int, int, int, Tuple[int, int], int]] = []  # ts, idx, bytes, addr, tid, dev, is_oom
    steps: List[Tuple[float, int, int, int]] = []  # ts, idx, step, tid
    counts: Dict[Tuple[int, int], int] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise ValueError(f"{path}: traceEvents[{i}] is {type(ev).__name__}, expected an object")
        name = ev.get("name")
        if not isinstance(name, str):
            continue  # metadata and flow events without a name are irrelevant
        if name == MEMORY_EVENT or name == OOM_EVENT:
            where = f"{path}: traceEvents[{i}] ({name})"
            ts = ev.get("ts")
            if not _is_num(ts):
                raise ValueError(f"{where}: missing or non-numeric 'ts' ({ts!r})")
            args = ev.get("args")
            if not isinstance(args, dict):
                raise ValueError(f"{where}: missing or non-object 'args'")
            fields = ("Bytes", "Device Type", "Device Id")
            if name == MEMORY_EVENT:
                fields = ("Addr",) + fields
            for key in fields:
                if key not in args:
                    raise ValueError(f"{where}: args lack {key!r}")
                if not _is_int(args[key]):
                    raise ValueError(f"{where}: args[{key!r}] = {args[key]!r} is not an integer")
            nbytes = args["Bytes"]
            addr = args.get("Addr", 0) if name == MEMORY_EVENT else 0
            if name == OOM_EVENT and nbytes < 0:
                raise ValueError(f"{where}: negative 'Bytes' {nbytes}")
            dev = (args["Device Type"], args["Device Id"])
            counts[dev] = counts.get(dev, 0) + 1
            tid = ev.get("tid")
            tid = tid & 0xFFFFFFFF if _is_int(tid) else 0
            mem.append((float(ts), i, nbytes, addr & 0xFFFFFFFFFFFFFFFF, tid, dev,
                        1 if name == OOM_EVENT else 0))
        elif name.startswith("ProfilerStep#"):
            m = _STEP_RE.match(name)
            if m is None:
                raise ValueError(f"{path}: traceEvents[{i}]: bad step annotation name {name!r}")
            ts = ev.get("ts")
            if not _is_num(ts):
                raise ValueError(f"{path}: traceEvents[{i}] ({name}): missing or non-numeric 'ts' ({ts!r})")
            tid = ev.get("tid")
            tid = tid & 0xFFFFFFFF if _is_int(tid) else 0
            steps.append((float(ts), i, int(m.group(1)), tid))

    if want is None and counts:
        # max() keeps the first maximum; dicts keep first-seen order.
        want = max(counts, key=lambda d: counts[d])
    device_id = want[1] if want is not None else 0

    merged: List[Tuple[float, int, int, tuple]] = []
    for ts, i, step, tid in steps:
        merged.append((ts, i, STEP, (step, tid)))
    other = 0
    for ts, i, nbytes, addr, tid, dev, oom in mem:
        if dev != want:
            other += 1
            continue
        merged.append((ts, i, ALLOC_FAILED if oom else ALLOC, (nbytes, addr, tid)))
    merged.sort(key=lambda r: (r[0], r[1]))

    rows: List[Tuple[int, int, int, int, int, int, int, int]] = []
    live: Dict[int, List[Tuple[int, int]]] = {}  # addr -> stack of (id, size)
    next_id = 1
    unmatched = mismatched = zero = 0
    nsteps = 0
    for ts, i, kind, payload in merged:
        # row layout: id, size, address, stream, thread, device, kind, flags
        if kind == STEP:
            step, tid = payload
            rows.append((step, 0, 0, 0, tid, device_id, STEP, 0))
            nsteps += 1
            continue
        nbytes, addr, tid = payload
        if kind == ALLOC_FAILED:
            rows.append((next_id, nbytes, 0, 0, tid, device_id, ALLOC_FAILED, 0))
            next_id += 1
        elif nbytes > 0:
            live.setdefault(addr, []).append((next_id, nbytes))
            rows.append((next_id, nbytes, addr, 0, tid, device_id, ALLOC, 0))
            next_id += 1
        elif nbytes < 0:
            stack = live.get(addr)
            if not stack:
                unmatched += 1
                continue
            rid, size = stack.pop()
            if not stack:
                del live[addr]
            if size != -nbytes:
                mismatched += 1
            rows.append((rid, size, addr, 0, tid, device_id, FREE, 0))
        else:
            zero += 1
    out = np.array(rows, dtype=EVENT_DTYPE) if rows else np.zeros(0, dtype=EVENT_DTYPE)
    if not return_info:
        return out
    info = {
        "device": want,
        "unmatched_frees": unmatched,
        "size_mismatches": mismatched,
        "zero_size": zero,
        "other_device_events": other,
        "steps": nsteps,
        "live_at_end": sum(len(s) for s in live.values()),
    }
    return out, info
