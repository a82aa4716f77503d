"""The XLA dump importer on real dumps (tests/data/xla, made by tools/xla_trace.py --tiny from
jaxlib 0.10.2 on CPU) and on malformed input. Needs no jax."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import stalloc
from stalloc.importers import xla
from stalloc.trace import ALLOC, FREE


def _prefix(data_dir, name):
    return str(data_dir / "xla" / name)


@pytest.mark.parametrize("name", ["mlp_tiny", "transformer_tiny"])
def test_real_dump(data_dir, name):
    figures = json.loads((data_dir / "xla" / f"{name}.memory_analysis.json").read_text())
    full, info = xla.import_dump(_prefix(data_dir, name), with_info=True)
    temp = xla.import_dump(_prefix(data_dir, name), only="temp")
    ev = full.events
    # Every request is allocated once and freed once, allocs before frees.
    assert (ev["kind"] == ALLOC).sum() == (ev["kind"] == FREE).sum() == sum(info["requests_by_kind"].values())
    assert len(temp.requests) == info["requests_by_kind"]["temp"]
    # XLA's temp block holds the temporaries at the heap simulator's offsets; its extent is
    # what memory_analysis reports, and no placement can beat the lower bound.
    assert info["xla_temp_peak"] == figures["temp_size_in_bytes"]
    assert 0 < temp.lower_bound <= figures["temp_size_in_bytes"]
    # Parameters live through the whole program: the full lower bound covers them and the temps.
    assert full.lower_bound >= figures["argument_size_in_bytes"]
    assert full.lower_bound >= temp.lower_bound
    assert full.lower_bound <= sum(figures[k] for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                                       "temp_size_in_bytes"))
    assert info["unscheduled_values"] > 0  # thread-local scalars are left out, and counted
    # The loader finds it by any of its files, too.
    again = stalloc.load_trace(_prefix(data_dir, name) + xla.DUMP_SUFFIXES[1], fmt="xla")
    np.testing.assert_array_equal(again.events, ev)


def test_plan_of_real_dump(data_dir):
    plan = pytest.importorskip("stalloc.plan").plan
    temp = xla.import_dump(_prefix(data_dir, "transformer_tiny"), only="temp")
    info = plan(temp, detect_period=False, classify=False, alignment=64).info()
    assert temp.lower_bound <= info.plan_peak
    assert info.plan_peak <= 2 * temp.lower_bound


BA = """BufferAssignment:
allocation 0: size 64, parameter 0, shape |f32[16]| at ShapeIndex {}:
 value: <1 p.1 @0> (size=64,offset=0): f32[16]{0}
allocation 1: size 128, preallocated-temp:
 value: <2 a @0> (size=64,offset=0): f32[16]{0}
 value: <3 b @0> (size=64,offset=0): f32[16]{0}
 value: <4 c @0> (size=64,offset=64): f32[16]{0}
allocation 2: size 64, maybe-live-out:
 value: <5 out @0> (size=64,offset=0): f32[16]{0}
allocation 3: size 4, thread-local:
 value: <6 r @0> (size=4,offset=0): f32[]
"""
LR = """HloLiveRange (max 5):
  InstructionSequence:
    0:p.1
    1:a
    2:b
    3:c
    4:out
  BufferLiveRange:
    p.1{}:0-5
    a{}:1-2
    b{}:2-3
    c{}:3-4
    out{}:4-5
  Live ranges at 3 (peak):
    b{}: 64 bytes (cumulative: 64 bytes)
"""


def _write(tmp_path, ba=BA, lr=LR):
    prefix = tmp_path / "module_0001.jit_step.cpu_after_optimizations"
    (tmp_path / (prefix.name + xla.DUMP_SUFFIXES[0])).write_text(ba)
    (tmp_path / (prefix.name + xla.DUMP_SUFFIXES[1])).write_text(lr)
    return str(prefix)


def test_in_place_sharing_and_order(tmp_path):
    trace, info = xla.import_dump(_write(tmp_path), with_info=True)
    # a and b share bytes while both are live at 2 (b written in place): one request.
    assert info["shared_in_place"] == 1
    assert info["unscheduled_values"] == 1 and info["unscheduled_bytes"] == 4
    assert info["requests_by_kind"] == {"output": 1, "parameter": 1, "temp": 2}
    ev = trace.events
    kinds = "".join("A" if k == ALLOC else "F" for k in ev["kind"])
    # p at 0; a+b at 1; c at 3 then a+b freed; out at 4 then c freed; p and out at 5.
    assert kinds == "AAAFAFFF"
    assert trace.lower_bound == 64 * 3
    assert xla.import_dump(str(tmp_path), only="temp").lower_bound == 128
    assert xla.find_module(tmp_path, "jit_step") == _write(tmp_path)


@pytest.mark.parametrize("ba, lr, message", [
    ("nothing here\n", LR, "BufferAssignment"),
    (BA.replace("(size=64,offset=64)", "(size=64,offset=96)"), LR, "exceeds allocation 1"),
    (BA.replace(" value: <5 out @0>", " value: out"), LR, "cannot read the value"),
    (BA.replace("allocation 2:", "allocation 1:"), LR, "repeated"),
    ("BufferAssignment:\n value: <1 p @0> (size=4,offset=0): f32[]\n", LR, "before any allocation"),
    ("BufferAssignment:\n", LR, "no allocations"),
    (BA, "", "HloLiveRange"),
    (BA, LR.replace("    3:c", "    7:c"), "expected instruction 3"),
    (BA, LR.replace("c{}:3-4", "c{}:4-3"), "not inside"),
    (BA, LR.replace("c{}:3-4", "c{}:3-9"), "not inside"),
    (BA, LR.replace("c{}:3-4", "c{}:three"), "cannot read the live range"),
    (BA, "HloLiveRange (max 5):\n  InstructionSequence:\n    0:p.1\n", "no BufferLiveRange"),
])
def test_malformed(tmp_path, ba, lr, message):
    with pytest.raises(ValueError, match=message):
        xla.import_dump(_write(tmp_path, ba, lr))


def test_missing_files(tmp_path, data_dir):
    with pytest.raises(ValueError, match="no module matching"):
        xla.find_module(tmp_path)
    shutil.copy(data_dir / "xla" / ("mlp_tiny" + xla.DUMP_SUFFIXES[0]), tmp_path / ("m" + xla.DUMP_SUFFIXES[0]))
    with pytest.raises(ValueError, match="missing"):
        xla.import_dump(str(tmp_path / "m"))
    with pytest.raises(ValueError, match="only"):
        xla.import_dump(_prefix(data_dir, "mlp_tiny"), only="weights")
