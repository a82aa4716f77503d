"""Import the reference STAlloc tracer's text log (``mem_log_dev<N>.txt``) as stalloc events.

The reference implementation (STAlloc, arXiv 2507.16274) traces a Megatron-LM run through a
pluggable allocator that appends one line per call, and the trainer's hooks add marker lines:

    Iteration Index : 0          a training iteration starts ("end" after the last one)
    1 0x7f1e41329c00 4096 0      malloc: 1, pointer, size in bytes, stream
    0 0x7f1e41329c00 4096 0      free:   0, pointer, size, stream
    micro-batch : F              pipeline phase markers (F, B or W)
    decoder.layers.0.mlp->(MoELayer) Layer : F-start     module markers

Pointers and streams are C++ ``void*`` output: ``0x``-hexadecimal, or ``0`` for null.

Conversion: ``1`` -> ALLOC with a new request id; ``0`` -> FREE of the latest live alloc at
that pointer (a free with none -> FREE flagged UNMATCHED); ``Iteration Index : N`` -> STEP
with id N; ``Iteration Index : end`` -> STEP with id one above the largest seen (the tail,
where the reference tracer stops caring); phase and module markers are skipped (counted as
``annotations``). Null pointers (size-0 requests) are skipped. All events get ``device``.

A malformed line raises ValueError naming the line number and the problem.
"""

from __future__ import annotations

import os

import numpy as np

from ._pointer_log import PointerLog

ITERATION = "Iteration Index"

__all__ = ["load_stalloc_log", "looks_like_stalloc_log"]


def looks_like_stalloc_log(head: bytes) -> bool:
    """True when the first non-empty line is an iteration marker or a 4-field event line."""
    for line in head.decode("utf-8", "replace").splitlines():
        s = line.strip()
        if not s:
            continue
        if s.startswith(ITERATION):
            return True
        f = s.split()
        return len(f) == 4 and f[0] in ("0", "1") and (f[1] == "0" or f[1].startswith("0x")) \
            and f[2].isdigit()
    return False


def _num(text: str, what: str, where: str) -> int:
    try:
        v = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        raise ValueError(f"{where}: {what} {text!r} is not an integer") from None
    if v < 0:
        raise ValueError(f"{where}: {what} {text!r} is negative")
    return v


def load_stalloc_log(path, device: int = 0, return_info: bool = False):
    """Reads an STAlloc tracer log; returns an EVENT_DTYPE array (and an info dict if asked)."""
    path = os.fspath(path)
    log = PointerLog(device)
    annotations = nulls = 0
    top_step = -1
    try:
        f = open(path, "r", encoding="utf-8")
    except OSError:
        raise
    with f:
        try:
            lines = f.read().splitlines()
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not a text file ({e})") from None
    for n, raw in enumerate(lines, 1):
        where = f"{path}:{n}"
        line = raw.strip()
        if not line:
            continue
        if line.startswith(ITERATION):
            rest = line[len(ITERATION):].strip()
            if not rest.startswith(":"):
                raise ValueError(f"{where}: expected 'Iteration Index : N', got {line!r}")
            value = rest[1:].strip()
            if value == "end":
                top_step += 1
                log.step(top_step)
            elif value.isdigit():
                top_step = max(top_step, int(value))
                log.step(int(value))
            else:
                raise ValueError(f"{where}: iteration index {value!r} is neither a number nor 'end'")
            continue
        if "micro-batch" in line or " Layer " in line or "Layer :" in line:
            annotations += 1
            continue
        fields = line.split()
        if len(fields) != 4 or fields[0] not in ("0", "1"):
            raise ValueError(f"{where}: expected '1|0 <pointer> <size> <stream>' or a marker "
                             f"line, got {line[:80]!r}")
        ptr = _num(fields[1], "pointer", where)
        size = _num(fields[2], "size", where)
        stream = _num(fields[3], "stream", where)
        if ptr == 0:
            nulls += 1
            continue
        if fields[0] == "1":
            log.alloc(ptr, size, stream)
        else:
            log.free(ptr, size, stream)
    events = log.events()
    if not return_info:
        return events
    info = log.info()
    info.update({"annotations": annotations, "null_pointers": nulls})
    return events, info
