"""torch_backend on a CPU machine: enable() explains what is missing, and everything that does
not need CUDA — record, plan in the background, switch at a step boundary, per-rank plan
files, saved plans reused or found stale, stats, errors — runs through libstalloc's PyTorch
entry points driven by real recorded training traces."""

from __future__ import annotations

import ctypes
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


def test_enable_refuses_bad_arguments_before_touching_pytorch():
    # PyTorch's allocator cannot be changed back, and a second enable() is refused: bad
    # arguments must fail before the change, and (so) before the device is even asked about.
    from stalloc.integrations import torch_backend

    pytest.importorskip("torch")
    for kwargs, message in (({"record_steps": 1}, "record_steps"), ({"time_limit": -1.0}, "time_limit"),
                            ({"online": {"record_steps": 1}}, "record_steps"),
                            ({"online": {"pool_fit": 4}}, "unknown online parameter"),
                            ({"online": False, "record_steps": 1}, "record_steps"),
                            ({"online": False, "time_limit": -1.0}, "time_limit")):
        with pytest.raises(ValueError, match=message):
            torch_backend.enable(**kwargs)
    assert not torch_backend._allocators and not torch_backend._sessions


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


def test_online_session_takes_online_parameters():
    # torch_backend.enable(online={...}) hands a dict to PlanSession: the online lifecycle starts
    # with those parameters over the session's own (a bad value is the library's error).
    for params in ({"pool_fit_candidates": 1}, {"pool_fit_candidates": 8, "record_steps": 4}):
        a = stalloc.Allocator(backend="virtual")
        s = PlanSession(a, record_steps=2, online=params)
        assert s.online and a.online_info()["state"] == "recording"
        s.close()
        a.close()
    a = stalloc.Allocator(backend="virtual")
    with pytest.raises(stalloc.InvalidArgumentError, match="pool_fit_candidates"):
        PlanSession(a, record_steps=2, online={"pool_fit_candidates": 65})
    with pytest.raises(ValueError, match="unknown online parameter"):
        PlanSession(a, record_steps=2, online={"pool_fit": 4})
    a.close()


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


# ---- the hooks, PyTorch's memory functions, OOM and capture (issue 17) ----

class FakePluggable:
    """The setters torch._C._CUDAPluggableAllocator has since torch 2.3 (missing from its stubs)."""

    SETTERS = ("set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn",
               "set_record_stream_fn", "set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn",
               "set_release_pool")

    def __init__(self, offered=SETTERS):
        self.got = {}
        for name in offered:
            setattr(self, name, lambda address, name=name: self.got.__setitem__(name, address))


def test_every_offered_hook_is_registered_with_the_c_function():
    import ctypes

    from stalloc.integrations import torch_backend

    pytest.importorskip("torch")
    fake = FakePluggable()
    done = torch_backend.register_hooks(fake)
    for name in ("set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn",
                 "set_record_stream_fn"):
        assert name in done and fake.got[name] == int(ffi.cast("uintptr_t", getattr(lib, {
            "set_init_fn": "stalloc_torch_init", "set_reset_fn": "stalloc_torch_reset",
            "set_memory_fraction_fn": "stalloc_torch_set_memory_fraction",
            "set_base_alloc_fn": "stalloc_torch_base_alloc",
            "set_record_stream_fn": "stalloc_torch_record_stream"}[name])))
    assert "set_begin_allocate_to_pool" in done  # the plug library refuses capture where it begins
    # A torch offering fewer setters gets only those.
    older = FakePluggable(offered=("set_reset_fn",))
    assert torch_backend.register_hooks(older) == ["set_reset_fn"]

    # The registered addresses are the working functions, called as PyTorch calls them.
    a = stalloc.Allocator(backend="host", growable_pool=False)  # base_alloc: one segment per block
    lib.stalloc_torch_register(0, a._h())
    try:
        reset = ctypes.CFUNCTYPE(None)(fake.got["set_reset_fn"])
        fraction = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(fake.got["set_memory_fraction_fn"])
        record = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(fake.got["set_record_stream_fn"])
        base = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))(
            fake.got["set_base_alloc_fn"])
        p = a.alloc(3 << 20)
        a.free(p)
        assert a.stats().reserved_bytes > 0
        reset()  # torch.cuda.empty_cache()
        assert a.stats().reserved_bytes == 0
        fraction(0.5, 0)  # torch.cuda.set_per_process_memory_fraction(0.5)
        assert a.stats().memory_limit == int(0.5 * a.device_memory())
        p = a.alloc(1000)
        size = ctypes.c_size_t()
        b = base(p, ctypes.byref(size))
        assert b <= p and p + 1000 <= b + size.value
        before = lib.stalloc_torch_failed_record_streams()
        record(p, 0x2000)
        assert lib.stalloc_torch_failed_record_streams() == before
        a.free(p)
    finally:
        lib.stalloc_torch_register(0, ffi.NULL)
        a.close()


