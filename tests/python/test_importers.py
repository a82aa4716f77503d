"""Tests of the RMM, PyTorch snapshot, STAlloc log and MiniMalloc importers, of their format
detection and of `stalloc import`.

Sample files are in tests/data/importers (README.md there says which are synthetic). The real
CPU traces in tests/data/traces are also written out in the RMM, STAlloc and snapshot formats
and imported back: the requests (sizes and lifetimes) must come back unchanged.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import stalloc
from stalloc.cli import main as cli_main
from stalloc.importers.minimalloc_csv import load_minimalloc_csv
from stalloc.importers.rmm import load_rmm_csv
from stalloc.importers.stalloc_log import load_stalloc_log
from stalloc.importers.torch_snapshot import events_from_snapshot, load_torch_snapshot
from stalloc.load import detect_format
from stalloc.trace import ALLOC, ALLOC_FAILED, EVENT_DTYPE, FLAG_UNMATCHED, FREE, STEP

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = DATA / "importers"
MiB = 1 << 20


def requests_of(events) -> list[tuple[int, int, int]]:
    """(size, alloc_event, free_event) of every request of the events, after dropping steps."""
    ev = np.asarray(events)
    ev = ev[ev["kind"] != STEP]
    r = stalloc.Trace.from_events(ev).requests
    return list(zip(r["size"].tolist(), r["alloc_event"].tolist(), r["free_event"].tolist()))


def real_trace_events(name="llama_plain"):
    return stalloc.load_trace(DATA / "traces" / f"{name}.npz").events


# ---- RMM ----

def test_rmm_sample():
    ev, info = load_rmm_csv(SAMPLES / "rmm_log.csv", return_info=True)
    assert ev.dtype == EVENT_DTYPE
    assert ev["kind"].tolist() == [ALLOC, ALLOC, ALLOC, FREE, ALLOC, ALLOC_FAILED, FREE, FREE, FREE]
    assert ev["id"][3] == ev["id"][1]  # the free pairs with the alloc at its pointer
    assert ev["id"][8] == ev["id"][4]  # the reused pointer pairs with its latest alloc
    assert ev["flags"][6] == FLAG_UNMATCHED and info["unmatched_frees"] == 1
    assert ev["size"][5] == 85899345920 and info["failed_allocs"] == 1
    assert ev["stream"][2] == 0x55D0C1A2B3C0 and ev["address"][0] == 0x7F6A20000000
    assert info["live_at_end"] == 1
    t = stalloc.Trace.from_events(ev)
    s = t.summary()
    assert (s.requests, s.unfreed_requests, s.unmatched_frees, s.failed_allocs) == (4, 1, 1, 1)
    assert s.lower_bound == 4 * MiB + MiB + 256
    assert detect_format(SAMPLES / "rmm_log.csv") == "rmm"


def test_rmm_number_forms(tmp_path):
    p = tmp_path / "forms.csv"
    p.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                 "7,1634567890.123456,allocate,7f00aa00,100,7f0011\n"  # no 0x: hex, as written
                 "7,12:00:00:000001,deallocate,0x7F00AA00,100,0\n")  # the guide's spelling
    ev = load_rmm_csv(p)
    assert ev["address"][0] == 0x7F00AA00 and ev["stream"][0] == 0x7F0011
    assert ev["kind"].tolist() == [ALLOC, FREE] and ev["id"][1] == ev["id"][0]


def write_rmm(events, path):
    lines = ["Thread,Time,Action,Pointer,Size,Stream"]
    for i, e in enumerate(events):
        if e["kind"] == STEP:
            continue
        action = "allocate" if e["kind"] == ALLOC else "free"
        lines.append(f"{e['thread']},00:00:{i // 1000000:02d}.{i % 1000000:06d},{action},"
                     f"{int(e['address']):#x},{e['size']},{int(e['stream']):#x}")
    path.write_text("\n".join(lines) + "\n")


def test_rmm_round_trip_of_real_trace(tmp_path):
    ev = real_trace_events()
    p = tmp_path / "real.csv"
    write_rmm(ev, p)
    back = load_rmm_csv(p)
    assert requests_of(back) == requests_of(ev)
    assert stalloc.load_trace(p).lower_bound == stalloc.Trace.from_events(ev).lower_bound


@pytest.mark.parametrize("body, message", [
    ("", "empty file"),
    ("Thread,Time,Action,Pointer\n", "header"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,12\n", ":2: 5 fields"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,12,0\n1,t,realloc,0x10,12,0\n",
     ":3: unknown action 'realloc'"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,many,0\n", ":2: Size 'many'"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,zz,12,0\n", ":2: Pointer 'zz'"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,t,allocate,0x10,-5,0\n", ":2: Size '-5'"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,,allocate,0x10,5,0\n", ":2: empty Time"),
    ("Thread,Time,Action,Pointer,Size,Stream\n1,t,free,(nil),5,0\n", ":2: free of a null"),
])
def test_rmm_malformed(tmp_path, body, message):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_rmm_csv(p)


# ---- PyTorch snapshot ----

def test_snapshot_sample_default_device_and_free_completed():
    ev, info = load_torch_snapshot(SAMPLES / "torch_snapshot.pickle", return_info=True)
    assert info["device"] == 1 and info["devices"] == 2 and info["free_on"] == "completed"
    assert ev["kind"].tolist() == [ALLOC, ALLOC, ALLOC, FREE, FREE, FREE, ALLOC_FAILED, ALLOC]
    assert (ev["device"] == 1).all()
    # the side-stream block ends at free_completed, after the 1 MiB alloc
    assert ev["id"][3] == ev["id"][1] and ev["stream"][1] == 0x55AA00001000
    assert ev["flags"][5] == FLAG_UNMATCHED and info["unmatched_frees"] == 1
    assert info["ooms"] == 1 and ev["size"][6] == 80 << 30
    assert info["skipped_actions"] == {"segment_alloc": 1, "free_requested": 3}
    t = stalloc.Trace.from_events(ev)
    assert t.lower_bound == 9 * MiB
    assert detect_format(SAMPLES / "torch_snapshot.pickle") == "torch-snapshot"


def test_snapshot_made_by_torch_from_a_real_cpu_run():
    """A snapshot dict produced by PyTorch's own converter (_profile_to_snapshot) from a real
    CPU profile: the importer must pair its entries as the entries themselves say."""
    p = SAMPLES / "torch_snapshot_from_profiler.pickle"
    with open(p, "rb") as f:
        entries = pickle.load(f)["device_traces"][0]
    ev, info = load_torch_snapshot(p, return_info=True)
    allocs = [e for e in entries if e["action"] == "alloc"]
    completed = [e for e in entries if e["action"] == "free_completed"]
    assert (ev["kind"] == ALLOC).sum() == len(allocs) > 100
    assert (ev["kind"] == FREE).sum() == len(completed)
    assert ev[ev["kind"] == ALLOC]["size"].tolist() == [e["size"] for e in allocs]
    # live bytes as the entries say: frees of blocks that predate the profile do not count
    live, now, peak, unmatched = {}, 0, 0, 0
    for e in entries:
        if e["action"] == "alloc":
            live.setdefault(e["addr"], []).append(e["size"])
            now += e["size"]
            peak = max(peak, now)
        elif e["action"] == "free_completed":
            if live.get(e["addr"]):
                now -= live[e["addr"]].pop()
            else:
                unmatched += 1
    assert info["unmatched_frees"] == unmatched > 0  # tensors that existed before profiling
    assert stalloc.Trace.from_events(ev).lower_bound == peak
    assert detect_format(p) == "torch-snapshot"


def test_snapshot_free_requested_and_device_choice():
    with open(SAMPLES / "torch_snapshot.pickle", "rb") as f:
        snap = pickle.load(f)
    ev = events_from_snapshot(snap, free_on="requested")
    # the 5 MiB block now ends before the 1 MiB alloc: a lower lower bound
    assert ev["kind"].tolist()[:4] == [ALLOC, ALLOC, FREE, ALLOC]
    assert stalloc.Trace.from_events(ev).lower_bound == 8 * MiB
    ev0 = events_from_snapshot(snap, device=0)
    assert ev0["kind"].tolist() == [ALLOC, FREE] and (ev0["device"] == 0).all()
    with pytest.raises(ValueError, match="device 5 not in the snapshot"):
        events_from_snapshot(snap, device=5)
    with pytest.raises(ValueError, match="free_on"):
        events_from_snapshot(snap, free_on="never")


def snapshot_of(events) -> dict:
    entries = []
    for e in events:
        if e["kind"] == STEP:
            continue
        addr, size = int(e["address"]), int(e["size"])
        if e["kind"] == ALLOC:
            entries.append({"action": "alloc", "addr": addr, "size": size, "stream": 0})
        else:
            entries.append({"action": "free_requested", "addr": addr, "size": size, "stream": 0})
            entries.append({"action": "free_completed", "addr": addr, "size": size, "stream": 0})
    return {"segments": [], "device_traces": [entries]}


def test_snapshot_round_trip_of_real_trace(tmp_path):
    ev = real_trace_events("mixtral_plain")
    p = tmp_path / "snap.pickle"
    with open(p, "wb") as f:
        pickle.dump(snapshot_of(ev), f)
    assert requests_of(load_torch_snapshot(p)) == requests_of(ev)
    # the JSON form of the same dict reads alike, and is told apart from profiler JSON
    pj = tmp_path / "snap.json"
    pj.write_text(json.dumps(snapshot_of(ev)))
    assert detect_format(pj) == "torch-snapshot"
    assert requests_of(stalloc.load_trace(pj).events) == requests_of(ev)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize("doc, message", [
    ({"segments": []}, "no 'device_traces'"),
    ({"device_traces": {"a": 1}}, "must be a list of lists"),
    ({"device_traces": [[{"action": "teleport", "addr": 1, "size": 1}]]},
     r"device_traces\[0\]\[0\]: unknown action 'teleport'"),
    ({"device_traces": [[{"action": "alloc", "addr": 1, "size": 1}, {"action": "alloc", "addr": "x", "size": 1}]]},
     r"device_traces\[0\]\[1\] \(alloc\): 'addr' is 'x'"),
    ({"device_traces": [[{"action": "alloc", "addr": 1, "size": -3}]]}, "negative size"),
    ({"device_traces": [["alloc"]]}, "expected a dict"),
    ([1, 2], "expected a dict"),
])
def test_snapshot_malformed(tmp_path, doc, message):
    p = tmp_path / "bad.pickle"
    with open(p, "wb") as f:
        pickle.dump(doc, f)
    with pytest.raises(ValueError, match=message):
        load_torch_snapshot(p)


def test_snapshot_refuses_code_and_garbage(tmp_path, capsys):
    p = tmp_path / "evil.pickle"
    with open(p, "wb") as f:
        pickle.dump({"device_traces": [], "x": Evil()}, f)
    with pytest.raises(ValueError, match="refers to builtins.print"):
        load_torch_snapshot(p)
    assert "pwned" not in capsys.readouterr().out
    p.write_bytes(b"\x80\x04garbage")
    with pytest.raises(ValueError, match="not a readable snapshot pickle"):
        load_torch_snapshot(p)


# ---- STAlloc tracer log ----

def test_stalloc_log_sample():
    ev, info = load_stalloc_log(SAMPLES / "stalloc_log.txt", return_info=True)
    kinds = ev["kind"].tolist()
    assert kinds == [ALLOC, ALLOC, STEP, ALLOC, ALLOC, FREE, FREE, STEP, ALLOC, FREE, STEP, FREE]
    steps = ev[ev["kind"] == STEP]["id"].tolist()
    assert steps == [0, 1, 2]  # "end" becomes the step after the last
    assert info["annotations"] == 6 and info["null_pointers"] == 1
    assert ev["stream"][4] == 0x55A1B2C3D4E0
    s = stalloc.Trace.from_events(ev).summary()
    assert (s.requests, s.unfreed_requests, s.steps) == (5, 1, 3)
    assert s.lower_bound == 16 * MiB + 2 * MiB + 512
    assert detect_format(SAMPLES / "stalloc_log.txt") == "stalloc-log"


def write_stalloc_log(events, path):
    lines = []
    for e in events:
        if e["kind"] == STEP:
            lines.append(f"Iteration Index : {e['id']}")
        else:
            lines.append(f"{1 if e['kind'] == ALLOC else 0} {int(e['address']):#x} {e['size']} 0")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", ["llama_1f1b", "gpt2_recompute"])
def test_stalloc_log_round_trip_of_real_trace(tmp_path, name):
    ev = real_trace_events(name)
    p = tmp_path / "mem_log_dev0.txt"
    write_stalloc_log(ev, p)
    back = load_stalloc_log(p)
    assert (back["kind"] == STEP).sum() == (ev["kind"] == STEP).sum()
    a, b = stalloc.Trace.from_events(back), stalloc.Trace.from_events(ev)
    ra, rb = a.requests, b.requests
    assert np.array_equal(ra["size"], rb["size"])
    assert np.array_equal(ra["alloc_event"], rb["alloc_event"])
    assert np.array_equal(ra["free_event"], rb["free_event"])
    assert np.array_equal(ra["step"], rb["step"])


@pytest.mark.parametrize("body, message", [
    ("1 0x10 12\n", ":1: expected '1|0 <pointer> <size> <stream>'"),
    ("1 0x10 12 0\n2 0x10 12 0\n", ":2: expected"),
    ("1 0x10 twelve 0\n", ":1: size 'twelve'"),
    ("Iteration Index : soon\n", ":1: iteration index 'soon'"),
    ("Iteration Index 3\n", ":1: expected 'Iteration Index : N'"),
    ("hello world\n", ":1: expected"),
])
def test_stalloc_log_malformed(tmp_path, body, message):
    p = tmp_path / "bad.txt"
    p.write_text(body)
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        load_stalloc_log(p)


# ---- MiniMalloc CSV ----

def test_minimalloc_real_instance():
    p = SAMPLES / "minimalloc_A.1048576.csv"
    ev, info = load_minimalloc_csv(p, return_info=True)
    rows = p.read_text().splitlines()[1:]
    assert info["buffers"] == len(rows) and len(ev) == 2 * len(rows)
    t = stalloc.Trace.from_events(ev)
    assert t.lower_bound == 1048576  # as the instance's NOTICE states
    # every buffer's lifetime order is kept: overlap in the CSV <=> overlap in the trace
    r = t.requests
    by_id = {int(i) - 1: (int(a), int(b)) for i, a, b in zip(r["id"], r["alloc_event"], r["free_event"])}
    buf = [tuple(map(int, line.split(","))) for line in rows]
    for x in buf[:40]:
        for y in buf[:40]:
            csv_overlap = x[1] < y[2] and y[1] < x[2]
            (a0, a1), (b0, b1) = by_id[x[0]], by_id[y[0]]
            assert csv_overlap == (a0 < b1 and b0 < a1)
    assert detect_format(p) == "minimalloc"


def test_minimalloc_touching_lifetimes_and_string_ids(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("id,lower,upper,size,offset\nx,0,5,10,0\ny,5,9,20,0\nz,2,6,1,10\n")
    ev, info = load_minimalloc_csv(p, return_info=True)
    t = stalloc.Trace.from_events(ev)
    assert t.lower_bound == 21  # x and y touch at 5 but do not overlap
    assert info["ids"] == {1: "x", 2: "y", 3: "z"}


@pytest.mark.parametrize("body, message", [
    ("", "empty file"),
    ("id,lower,size\n", "lacks upper"),
    ("id,lower,upper,size\n0,1,2\n", ":2: 3 fields"),
    ("id,lower,upper,size\n0,1,2,3\n1,4,4,3\n", r":3: empty lifetime \[4, 4\)"),
    ("id,lower,upper,size\n0,1,b,3\n", ":2: upper 'b'"),
    ("id,lower,upper,size\n0,1,2,-3\n", ":2: size -3 is negative"),
])
def test_minimalloc_malformed(tmp_path, body, message):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ValueError, match=message):
        load_minimalloc_csv(p)


@pytest.mark.parametrize("upper", [4, 3])
def test_minimalloc_plan_and_import_refuse_empty_lifetimes_alike(tmp_path, capsys, upper):
    # `stalloc plan` once read these files with a reader of its own that took upper <= lower
    p = tmp_path / "m.csv"
    p.write_text(f"id,lower,upper,size\n0,1,2,3\n1,4,{upper},3\n")
    assert detect_format(p) == "minimalloc"
    assert cli_main(["import", str(p), "-o", str(tmp_path / "t.stalloc")]) == 2
    assert f"{p}:3: empty lifetime [4, {upper})" in capsys.readouterr().err
    assert cli_main(["plan", str(p), "-o", str(tmp_path / "o.csv")]) == 2
    assert f"{p}:3: empty lifetime [4, {upper})" in capsys.readouterr().err
    assert not (tmp_path / "t.stalloc").exists() and not (tmp_path / "o.csv").exists()


def test_minimalloc_plan_and_import_tell_the_format_alike(tmp_path, capsys):
    # columns by name in any order: both commands take the file (the plan command once
    # wanted them in MiniMalloc's order, the importer did not)
    p = tmp_path / "m.csv"
    p.write_text("size,upper,lower,id\n3,2,1,0\n3,5,1,1\n")
    assert cli_main(["import", str(p), "-o", str(tmp_path / "t.stalloc"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lower_bound"] == 6
    assert cli_main(["plan", str(p), "-o", str(tmp_path / "o.csv"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "minimalloc-csv" and doc["lower_bound"] == 6
    # an unknown column: neither takes it for MiniMalloc (the plan command once did)
    q = tmp_path / "n.csv"
    q.write_text("id,lower,upper,size,colour\n0,1,2,3,red\n")
    with pytest.raises(ValueError, match="cannot tell the trace format"):
        detect_format(q)
    assert cli_main(["plan", str(q), "-o", str(tmp_path / "o2.csv")]) == 2
    assert "cannot tell the trace format" in capsys.readouterr().err


# ---- detection and the CLI ----

def test_undetectable_format(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"\x00\x01\x02 nothing known")
    with pytest.raises(ValueError, match="cannot tell the trace format"):
        detect_format(p)


@pytest.mark.parametrize("sample, fmt", [
    ("rmm_log.csv", "rmm"), ("torch_snapshot.pickle", "torch-snapshot"),
    ("torch_snapshot_from_profiler.pickle", "torch-snapshot"),
    ("stalloc_log.txt", "stalloc-log"), ("minimalloc_A.1048576.csv", "minimalloc"),
])
def test_cli_import(tmp_path, capsys, sample, fmt):
    out = tmp_path / "t.stalloc"
    assert cli_main(["import", str(SAMPLES / sample), "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == fmt and doc["output"] == str(out)
    t = stalloc.Trace.load(out)
    assert t.summary().as_dict() == {k: doc[k] for k in t.summary().as_dict()}
    assert cli_main(["import", str(SAMPLES / sample), "-o", str(out), "--format", fmt]) == 0
    assert "lower bound" in capsys.readouterr().out


def test_cli_import_errors(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("Thread,Time,Action,Pointer,Size,Stream\n1,t,realloc,0x1,2,0\n")
    assert cli_main(["import", str(bad), "-o", str(tmp_path / "o")]) == 2
    assert "unknown action 'realloc'" in capsys.readouterr().err
    assert cli_main(["import", str(SAMPLES / "rmm_log.csv"), "-o", str(tmp_path / "o"),
                     "--format", "nope"]) == 2
    assert "unknown format 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
