"""Tests of stalloc.importers.torch_profiler on real and malformed profiler JSON.

Needs numpy and pytest only (no torch): the shipped data in tests/data/traces
was recorded by tools/make_traces.py.
"""

import gzip
import importlib
import importlib.util
import json
import os

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(REPO, "tests", "data", "traces")
REAL_JSON = os.path.join(DATA, "llama_plain.profiler.json.gz")

EXPECTED_DTYPE = np.dtype([
    ("id", "<u8"), ("size", "<u8"), ("address", "<u8"), ("stream", "<u8"),
    ("thread", "<u4"), ("device", "<i2"), ("kind", "u1"), ("flags", "u1"),
])
ALLOC, FREE, STEP, ALLOC_FAILED = 1, 2, 3, 4


def _import_importer():
    try:
        return importlib.import_module("stalloc.importers.torch_profiler")
    except Exception:  # package not importable (e.g. compiled library not built)
        path = os.path.join(REPO, "bindings", "stalloc", "importers", "torch_profiler.py")
        spec = importlib.util.spec_from_file_location("_stalloc_torch_profiler", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


tp = _import_importer()
load = tp.load_profiler_json


# ---------------------------------------------------------------- helpers

def live_bytes(ev):
    size = ev["size"].astype(np.int64)
    delta = np.where(ev["kind"] == ALLOC, size, np.where(ev["kind"] == FREE, -size, 0))
    return np.cumsum(delta)


def check_pairing(ev):
    """Every FREE matches an earlier ALLOC with the same id, size and address."""
    allocs = {}
    freed = set()
    next_id = 1
    for t, row in enumerate(ev):
        kind, rid = int(row["kind"]), int(row["id"])
        if kind == ALLOC or kind == ALLOC_FAILED:
            assert rid == next_id, f"event {t}: ids must be 1, 2, 3, ... in alloc order"
            next_id += 1
            allocs[rid] = (t, int(row["size"]), int(row["address"]))
        elif kind == FREE:
            assert rid in allocs, f"event {t}: free of unknown id {rid}"
            assert rid not in freed, f"event {t}: double free of id {rid}"
            t0, size, addr = allocs[rid]
            assert t > t0, "negative lifetime"
            assert int(row["size"]) == size and int(row["address"]) == addr
            freed.add(rid)
        else:
            assert kind == STEP, f"event {t}: unknown kind {kind}"
            assert row["size"] == 0 and row["address"] == 0
    return allocs, freed


def memory_event(ts, addr, nbytes, dev_type=0, dev_id=-1, total=0, tid=1):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": 1, "tid": tid, "ts": ts,
            "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes,
                     "Device Id": dev_id, "Device Type": dev_type, "Addr": addr,
                     "finished": False, "Ev Idx": 0}}


def step_event(ts, n, tid=1):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
            "pid": 1, "tid": tid, "ts": ts, "dur": 1.0, "args": {}}


def write(tmp_path, doc, name="t.json", raw=None):
    p = tmp_path / name
    if raw is not None:
        p.write_bytes(raw)
    else:
        p.write_text(json.dumps(doc))
    return str(p)


def trace(events):
    return {"schemaVersion": 1, "traceEvents": events}


# ---------------------------------------------------------------- real data

@pytest.fixture(scope="module")
def real():
    if not os.path.exists(REAL_JSON):
        pytest.skip("shipped profiler JSON missing")
    ev, info = load(REAL_JSON, return_info=True)
    with gzip.open(REAL_JSON, "rt") as f:
        doc = json.load(f)
    return ev, info, doc


def test_dtype(real):
    ev, _, _ = real
    assert ev.dtype == EXPECTED_DTYPE
    assert tp.EVENT_DTYPE == EXPECTED_DTYPE


def test_real_pairing_and_info(real):
    ev, info, doc = real
    allocs, freed = check_pairing(ev)
    assert info["unmatched_frees"] == 0
    assert info["size_mismatches"] == 0
    assert info["device"] == (0, -1)  # the CPU
    assert (ev["device"] == -1).all()
    assert info["live_at_end"] == len(allocs) - len(freed)
    n_mem = sum(1 for e in doc["traceEvents"] if e.get("name") == "[memory]")
    assert int((ev["kind"] == ALLOC).sum() + (ev["kind"] == FREE).sum()) == n_mem


