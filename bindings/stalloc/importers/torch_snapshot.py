"""Import a PyTorch CUDA memory snapshot as a stalloc event array.

The input is what ``torch.cuda.memory._snapshot()`` returns (a dict), or the pickle that
``torch.cuda.memory._dump_snapshot(path)`` writes of it (a JSON file of the same dict is
read too). Recording must have been on: ``torch.cuda.memory._record_memory_history()``.
Only the dict is read, so this module needs neither torch nor CUDA. The pickle is read with
an unpickler that refuses every class (the snapshot holds only dicts, lists, strings and
numbers), so a hostile file cannot run code.

What the snapshot holds (PyTorch 2.x): ``snapshot["device_traces"]`` is a list with one list
per device, oldest entry first (a ring buffer: ``max_entries`` keeps the newest). Each entry
is a dict with

* ``action``: ``alloc`` (a request served), ``free_requested`` (the program freed it),
  ``free_completed`` (the block is back in the allocator's pool: later than
  ``free_requested`` only when the block was used on other streams, ``record_stream``),
  ``segment_alloc`` / ``segment_free`` (cudaMalloc / cudaFree), ``segment_map`` /
  ``segment_unmap`` (expandable segments), ``snapshot``, ``oom`` (an allocation that failed),
  ``user_defined``;
* ``addr``: the block's address; ``size``: the requested bytes for alloc / free entries (the
  segment's for segment entries); ``stream``: the CUDA stream handle; ``time_us``; ``frames``.

Conversion: ``alloc`` -> ALLOC with a new request id; the free action chosen by ``free_on``
-> FREE of the latest live alloc at that address (a free whose alloc fell out of the ring
buffer or predates recording -> FREE flagged UNMATCHED); ``oom`` -> ALLOC_FAILED; the segment
and other actions carry no request and are skipped (counted in the info). The snapshot has no
step markers.

``free_on="completed"`` (the default) ends a request at ``free_completed``: the moment its
bytes can really be reused. Ending at ``free_requested`` would let a plan hand the bytes to
another tensor while another stream may still read them; the two coincide for blocks used on
one stream only. ``free_on="requested"`` gives the program's view instead.

A malformed snapshot raises ValueError naming the entry and the problem.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from typing import Any

from ._pointer_log import PointerLog

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom", "user_defined")

__all__ = ["load_torch_snapshot", "events_from_snapshot", "read_snapshot", "ACTIONS"]


class _NoClassesUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"the pickle refers to {module}.{name}; a memory snapshot holds only plain data")


def read_snapshot(path) -> dict:
    """The snapshot dict from a ``_dump_snapshot`` pickle or a JSON file."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:1] == b"\x80":
        try:
            doc = _NoClassesUnpickler(io.BytesIO(raw)).load()
        except Exception as e:  # every unpickling failure is a format problem here
            raise ValueError(f"{path}: not a readable snapshot pickle ({e})") from None
    else:
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: neither a snapshot pickle nor JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: the snapshot is a {type(doc).__name__}, expected a dict")
    return doc


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def events_from_snapshot(snapshot: dict, device: int | None = None, free_on: str = "completed",
                         return_info: bool = False, where: str = "snapshot"):
    """Converts a snapshot dict; ``device`` picks ``device_traces[device]`` (``None``: the
    device with the most ``alloc`` entries, the first on ties)."""
    if free_on not in ("completed", "requested"):
        raise ValueError(f"free_on must be 'completed' or 'requested', not {free_on!r}")
    if not isinstance(snapshot, dict):
        raise ValueError(f"{where}: the snapshot is a {type(snapshot).__name__}, expected a dict")
    traces = snapshot.get("device_traces")
    if traces is None:
        raise ValueError(f"{where}: no 'device_traces' key; record with "
                         "torch.cuda.memory._record_memory_history() before taking the snapshot")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise ValueError(f"{where}: 'device_traces' must be a list of lists (one per device)")
    if device is None:
        counts = [sum(1 for e in t if isinstance(e, dict) and e.get("action") == "alloc")
                  for t in traces]
        device = max(range(len(counts)), key=lambda i: counts[i]) if counts else 0
    elif not (0 <= device < max(len(traces), 1)):
        raise ValueError(f"{where}: device {device} not in the snapshot "
                         f"({len(traces)} device trace(s))")
    entries = traces[device] if traces else []
    free_action = "free_completed" if free_on == "completed" else "free_requested"
    log = PointerLog(device)
    skipped: dict[str, int] = {}
    ooms = 0
    for i, e in enumerate(entries):
        at = f"{where}: device_traces[{device}][{i}]"
        if not isinstance(e, dict):
            raise ValueError(f"{at}: a {type(e).__name__}, expected a dict")
        action = e.get("action")
        if action not in ACTIONS:
            raise ValueError(f"{at}: unknown action {action!r}")
        if action not in ("alloc", free_action, "oom"):
            skipped[action] = skipped.get(action, 0) + 1
            continue
        for key in ("addr", "size") if action != "oom" else ("size",):
            if not _is_int(e.get(key)):
                raise ValueError(f"{at} ({action}): {key!r} is {e.get(key)!r}, expected an integer")
        if e["size"] < 0:
            raise ValueError(f"{at} ({action}): negative size {e['size']}")
        stream = e.get("stream", 0)
        if not _is_int(stream):
            raise ValueError(f"{at} ({action}): 'stream' is {stream!r}, expected an integer")
        if action == "oom":
            ooms += 1
            log.failed(e["size"], stream)
        elif action == "alloc":
            log.alloc(e["addr"], e["size"], stream)
        else:
            log.free(e["addr"], e["size"], stream)
    events = log.events()
    if not return_info:
        return events
    info = log.info()
    info.update({"device": device, "devices": len(traces), "free_on": free_on, "ooms": ooms,
                 "skipped_actions": skipped})
    return events, info


def load_torch_snapshot(path, device: int | None = None, free_on: str = "completed",
                        return_info: bool = False):
    """Reads a ``_dump_snapshot`` pickle (or JSON) and converts it (see the module doc)."""
    path = os.fspath(path)
    return events_from_snapshot(read_snapshot(path), device=device, free_on=free_on,
                                return_info=return_info, where=path)