def test_torch_memory_functions_patched_and_restored():
    from stalloc.integrations import torch_backend

    torch = pytest.importorskip("torch")
    originals = {(o, n): getattr(o, n) for o in (torch.cuda, torch.cuda.memory)
                 for n in torch_backend._STATS_FUNCTIONS if hasattr(o, n)}
    session, stats = drive(LLAMA, plan_path=None)
    torch_backend._sessions[0] = session
    torch_backend.patch_torch_stats()
    try:
        for owner in (torch.cuda, torch.cuda.memory):
            s = owner.memory_stats(0)
            assert s["allocated_bytes.all.peak"] == stats.peak_allocated_bytes
            assert s["reserved_bytes.all.current"] == stats.reserved_bytes
            assert s["num_alloc_retries"] == 0 and s["num_ooms"] == stats.failed_allocs
            assert owner.max_memory_allocated(0) == stats.peak_allocated_bytes
            assert owner.memory_reserved(torch.device("cuda", 0)) == stats.reserved_bytes
            assert owner.max_memory_reserved("cuda:0") == stats.peak_reserved_bytes
            assert owner.memory_stats_as_nested_dict(0)["allocated_bytes"]["all"]["peak"] == stats.peak_allocated_bytes
            assert "stalloc memory summary" in owner.memory_summary(0)
        # memory_allocated in torch.cuda.memory reads memory_stats: ours.
        assert torch.cuda.memory_allocated(0) == stats.allocated_bytes
        torch.cuda.reset_peak_memory_stats(0)
        assert torch.cuda.max_memory_allocated(0) == session.allocator.stats().allocated_bytes
    finally:
        torch_backend.restore_torch()
        torch_backend._sessions.clear()
        session.close()
    for (owner, name), fn in originals.items():
        assert getattr(owner, name) is fn, name


def test_memory_fraction_sets_stallocs_limit_even_where_pytorch_skips_the_hook(monkeypatch):
    from stalloc.integrations import torch_backend

    torch = pytest.importorskip("torch")
    calls = []

    def pytorch_own(fraction, device=None):  # checks its arguments, calls no hook
        if not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}")
        calls.append((fraction, device))

    for owner in (torch.cuda, torch.cuda.memory):
        monkeypatch.setattr(owner, "set_per_process_memory_fraction", pytorch_own)
    session, _ = drive(LLAMA, plan_path=None)
    a = session.allocator
    torch_backend._sessions[0] = session
    lib.stalloc_torch_register(0, a._h())
    torch_backend.route_memory_fraction()
    try:
        for owner in (torch.cuda, torch.cuda.memory):
            owner.set_per_process_memory_fraction(0.25, 0)
            assert a.stats().memory_limit == int(0.25 * a.device_memory())
            assert owner.get_per_process_memory_fraction(0) == pytest.approx(0.25)
            with pytest.raises(ValueError):  # PyTorch's own checks still run first
                owner.set_per_process_memory_fraction(1.5, 0)
            assert a.stats().memory_limit == int(0.25 * a.device_memory())
            owner.set_per_process_memory_fraction(1.0, 0)  # the whole device: no limit
            assert a.stats().memory_limit == 0 and owner.get_per_process_memory_fraction(0) == 1.0
        assert calls == [(0.25, 0), (1.0, 0)] * 2
    finally:
        torch_backend.restore_torch()
        lib.stalloc_torch_register(0, ffi.NULL)
        torch_backend._sessions.clear()
        session.close()
    assert torch.cuda.set_per_process_memory_fraction is pytorch_own


