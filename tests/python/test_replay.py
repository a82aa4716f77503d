"""stalloc.replay and `stalloc replay` on the shipped real traces, with plans from the planner:
plans from the first iterations, from another model, perturbed runs, the MoE traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

import stalloc
from stalloc.cli import main
from stalloc.trace import EVENT_DTYPE, Trace

DENSE = [f"{m}_{v}" for m in ("llama", "gpt2") for v in ("plain", "recompute", "accum", "1f1b")]
MOE = [f"mixtral_{v}" for v in ("plain", "recompute", "accum", "1f1b")]
TINY = 512


def first_steps(trace: Trace, steps: int) -> Trace:
    """The events before the `steps`-th step marker (0-based): the start of the same run."""
    ev = trace.events
    marks = np.nonzero(ev["kind"] == 3)[0]
    return Trace.from_events(ev[: marks[steps]].copy())


def load(traces_dir, name) -> Trace:
    return stalloc.load_trace(str(traces_dir / f"{name}.npz"))


@pytest.mark.parametrize("name", DENSE)
def test_plan_from_first_iterations_serves_the_whole_run(traces_dir, name):
    trace = load(traces_dir, name)
    # STEP 0 builds the model, STEP 1 adds the optimizer state: steps 2 and 3 are the first two
    # steady-state iterations; the replay runs all six steps.
    head = first_steps(trace, 4)
    for alignment, bound in ((64, 0.01), (512, 0.01)):
        plan = stalloc.plan(head, time_limit=0.5, alignment=alignment)
        # A pool of its own (no growable pool, whose 2 MiB granules would hide the plan's
        # packing on these small traces): reserved is the plan's pool and the slab's chunks.
        r = stalloc.replay(trace, plan, alignment=alignment, growable_pool=False)
        sizes = trace.sizes
        assert r["misses"] == 0 and r["fallbacks"] == 0 and r["resyncs"] == 0
        assert r["hits"] == int((sizes > TINY).sum())  # every planned request at its offset
        assert r["tiny"] == int((sizes <= TINY).sum())
        assert r["peak_allocated"] == r["lower_bound"]
        # Tiny tensors sit in slots of their own size (tiny_alignment 16), so 512-B alignment
        # of the planned blocks costs little more than 64-B.
        assert r["fragmentation"] <= bound, r


def test_tiny_alignment_is_what_the_slab_uses(traces_dir, monkeypatch):
    trace = load(traces_dir, "gpt2_1f1b")  # thousands of 4-byte tensors
    plan = stalloc.plan(first_steps(trace, 4), time_limit=0.5)
    natural = stalloc.replay(trace, plan, growable_pool=False)  # chunks of their own, not granules
    monkeypatch.setenv("STALLOC_TINY_ALIGNMENT", "512")
    slotted = stalloc.replay(trace, plan, growable_pool=False)
    assert natural["peak_allocated"] == slotted["peak_allocated"]
    assert natural["peak_reserved"] < slotted["peak_reserved"]


def test_host_data_check_on_a_real_trace(traces_dir):
    trace = load(traces_dir, "llama_accum")
    plan = stalloc.plan(first_steps(trace, 4), time_limit=0.5)
    r = stalloc.replay(trace, plan, backend="host", check=True)
    assert r["checked_events"] == r["requests"] and r["misses"] == 0


def test_plan_from_another_model_is_safe(traces_dir):
    trace = load(traces_dir, "llama_plain")
    plan = stalloc.plan(load(traces_dir, "gpt2_plain"), time_limit=0.5)
    r = stalloc.replay(trace, plan, backend="host", check=True)  # raises on overlap or damage
    assert r["misses"] > 0 and r["fallbacks"] > 0
    assert r["checked_events"] == r["requests"]


def perturb(trace: Trace, rate: float, seed: int):
    """Inserts, drops and resizes about `rate` of the allocs each; returns the new trace and
    the number of non-tiny allocs left exactly as they were (after the first 2 steps)."""
    rng = np.random.default_rng(seed)
    ev = trace.events
    out, dropped, next_id = [], set(), int(ev["id"].max()) + 1
    pending = []  # (events left until free, event) of inserted requests
    kept = 0
    steps = 0
    for e in ev:
        e = e.copy()
        if e["kind"] == 3:
            steps += 1
        if e["kind"] == 1 and steps > 2:
            u = rng.random()
            if u < rate:  # drop this request: its alloc and its free
                dropped.add(int(e["id"]))
                continue
            if u < 2 * rate:
                e["size"] += 3 * 512 + 8
            elif e["size"] > TINY:
                kept += 1
            if rng.random() < rate:
                extra = np.zeros((), EVENT_DTYPE)
                extra["id"], extra["kind"] = next_id, 1
                extra["size"] = 1000 + 512 * int(rng.integers(40))
                next_id += 1
                out.append(extra)
                pending.append([3, extra])
        if e["kind"] == 2 and int(e["id"]) in dropped:
            continue
        if e["kind"] == 2:
            e["size"] = 0  # a free may give size 0; the resized alloc keeps its own
        out.append(e)
        for p in pending:
            p[0] -= 1
        for p in [p for p in pending if p[0] <= 0]:
            f = p[1].copy()
            f["kind"] = 2
            f["size"] = 0
            out.append(f)
            pending.remove(p)
    for p in pending:
        f = p[1].copy()
        f["kind"] = 2
        out.append(f)
    return Trace.from_events(np.array(out, dtype=EVENT_DTYPE)), kept


@pytest.mark.parametrize("name", ["llama_plain", "gpt2_recompute", "llama_1f1b"])
def test_perturbed_run_resyncs(traces_dir, name):
    trace = load(traces_dir, name)
    plan = stalloc.plan(first_steps(trace, 4), time_limit=0.5)
    before_steps = first_steps(trace, 2)
    planned_early = int((before_steps.sizes > TINY).sum())
    for seed in (1, 2):
        perturbed, kept = perturb(trace, 0.01, seed)  # 3% of the requests changed
        for use_steps in (True, False):
            r = stalloc.replay(perturbed, plan, backend="host", check=True, use_steps=use_steps)
            assert r["resyncs"] > 0
            assert r["hits"] >= 0.95 * (kept + planned_early), (use_steps, r, kept)


@pytest.mark.parametrize("name", MOE)
def test_moe_replay_is_safe(traces_dir, name):
    trace = load(traces_dir, name)
    plan = stalloc.plan(first_steps(trace, 4), time_limit=0.5)
    r = stalloc.replay(trace, plan, backend="host", check=True)
    assert r["checked_events"] == r["requests"]
    assert r["hits"] > 0 and r["peak_reserved"] >= r["lower_bound"]


def test_replay_without_plan(traces_dir):
    r = stalloc.replay(str(traces_dir / "gpt2_plain.npz"))
    assert r["hits"] == 0 and r["pool_size"] == 0 and r["fallbacks"] == r["requests"]
    assert 0 < r["fragmentation"] < 1


def test_replay_counts_the_granules_it_maps(traces_dir):
    # The growable pool maps 2 MiB granules (the GPU cost bench_online.py reports per step): at
    # least its peak's worth, more where it moves them; without it, one segment per cudaMalloc.
    t = stalloc.load_trace(traces_dir / "gpt2_plain.npz").scaled(256)
    for r in (stalloc.replay(t), stalloc.replay(t, online=True)):
        assert r["backend_allocs"] >= r["peak_reserved"] // (2 << 20) > 0
    segments = stalloc.replay(t, growable_pool=False)
    assert 0 < segments["backend_allocs"] < segments["requests"]


def test_bad_arguments(traces_dir):
    with pytest.raises(ValueError):
        stalloc.replay(str(traces_dir / "gpt2_plain.npz"), check=True)  # virtual memory
    with pytest.raises(ValueError):
        stalloc.replay(str(traces_dir / "gpt2_plain.npz"), backend="cuda")
    with pytest.raises(stalloc.StallocError):
        stalloc.replay(str(traces_dir / "gpt2_plain.npz"), plan=str(traces_dir / "README.md"))


def test_cli_replay(traces_dir, tmp_path, capsys):
    trace = traces_dir / "llama_plain.npz"
    plan_path = tmp_path / "llama.plan"
    stalloc.plan(str(trace), time_limit=0.5).save(plan_path)
    assert main(["replay", str(trace), "--plan", str(plan_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("peak_allocated", "peak_reserved", "fragmentation", "hits", "misses", "fallbacks"):
        assert key in out
    assert out["misses"] == 0 and out["hits"] > 0
    assert main(["replay", str(trace), "--plan", str(plan_path), "--backend", "host", "--check"]) == 0
    text = capsys.readouterr().out
    assert "fragmentation ratio" in text and "hits" in text


@pytest.mark.parametrize("name", MOE)
def test_moe_arenas_take_the_dynamic_requests(traces_dir, name):
    # The plan reserves an arena per reuse window (dynamic_headroom, docs/planner.md): more of
    # the routing-dependent requests land in the pool instead of the fallback pool, with every
    # block's data intact (host backend, pattern check) and no overlap.
    trace = load(traces_dir, name)
    head = first_steps(trace, 4)
    with_arenas = stalloc.plan(head, time_limit=0.5)
    without = stalloc.plan(head, time_limit=0.5, dynamic_headroom=0)
    assert with_arenas.pool_size > without.pool_size
    a = stalloc.replay(trace, with_arenas, backend="host", check=True)
    b = stalloc.replay(trace, without, backend="host", check=True)
    assert a["checked_events"] == a["requests"]
    assert a["fallbacks"] < b["fallbacks"] and a["dynamic"] > b["dynamic"], (a, b)


def test_dynamic_headroom_is_checked(traces_dir):
    trace = load(traces_dir, "mixtral_plain")
    for bad in (0.5, -1.0, float("nan"), float("inf")):
        with pytest.raises(stalloc.errors.InvalidArgumentError, match="dynamic_headroom"):
            stalloc.plan(trace, time_limit=0, dynamic_headroom=bad)
