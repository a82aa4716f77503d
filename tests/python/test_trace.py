"""Traces from Python: record mode round trip (C writer, Python and C readers agree), numpy
views, checked construction, and damaged files giving clear errors."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import stalloc
from stalloc.trace import ALLOC, FREE, FLAG_UNMATCHED, STEP


def record_toy_run(path, steps=3):
    with stalloc.Allocator(record_path=path) as a:
        weights = [a.alloc(4096 * (i + 1)) for i in range(3)]
        for step in range(steps):
            a.step(step)
            acts = [a.alloc(1000 * (i + 1), stream=7) for i in range(5)]
            for p in reversed(acts):
                a.free(p)
        for w in weights:
            a.free(w)


def test_record_round_trip(tmp_path):
    path = tmp_path / "run.stalloc"
    record_toy_run(path)
    t = stalloc.Trace.load(path)
    ev = t.events
    assert len(t) == len(ev) == 3 + 3 * (1 + 10) + 3
    assert ev["kind"].tolist().count(STEP) == 3
    assert (ev["thread"] > 0).all()
    s = t.summary()
    assert s.requests == 18 and s.steps == 3 and s.unfreed_requests == 0
    assert s.lower_bound == 4096 * 6 + 15000
    # Identical after a save/load through Python, and through the streaming writer.
    t.save(tmp_path / "copy.stalloc")
    assert np.array_equal(stalloc.Trace.load(tmp_path / "copy.stalloc").events, ev)
    with stalloc.TraceWriter(tmp_path / "streamed.stalloc") as w:
        w.append(ev[:10])
        w.append(ev[10:])
    assert np.array_equal(stalloc.Trace.load(tmp_path / "streamed.stalloc").events, ev)
    assert stalloc.load_trace(tmp_path / "streamed.stalloc").summary() == s


def test_views_sizes_and_lifetimes(tmp_path):
    path = tmp_path / "run.stalloc"
    record_toy_run(path, steps=2)
    t = stalloc.Trace.load(path)
    r = t.requests
    assert r.dtype == stalloc.REQUEST_DTYPE and len(r) == 13
    assert t.sizes.tolist()[:3] == [4096, 8192, 12288]
    life = t.lifetimes
    assert (life[:, 1] > life[:, 0]).all()
    ev = t.events
    for req, (start, end) in zip(r, life):
        assert ev[start]["kind"] == ALLOC and ev[end]["kind"] == FREE
        assert ev[start]["id"] == ev[end]["id"] == req["id"]
    with pytest.raises(ValueError):
        ev["size"][0] = 1  # read-only view
    del t  # views keep the trace alive
    assert ev["size"].sum() > 0


def test_from_events_checks(tmp_path):
    ev = np.zeros(3, dtype=stalloc.EVENT_DTYPE)
    ev["kind"] = [ALLOC, FREE, FREE]
    ev["id"] = [1, 1, 1]
    ev["size"] = [100, 100, 100]
    with pytest.raises(stalloc.BadFormatError, match="event 2: free of request id 1, which is not live"):
        stalloc.Trace.from_events(ev)
    t = stalloc.Trace.from_events(ev[:2])
    assert t.lower_bound == 100
    ev[2]["flags"] = FLAG_UNMATCHED
    assert stalloc.Trace.from_events(ev).summary().unmatched_frees == 1


def test_scaled_multiplies_sizes_and_keeps_the_order(tmp_path):
    path = tmp_path / "run.stalloc"
    record_toy_run(path)
    t = stalloc.Trace.load(path)
    before = np.array(t.events)
    big = t.scaled(256)
    ev = big.events
    assert (ev["kind"] == before["kind"]).all() and (ev["id"] == before["id"]).all()
    assert (ev["size"] == before["size"] * 256).all()
    assert big.lower_bound == 256 * t.lower_bound
    assert (t.events["size"] == before["size"]).all()  # the original is left as it was
    some = t.scaled(2, min_size=4096)  # requests under 4 KiB stay as they are, the others double
    sizes = some.events["size"][before["kind"] == ALLOC]
    old = before["size"][before["kind"] == ALLOC]
    assert (sizes == np.where(old >= 4096, old * 2, old)).all()
    with pytest.raises(stalloc.InvalidArgumentError, match="at least 1"):
        t.scaled(0)
    with pytest.raises(stalloc.InvalidArgumentError, match="64 bits"):
        t.scaled(2**62)


def test_damaged_files(tmp_path):
    path = tmp_path / "run.stalloc"
    record_toy_run(path, steps=50)
    data = path.read_bytes()
    bad = tmp_path / "bad.stalloc"
    for cut in (0, 5, 31, 32, 40, len(data) // 2, len(data) - 1):
        bad.write_bytes(data[:cut])
        with pytest.raises(stalloc.BadFormatError):
            stalloc.Trace.load(bad)
    bad.write_bytes(data[:-16])
    with pytest.raises(stalloc.TruncatedError, match="no end marker"):
        stalloc.Trace.load(bad)
    rng = random.Random(1)
    for _ in range(100):
        flipped = bytearray(data)
        i = rng.randrange(len(data))
        flipped[i] ^= 1 << rng.randrange(8)
        bad.write_bytes(bytes(flipped))
        with pytest.raises(stalloc.BadFormatError):
            stalloc.Trace.load(bad)
    for n in (1, 100, 10_000):
        bad.write_bytes(os.urandom(n))
        with pytest.raises(stalloc.BadFormatError):
            stalloc.Trace.load(bad)
    with pytest.raises(stalloc.StallocIOError, match="cannot open"):
        stalloc.Trace.load(tmp_path / "missing.stalloc")


def test_million_events_load_quickly(tmp_path):
    """The format's promise (1M events load in under a second) is measured in
    bench/bench_trace_io.py; here only that a big file loads and round-trips."""
    n = 200_000
    ev = np.zeros(2 * n, dtype=stalloc.EVENT_DTYPE)
    ev["kind"][0::2] = ALLOC
    ev["kind"][1::2] = FREE
    ev["id"][0::2] = ev["id"][1::2] = np.arange(1, n + 1)
    ev["size"] = np.repeat(np.arange(1, n + 1) % 4096 + 1, 2)
    path = tmp_path / "big.stalloc"
    stalloc.Trace.from_events(ev).save(path)
    assert np.array_equal(stalloc.Trace.load(path).events, ev)


def test_free_of_request_id_0_is_refused(tmp_path):
    # issue 13 item 1: the id map's empty key paired this free with the first request
    ev = np.array([(1, 64, 0, 0, 0, 0, 1, 0), (0, 0, 0, 0, 0, 0, 2, 0)], dtype=stalloc.EVENT_DTYPE)
    assert ev["kind"].tolist() == [ALLOC, FREE]
    with pytest.raises(stalloc.BadFormatError, match="event 1: free with request id 0"):
        stalloc.Trace.from_events(ev)
    with stalloc.TraceWriter(tmp_path / "zero.stalloc") as w:  # the writer does not pair
        w.append(ev)
    with pytest.raises(stalloc.BadFormatError, match="request id 0"):
        stalloc.Trace.load(tmp_path / "zero.stalloc")


def test_views_never_outlive_their_memory():
    # issue 13 item 2: append moved the C array under an earlier view (use after free)
    ev = np.zeros(2, dtype=stalloc.EVENT_DTYPE)
    ev["kind"], ev["id"], ev["size"] = [ALLOC, FREE], [1, 1], [100, 100]
    t = stalloc.Trace.from_events(ev)
    view = t.events
    more = np.tile(ev, 4096)
    more["id"] = np.repeat(np.arange(2, 4098), 2)
    with pytest.raises(stalloc.InvalidArgumentError, match="cannot append while arrays"):
        t.append(more)
    assert view[0]["id"] == 1 and len(t) == 2
    copied = np.array(view)
    sizes = t.requests["size"]  # a view too, through its base
    del view
    with pytest.raises(stalloc.InvalidArgumentError):
        t.append(more)
    del sizes
    t.append(more)
    assert len(t) == 2 + len(more) and copied[0]["id"] == 1