def test_out_of_memory_is_torch_cuda_out_of_memory_with_stallocs_figures():
    from stalloc.integrations import torch_backend

    torch = pytest.importorskip("torch")
    a = stalloc.Allocator(memory_limit=4 << 20)
    lib.stalloc_torch_register(0, a._h())
    try:
        # The C half: the NULL from PyTorch's malloc leaves stalloc's figures.
        assert lib.stalloc_torch_malloc(64 << 20, 0, ffi.NULL) == ffi.NULL
        text = torch_backend.last_error()
        for part in ("asked 67108864 bytes", "allocated", "reserved", "planned"):
            assert part in text
        # The Python half: what PyTorch raises becomes torch.cuda.OutOfMemoryError (and
        # stalloc.OutOfMemoryError) carrying them, from the error a NULL gives as from PyTorch's.
        for raised in (torch.cuda.OutOfMemoryError("CUDA out of memory"),
                       RuntimeError("CUDA error: out of memory")):
            with pytest.raises(torch.cuda.OutOfMemoryError, match="asked 67108864 bytes") as info:
                with torch_backend.oom_guard():
                    raise raised
            assert isinstance(info.value, stalloc.OutOfMemoryError) and "planned" in str(info.value)
    finally:
        lib.stalloc_torch_register(0, ffi.NULL)
        a.close()


def test_plug_library_uses_a_malloc_that_throws():
    import ctypes

    from stalloc.integrations import torch_backend

    pytest.importorskip("torch")
    path, name = torch_backend.plug_library()
    assert name == "stalloc_torch_shim_malloc"  # never libstalloc's, whose NULL PyTorch takes as a tensor
    typed = torch_backend._load_plug(torch_backend.TYPED_PLUG)[0]
    assert os.path.basename(path) == (torch_backend.TYPED_PLUG if typed else torch_backend.GENERIC_PLUG)
    plug = ctypes.CDLL(path)
    assert plug[name] and plug["stalloc_torch_free"]  # both names CUDAPluggableAllocator looks up
    assert plug["stalloc_torch_shim_begin_allocate_to_pool"]


def test_the_hooks_take_the_plug_enable_loaded(monkeypatch):
    from stalloc.integrations import torch_backend

    pytest.importorskip("torch")
    plug = torch_backend._plug()

    def load_again(*args, **kwargs):
        raise AssertionError("the plug was loaded a second time")

    monkeypatch.setattr(torch_backend, "_plug", load_again)  # enable() loads it once, then hands it on
    addresses = torch_backend.hook_addresses(plug)
    assert addresses["set_begin_allocate_to_pool"] == ctypes.cast(
        plug.stalloc_torch_shim_begin_allocate_to_pool, ctypes.c_void_p).value
    with pytest.raises(AssertionError, match="second time"):  # called alone, it loads its own
        torch_backend.hook_addresses()


def test_a_typed_plug_built_for_another_pytorch_falls_back_to_the_generic_one(monkeypatch, tmp_path):
    from stalloc.integrations import torch_backend

    pytest.importorskip("torch")
    if torch_backend._plug_path(torch_backend.GENERIC_PLUG) is None:
        pytest.skip("libstalloc_torch_generic.so was not built (no C++ compiler)")
    foreign = tmp_path / torch_backend.TYPED_PLUG
    foreign.write_bytes(b"not a library for this PyTorch")  # loads as badly as a mismatched libc10
    real = torch_backend._plug_path

    def path_of(name):
        return str(foreign) if name == torch_backend.TYPED_PLUG else real(name)

    monkeypatch.setattr(torch_backend, "_plug_path", path_of)
    monkeypatch.setattr(torch_backend, "_warned_typed", False)
    with pytest.warns(RuntimeWarning, match="does not load against this PyTorch.*RuntimeError") as said:
        path, name = torch_backend.plug_library()
    assert said[0].filename == __file__  # pointed at the caller, not at stalloc
    assert os.path.basename(path) == torch_backend.GENERIC_PLUG and name == "stalloc_torch_shim_malloc"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process
        torch_backend.plug_library()

    monkeypatch.setattr(torch_backend, "_plug_path", lambda name: str(foreign) if name == torch_backend.TYPED_PLUG else None)
    with pytest.raises(RuntimeError, match="address 0"):  # nothing that throws: enable() refuses
        torch_backend.plug_library()


