"""Writes the fuzz targets' seed corpus (tests/fuzz/corpus/<target>/), small valid inputs that
the fuzzers mutate: native traces and plans made by stalloc itself, compact event codes for
fuzz_replay, option strings, placement items for fuzz_place. Run with the stalloc package
installed:

    python tests/fuzz/make_seeds.py

Each trace and plan seed starts with the targets' mode byte (1: fix the checksums)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import stalloc
from stalloc.trace import ALLOC, EVENT_DTYPE, FREE, STEP, Trace

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
TRACES = HERE.parents[1] / "tests" / "data" / "traces"


def periodic_rows(steps: int = 4, scale: int = 1):
    """A small training loop: a weight and a tiny buffer that live on, per step a few
    activations (one of varying size, one freed in the next step); sizes times `scale`."""
    rows, rid, carried = [], 0, None

    def alloc(size):
        nonlocal rid
        rid += 1
        size *= scale
        rows.append((rid, size, 0, 0, 0, 0, ALLOC, 0))
        return rid, size

    def free(req):
        rows.append((req[0], req[1], 0, 0, 0, 0, FREE, 0))

    alloc(1 << 20)  # a weight
    alloc(256)      # tiny and persistent
    for step in range(steps):
        rows.append((step, 0, 0, 0, 0, 0, STEP, 0))
        a, b = alloc(4096), alloc(65536)
        c = alloc(8192 * (1 + step % 2))  # varies: dynamic
        free(b)
        d = alloc(2048)
        if carried:
            free(carried)
        free(c)
        free(a)
        free(d)
        carried = alloc(512 * 3)  # lives into the next step
    return np.array(rows, dtype=EVENT_DTYPE)


def compact(events) -> bytes:
    """fuzz_replay's code: kind, id, size as (byte2 + 1) << byte3 (sizes are rounded to that)."""
    kinds = {ALLOC: 0, FREE: 1, STEP: 2}
    out = bytearray()
    for e in events:
        size = int(e["size"])
        shift = max(0, size.bit_length() - 8)
        out += bytes([kinds[int(e["kind"])], int(e["id"]) & 0xFF,
                      max(0, (size >> shift) - 1) if size else 0, shift | (64 if not size else 0)])
    return bytes(out)


def place_records(items) -> bytes:
    """fuzz_place's item records: (lower, length, size, fixed, offset or gap) each."""
    out = bytearray()
    for lower, length, size, fixed, at in items:
        out += lower.to_bytes(2, "little") + bytes([length]) + size.to_bytes(2, "little")
        out += bytes([1 if fixed else 0]) + at.to_bytes(2, "little")
    return bytes(out)


def place_seeds():
    """A step's requests around blocks in use (three fixed, stacked with gaps, living
    throughout) and a random mix with one item in ten fixed; a few parameter bytes
    each."""
    rng = np.random.default_rng(3)
    around = [(0, 255, 64, True, 0), (0, 255, 96, True, 32), (0, 255, 40, True, 16)]
    around += [(int(a), int(b), int(c), False, 0) for a, b, c in
               zip(rng.integers(0, 200, 40), rng.integers(1, 50, 40), rng.integers(1, 64, 40))]
    mixed = [(int(a), int(b), int(c), bool(f), int(g)) for a, b, c, f, g in
             zip(rng.integers(0, 1000, 120), rng.integers(1, 255, 120), rng.integers(1, 4096, 120),
                 rng.random(120) < 0.1, rng.integers(0, 8, 120))]
    yield "around_search", b"\x04" + place_records(around)
    yield "around_aligned", b"\x06" + place_records(around)
    yield "mixed_search_4k", b"\x0d" + place_records(mixed)
    yield "mixed_as_given", b"\x24" + place_records(mixed)
    yield "mixed_huge", b"\x18" + place_records(mixed)


def write(target: str, name: str, data: bytes) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        loop = Trace.from_events(periodic_rows())
        gpt2 = stalloc.load_trace(TRACES / "gpt2_plain.npz")
        prefix = Trace.from_events(np.asarray(gpt2.events)[:200])
        for name, trace in (("loop", loop), ("gpt2_prefix", prefix)):
            trace.save(tmp / f"{name}.stalloc")
            raw = (tmp / f"{name}.stalloc").read_bytes()
            write("fuzz_trace_load", f"{name}_fix", b"\x01" + raw)
            write("fuzz_trace_load", f"{name}_asis", b"\x00" + raw)
        for name, kwargs in (("periodic", {}), ("static", {"detect_period": False}),
                             ("unclassified", {"classify": False})):
            stalloc.plan(loop, time_limit=0, **kwargs).save(tmp / f"{name}.stplan")
            raw = (tmp / f"{name}.stplan").read_bytes()
            write("fuzz_plan_load", f"{name}_fix", b"\x01" + raw)
            write("fuzz_plan_load", f"{name}_asis", b"\x00" + raw)
        write("fuzz_replay", "loop_default", b"\x17" + compact(periodic_rows()))
        write("fuzz_replay", "loop_host", b"\x37" + compact(periodic_rows(3)))
        write("fuzz_replay", "loop_tolerant", b"\x1f" + compact(periodic_rows(6)))
        # Online (bit 6), sizes from 8 KiB to 32 MiB so the growable pool maps granules and
        # small requests go low; with a lagging device too (bit 7).
        write("fuzz_replay", "loop_online", b"\x57" + compact(periodic_rows(8, 32)))
        write("fuzz_replay", "loop_online_lag", b"\xdf" + compact(periodic_rows(8, 32)))
        write("fuzz_replay", "gpt2_prefix", b"\x17" + compact(np.asarray(gpt2.events)[:120]))
    for name, data in place_seeds():
        write("fuzz_place", name, data)
    for name, values in (("defaults", [""] * 8),
                         ("sizes", ["virtual", "0", "4KiB", "1g", "64 MiB", "", "32", "1"]),
                         ("host", ["host", "1", "512", "0", "1T", "", "0", "0"]),
                         ("bad", ["cuda", "-1", "3k", "99999999999999999999", "x", "", "12", "7"])):
        write("fuzz_options", name, "\0".join(values).encode())


if __name__ == "__main__":
    main()
