"""torch_backend on a CPU machine: enable() explains what is missing, and everything that does
not need CUDA — record, plan in the background, switch at a step boundary, per-rank plan
files, saved plans reused or found stale, stats, errors — runs through libstalloc's PyTorch
entry points driven by real recorded training traces."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import stalloc
from stalloc._lib import ffi, lib
from stalloc.session import PLANNED, RECORDING, PlanSession, rank_plan_path, steady_part

sys.path.insert(0, str(Path(__file__).parent))
from torch_driver import drive  # noqa: E402

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
LLAMA = TRACES / "llama_plain.npz"
GPT2 = TRACES / "gpt2_plain.npz"


def test_import_needs_no_torch_and_enable_explains_cpu_build():
    from stalloc.integrations import torch_backend

    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None and torch.cuda.is_available():
        pytest.skip("a GPU is present: scripts/gpu/check_torch_backend.py covers it")
    with pytest.raises(RuntimeError, match="CUDA build of PyTorch|sees no GPU"):
        torch_backend.enable()
    with pytest.raises(RuntimeError, match="enable\\(\\) has not been called"):
        torch_backend.memory_stats(0)


def test_record_plan_switch_in_one_process(tmp_path):
    session, stats = drive(LLAMA, plan_path=tmp_path)
    assert session.state == PLANNED and session.plan_source == "planned"
    assert stats.plan_hits > 0 and stats.plan_misses == 0
    assert stats.allocated_bytes >= 0 and lib.stalloc_torch_failed_frees() == 0
    assert (tmp_path / "rank0.stplan").is_file()
    session.close()


def test_saved_plan_serves_the_next_run_from_the_start(tmp_path):
    drive(LLAMA, plan_path=tmp_path)[0].close()
    session, stats = drive(LLAMA, plan_path=tmp_path)
    assert session.plan_source == "saved"
    assert stats.plan_misses == 0 and stats.fallback_allocs == 0
    # Served from the plan from the first allocation: reserved within 2% of allocated.
    assert stats.peak_reserved_bytes <= 1.02 * stats.peak_allocated_bytes
    session.close()


def test_stale_saved_plan_warns_and_stays_correct(tmp_path):
    drive(LLAMA, plan_path=tmp_path)[0].close()
    with pytest.warns(RuntimeWarning, match="no longer matches"):
        session, stats = drive(GPT2, plan_path=tmp_path)  # the data check runs throughout
    assert stats.plan_misses > 0
    session.close()


def test_damaged_saved_plan_is_replaced(tmp_path):
    (tmp_path / "rank0.stplan").write_bytes(b"not a plan at all")
    with pytest.warns(RuntimeWarning, match="cannot use the saved plan"):
        session, _ = drive(LLAMA, plan_path=tmp_path)
    assert session.plan_source == "planned"
    stalloc.Plan.load(tmp_path / "rank0.stplan")  # rewritten, valid
    session.close()


def test_background_planning(tmp_path):
    session, stats = drive(LLAMA, plan_path=None, background=True)
    assert session.state == PLANNED and stats.plan_hits > 0
    session.close()


def test_session_errors_and_helpers(tmp_path):
    a = stalloc.Allocator()
    with pytest.raises(ValueError, match="at least 2"):
        PlanSession(a, record_steps=1)
    s = PlanSession(a, record_steps=2)
    assert s.state == RECORDING
    with pytest.raises(RuntimeError, match="no plan yet"):
        s.save_plan(tmp_path / "x.stplan")
    s.close()
    assert rank_plan_path(tmp_path, 3) == str(tmp_path / "rank3.stplan")
    assert rank_plan_path(tmp_path / "mine.stplan", 3) == str(tmp_path / "mine.stplan")
    with pytest.raises(ValueError, match="step markers"):
        steady_part(stalloc.Trace())


def test_memory_stats_keys_and_summary(tmp_path):
    from stalloc.integrations import torch_backend

    session, _ = drive(LLAMA, plan_path=None)
    torch_backend._sessions[0] = session
    try:
        stats = torch_backend.memory_stats(0)
        for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                    "reserved_bytes.all.current", "reserved_bytes.all.peak", "num_ooms"):
            assert key in stats
        assert stats["stalloc.plan_hits"] > 0
        text = torch_backend.memory_summary(0)
        assert "fragmentation" in text and "plan hits" in text
        torch_backend.save_plan(tmp_path / "p.stplan", device=0)
        assert stalloc.Plan.load(tmp_path / "p.stplan").info().pool_size > 0
    finally:
        torch_backend._sessions.clear()
    session.close()


def test_out_of_memory_message(tmp_path):
    from stalloc.integrations import torch_backend

    torch = pytest.importorskip("torch")
    a = stalloc.Allocator(memory_limit=4 << 20)
    lib.stalloc_torch_register(0, a._h())
    try:
        assert lib.stalloc_torch_malloc(64 << 20, 0, ffi.NULL) == ffi.NULL
        with pytest.raises(stalloc.OutOfMemoryError, match="asked 67108864 bytes"):
            with torch_backend.oom_guard():
                raise torch.OutOfMemoryError("CUDA out of memory")
        with pytest.raises(KeyError):  # other errors pass through untouched
            with torch_backend.oom_guard():
                raise KeyError("x")
    finally:
        lib.stalloc_torch_register(0, ffi.NULL)


def test_torchrun_ranks_keep_their_own_plans(tmp_path):
    pytest.importorskip("torch")
    script = Path(__file__).parent / "torchrun_plans.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), str(tmp_path), str(TRACES)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "rank0.stplan").is_file() and (tmp_path / "rank1.stplan").is_file()
    p0 = stalloc.Plan.load(tmp_path / "rank0.stplan").info()
    p1 = stalloc.Plan.load(tmp_path / "rank1.stplan").info()
    assert p0.fingerprint != p1.fingerprint  # ranks saw different traces
    # The second launch reuses each rank's own plan.
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("plan source: saved") == 2