def test_capture_is_refused_with_the_setting_that_avoids_it():
    from stalloc.integrations import torch_backend

    torch = pytest.importorskip("torch")
    original = torch.cuda.graphs.CUDAGraph.capture_begin
    torch_backend.refuse_capture()
    try:
        with pytest.raises(RuntimeError, match="max-autotune-no-cudagraphs"):
            torch.cuda.graphs.CUDAGraph.capture_begin(object())
        with pytest.raises(RuntimeError, match="reduce-overhead"):
            torch.cuda.CUDAGraph.capture_begin(object(), pool=None)
    finally:
        torch_backend.disable()
    assert torch.cuda.graphs.CUDAGraph.capture_begin is original


CHANGING = Path(__file__).resolve().parents[1] / "data" / "traces" / "changing"


@pytest.mark.parametrize("trace", [LLAMA, CHANGING / "llama_dynpad.npz", CHANGING / "gpt2_eval.npz"],
                         ids=lambda p: p.stem)
def test_online_lifecycle_through_the_pytorch_entry_points(trace, tmp_path):
    # torch_backend.enable()'s default: the C library's lifecycle serves the run (the data check
    # runs on every block), and the whole recorded run's plan is saved for the next run.
    session, stats = drive(trace, plan_path=tmp_path, online=True)
    assert session.plan_source == "online"
    assert session.state in ("recording", "planning", "planned", "pool")
    info = session.allocator.online_info()
    assert info["steps"] == session.steps + 1  # the step(0) at the start, then one per step
    assert lib.stalloc_torch_failed_frees() == 0
    session.wait(30)
    assert (tmp_path / "rank0.stplan").is_file()
    stalloc.Plan.load(tmp_path / "rank0.stplan")
    session.close()


def test_online_lifecycle_switches_without_the_growable_pool():
    session, stats = drive(LLAMA, online=True, growable_pool=False)
    assert session.state == "planned" and stats.plan_hits > 0
    assert session.allocator.online_info()["plans_switched"] >= 1
    # Allocator.online_plans (and torch_backend.state()) say which plan was used and when
    plans = session.allocator.online_plans()
    used = [p for p in plans if p["switched_step"] is not None]
    assert used and all(p["status"] == 0 and not p["declined"] for p in used)
    assert all(p["started_step"] <= p["switched_step"] and p["pool_size"] > 0 for p in used)
    assert len(plans) == session.allocator.online_info()["plan_records"]
    session.close()


def test_training_and_evaluation_steps_each_get_a_plan_through_pytorch(tmp_path):
    # Evaluation passes between training steps, through the PyTorch entry points: the
    # lifecycle recognises the two kinds of step and serves each from its own plan.
    from test_online import train_eval_run

    path = tmp_path / "tte.npz"
    train_eval_run("TTE" * 6).save(str(path))
    session, stats = drive(path, online=True, growable_pool=False)
    info = session.allocator.online_info()
    assert info["step_kinds"] == 2 and info["plans_switched"] >= 2
    assert stats.plan_hits > 0 and lib.stalloc_torch_failed_frees() == 0
    from stalloc.integrations import torch_backend

    torch_backend._sessions[0] = session  # what enable() keeps per device
    try:
        state = torch_backend.state()[0]
        assert state["step_kinds"] == 2 and len(state["plans"]) == info["plan_records"]
    finally:
        del torch_backend._sessions[0]
    session.close()


def test_no_saved_plan_from_a_run_that_changes_shape(tmp_path):
    # A plan saved from steps whose sizes differ (dynamic padding, MoE routing) would miss on
    # the next run; that run is better served the way this one was, online.
    from test_online import shaped_run

    from stalloc.session import steps_vary

    varied, steady = shaped_run([1, 1.5, 2, 2.5, 3]), shaped_run([1, 1, 1, 1, 1])
    assert steps_vary(varied) and not steps_vary(steady)
    for name, trace, saved in (("varied", varied, False), ("steady", steady, True)):
        path = tmp_path / f"{name}.npz"
        trace.save(str(path))
        session, _ = drive(path, plan_path=tmp_path / name, online=True)
        session.wait(30)
        assert (tmp_path / name / "rank0.stplan").is_file() == saved, name
        assert (session.save_skipped is None) == saved, session.save_skipped
        session.close()