def test_real_step_markers(real):
    ev, info, doc = real
    steps = ev[ev["kind"] == STEP]
    names = [e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(steps) == len(names) == info["steps"] == 7  # construction + 6 optimizer steps
    assert steps["id"].tolist() == list(range(7))
    assert ev[0]["kind"] == STEP  # ProfilerStep#0 opens the recording
    # every step holds allocations, and steady-state steps have equal length
    pos = np.flatnonzero(ev["kind"] == STEP)
    lengths = np.diff(np.append(pos, len(ev))) - 1
    assert (lengths > 0).all()
    assert len(set(lengths[2:].tolist())) == 1


def test_real_time_order(real):
    """Events follow the profiler timestamps (memory events and step starts)."""
    ev, _, doc = real
    ts = sorted([e["ts"] for e in doc["traceEvents"]
                 if e.get("name") == "[memory]" or e.get("name", "").startswith("ProfilerStep#")])
    assert len(ts) == len(ev)
    # step n's marker lies between the memory events that happen before/after it
    starts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    mem_ts = np.array(sorted(e["ts"] for e in doc["traceEvents"] if e.get("name") == "[memory]"))
    pos = np.flatnonzero(ev["kind"] == STEP)
    for k, (p, s) in enumerate(zip(pos, starts)):
        assert p - k == np.searchsorted(mem_ts, s, side="left")


def test_real_live_bytes(real):
    """Live bytes never go negative and match the profiler's 'Total Allocated'.

    'Total Allocated' is the allocator's running total of live tracked bytes
    after each call (since memory profiling began), so the importer's live bytes
    equal it minus its value before the first event.
    """
    ev, _, doc = real
    live = live_bytes(ev)
    assert live.min() >= 0
    mem = sorted((e for e in doc["traceEvents"] if e.get("name") == "[memory]"),
                 key=lambda e: e["ts"])
    total = np.array([e["args"]["Total Allocated"] for e in mem], dtype=np.int64)
    nbytes = np.array([e["args"]["Bytes"] for e in mem], dtype=np.int64)
    base = total[0] - nbytes[0]
    assert base >= 0
    np.testing.assert_array_equal(np.cumsum(nbytes) + base, total)
    assert live.max() == total.max() - base
    assert 0 < live.max() <= total.max()
    # memory events only: the importer's running sum equals Total Allocated - base
    mem_live = live[ev["kind"] != STEP]
    np.testing.assert_array_equal(mem_live, total - base)


def test_real_matches_shipped_npz(real):
    ev, _, _ = real
    shipped = np.load(os.path.join(DATA, "llama_plain.npz"))["events"]
    assert shipped.dtype == EXPECTED_DTYPE
    np.testing.assert_array_equal(ev, shipped)


def test_plain_json_same_as_gz(real, tmp_path):
    ev, _, _ = real
    with gzip.open(REAL_JSON, "rb") as f:
        raw = f.read()
    p = write(tmp_path, None, "plain.json", raw=raw)
    np.testing.assert_array_equal(load(p), ev)


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(DATA) if f.endswith(".npz"))
                         if os.path.isdir(DATA) else [])
def test_shipped_npz_sane(name):
    ev = np.load(os.path.join(DATA, name))["events"]
    assert ev.dtype == EXPECTED_DTYPE
    check_pairing(ev)
    assert live_bytes(ev).min() >= 0
    steps = ev[ev["kind"] == STEP]
    assert steps["id"].tolist() == list(range(7))


@pytest.mark.parametrize("name", ["llama_plain", "llama_recompute", "llama_accum",
                                  "llama_1f1b", "gpt2_plain"])
def test_dense_steps_repeat(name):
    """After the first optimizer step, dense models repeat the same sizes."""
    path = os.path.join(DATA, name + ".npz")
    if not os.path.exists(path):
        pytest.skip("missing")
    ev = np.load(path)["events"]
    pos = list(np.flatnonzero(ev["kind"] == STEP)) + [len(ev)]
    seqs = [ev[a + 1:b][["kind", "size"]].tolist() for a, b in zip(pos[:-1], pos[1:])]
    assert len(seqs) == 7
    for s in seqs[3:]:
        assert s == seqs[2]
    assert len(seqs[1]) > len(seqs[2])  # step 1 also allocates the AdamW state


# ---------------------------------------------------------------- synthetic

def test_pairing_latest_live_alloc_and_unmatched(tmp_path):
    evs = [
        step_event(0.0, 0),
        memory_event(1.0, 100, 64),
        memory_event(2.0, 200, 32),
        memory_event(3.0, 300, -16),  # no live alloc at 300: skipped, counted
        memory_event(4.0, 100, -64),
        memory_event(5.0, 100, 128),  # address reused
        step_event(5.5, 1),
        memory_event(6.0, 100, -128),
    ]
    ev, info = load(write(tmp_path, trace(evs)), return_info=True)
    assert info["unmatched_frees"] == 1
    assert ev["kind"].tolist() == [STEP, ALLOC, ALLOC, FREE, ALLOC, STEP, FREE]
    assert ev["id"].tolist() == [0, 1, 2, 1, 3, 1, 3]
    assert ev["size"].tolist() == [0, 64, 32, 64, 128, 0, 128]
    assert ev["address"].tolist() == [0, 100, 200, 100, 100, 0, 100]
    assert info["live_at_end"] == 1
    check_pairing(ev)
    # without return_info: just the array
    assert isinstance(load(write(tmp_path, trace(evs))), np.ndarray)


def test_sorted_by_timestamp_ties_keep_file_order(tmp_path):
    evs = [
        memory_event(5.0, 100, -8),
        step_event(1.0, 0),
        memory_event(1.0, 100, 8),   # same ts as the step marker: after it (file order)
        step_event(3.0, 1),
    ]
    ev = load(write(tmp_path, trace(evs)))
    assert ev["kind"].tolist() == [STEP, ALLOC, STEP, FREE]