def test_a_run_recorded_by_the_user_still_runs(tmp_path):
    # STALLOC_RECORD_PATH (the allocator's record_path) holds the allocator's one recorder for
    # the whole run: a session that would also record (to save a plan, or offline to plan)
    # leaves it alone and says why, rather than failing the run at enable().
    from test_online import shaped_run

    path = tmp_path / "steady.npz"
    shaped_run([1, 1, 1, 1, 1]).save(str(path))
    for online in (True, False):
        mine = tmp_path / f"mine_{online}.stalloc"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session, stats = drive(path, plan_path=tmp_path / f"plans_{online}", online=online,
                                   record_path=mine)
        if online:  # the lifecycle records in memory: planned and served as without the file
            assert "STALLOC_RECORD_PATH" in session.save_skipped and stats.plan_hits > 0
            assert not (tmp_path / "plans_True" / "rank0.stplan").exists()
            from stalloc.integrations import torch_backend

            torch_backend._sessions[0] = session  # what enable() keeps per device
            try:
                said = torch_backend.state()[0]
                assert said["save_skipped"] == session.save_skipped and said["saved_plan_file"] is None
            finally:
                del torch_backend._sessions[0]
        else:  # the offline session has nothing to plan from: the fallback pool serves, warned
            assert session.state == "failed" and stats.plan_hits == 0 and session.wait(0)
            assert any("already recording" in str(w.message) for w in caught)
        session.close()
        session.allocator.record_stop()  # the user's recording, finished by its owner
        assert stalloc.load_trace(mine).summary().requests == stalloc.load_trace(path).summary().requests


def test_layout_hints_through_pytorch(tmp_path):
    # The growable pool's layout hints under the PyTorch entry points (host backend, every
    # block patterned and checked at free): a 1F1B run at 16x the sizes (about 80 MiB), where
    # hints from each step place the next one's requests.
    from test_online import scaled_trace

    path = tmp_path / "llama_1f1b_x16.npz"
    scaled_trace("llama_1f1b.npz", 16).save(str(path))
    session, stats = drive(path, online=True)
    assert stats.hinted_allocs > 0 and lib.stalloc_torch_failed_frees() == 0
    from stalloc.integrations import torch_backend

    torch_backend._sessions[0] = session  # what enable() keeps per device
    try:
        hints = torch_backend.state()[0]["layout_hints"]
        assert hints["kept"] >= 1 and hints["layouts"] >= hints["kept"]
        assert hints["placed"] == stats.hinted_allocs
    finally:
        del torch_backend._sessions[0]
    session.close()



EXIT_SCRIPT = r"""
import sys, stalloc
from stalloc._lib import lib
from stalloc.integrations import torch_backend
a = stalloc.Allocator(backend="host", record_path=sys.argv[1])  # as STALLOC_RECORD_PATH would
torch_backend._allocators[0] = a  # what enable() keeps, registered for PyTorch's hooks
lib.stalloc_torch_register(0, a._h())
p = lib.stalloc_torch_malloc(4096, 0, stalloc._lib.ffi.NULL)
lib.stalloc_torch_free(p, 4096, 0, stalloc._lib.ffi.NULL)
kept = lib.stalloc_torch_malloc(8192, 0, stalloc._lib.ffi.NULL)
torch_backend._at_exit()  # what enable() registers with atexit
assert a._handle is None
del torch_backend._allocators[0], a  # collected: the allocator must outlive this
lib.stalloc_torch_free(kept, 8192, 0, stalloc._lib.ffi.NULL)  # a tensor PyTorch frees late
print("ok")
"""


def test_exit_finishes_the_recording_and_keeps_the_allocator(tmp_path):
    # At interpreter exit PyTorch may free tensors after Python tore the module down: the
    # allocator is left alive for them (collected, it would be freed under them), and a
    # recording started with STALLOC_RECORD_PATH is finished so the trace loads.
    trace = tmp_path / "run.stalloc"
    r = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(trace)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "ok"
    t = stalloc.load_trace(trace)
    assert t.summary().requests == 2