def test_device_selection_and_oom(tmp_path):
    evs = [
        memory_event(1.0, 10, 8),
        memory_event(2.0, 1000, 512, dev_type=1, dev_id=0),
        memory_event(3.0, 2000, 256, dev_type=1, dev_id=0),
        {"ph": "i", "name": "[OutOfMemory]", "ts": 3.5, "tid": 1,
         "args": {"Bytes": 4096, "Device Type": 1, "Device Id": 0,
                  "Total Allocated": 768, "Total Reserved": 1024}},
        memory_event(4.0, 1000, -512, dev_type=1, dev_id=0),
        memory_event(5.0, 10, -8),
    ]
    p = write(tmp_path, trace(evs))
    ev, info = load(p, return_info=True)  # CUDA has more events
    assert info["device"] == (1, 0)
    assert info["other_device_events"] == 2
    assert ev["kind"].tolist() == [ALLOC, ALLOC, ALLOC_FAILED, FREE]
    assert ev["id"].tolist() == [1, 2, 3, 1]
    assert ev[2]["size"] == 4096 and ev[2]["address"] == 0
    assert (ev["device"] == 0).all()
    for spec in ("cuda:0", "cuda", 0, (1, 0)):
        np.testing.assert_array_equal(load(p, device=spec), ev)
    cpu = load(p, device="cpu")
    assert cpu["kind"].tolist() == [ALLOC, FREE] and (cpu["device"] == -1).all()
    np.testing.assert_array_equal(load(p, device=-1), cpu)
    assert len(load(p, device="cuda:1")) == 0
    with pytest.raises(ValueError, match="device"):
        load(p, device="tpu")


def test_top_level_list_and_empty(tmp_path):
    ev = load(write(tmp_path, [memory_event(1.0, 10, 8)]))
    assert ev["kind"].tolist() == [ALLOC]
    empty = load(write(tmp_path, trace([])))
    assert empty.dtype == EXPECTED_DTYPE and len(empty) == 0


def test_zero_bytes_skipped(tmp_path):
    ev, info = load(write(tmp_path, trace([memory_event(1.0, 10, 0)])), return_info=True)
    assert len(ev) == 0 and info["zero_size"] == 1


# ---------------------------------------------------------------- malformed

def test_truncated_json(tmp_path):
    text = json.dumps(trace([memory_event(1.0, 10, 8), memory_event(2.0, 10, -8)]))
    p = write(tmp_path, None, raw=text[: len(text) // 2].encode())
    with pytest.raises(ValueError, match="JSON"):
        load(p)


def test_truncated_real_gzip(tmp_path):
    if not os.path.exists(REAL_JSON):
        pytest.skip("shipped profiler JSON missing")
    with open(REAL_JSON, "rb") as f:
        raw = f.read()
    p = write(tmp_path, None, "cut.json.gz", raw=raw[: len(raw) // 2])
    with pytest.raises(ValueError):
        load(p)
    # a gzip of truncated JSON text
    with gzip.open(REAL_JSON, "rb") as f:
        text = f.read()
    p = write(tmp_path, None, "cut2.json.gz", raw=gzip.compress(text[: len(text) // 3]))
    with pytest.raises(ValueError, match="JSON"):
        load(p)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load(str(tmp_path / "nope.json"))


@pytest.mark.parametrize("doc, pattern", [
    ({"foo": []}, "traceEvents"),
    ({"traceEvents": {"a": 1}}, "traceEvents"),
    (42, "top level"),
    ("text", "top level"),
])
def test_bad_structure(tmp_path, doc, pattern):
    with pytest.raises(ValueError, match=pattern):
        load(write(tmp_path, doc))


def _bad(field, value):
    e = memory_event(2.0, 10, 8)
    if value is KeyError:
        del e["args"][field]
    else:
        e["args"][field] = value
    return e


@pytest.mark.parametrize("bad, pattern", [
    (_bad("Addr", KeyError), "Addr"),
    (_bad("Bytes", KeyError), "Bytes"),
    (_bad("Device Type", KeyError), "Device Type"),
    (_bad("Device Id", KeyError), "Device Id"),
    (_bad("Bytes", "8"), "Bytes.*not an integer"),
    (_bad("Bytes", 8.5), "Bytes.*not an integer"),
    (_bad("Addr", None), "Addr.*not an integer"),
    (_bad("Device Id", True), "Device Id.*not an integer"),
    (dict(memory_event(2.0, 10, 8), args=[1, 2]), "args"),
    ({k: v for k, v in memory_event(2.0, 10, 8).items() if k != "ts"}, "ts"),
    (dict(memory_event(2.0, 10, 8), ts="2.0"), "ts"),
    (dict(step_event(2.0, 1), name="ProfilerStep#x"), "step annotation"),
    (dict(step_event(2.0, 1), ts=None), "ts"),
    ("not an event", "expected an object"),
])
def test_bad_event_names_index(tmp_path, bad, pattern):
    evs = [step_event(0.0, 0), memory_event(1.0, 10, 8), bad]
    with pytest.raises(ValueError, match=pattern) as exc:
        load(write(tmp_path, trace(evs)))
    assert "traceEvents[2]" in str(exc.value)
