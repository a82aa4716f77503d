"""The recorded runs that change (tests/data/traces/changing, tools/make_traces.py): one step
marker per optimizer step and per evaluation pass, none empty, and shapes that do change."""

from pathlib import Path

import numpy as np
import pytest

ALLOC, FREE, STEP = 1, 2, 3
CHANGING = Path(__file__).resolve().parents[1] / "data" / "traces" / "changing"
MODELS = ("llama", "gpt2", "mixtral")
VARIANTS = ("dynpad", "accumvar", "curriculum", "ramp", "eval")
STEPS = 12  # make_traces.py --changing-steps


def steps_of(name):
    ev = np.load(CHANGING / f"{name}.npz")["events"]
    pos = list(np.flatnonzero(ev["kind"] == STEP)) + [len(ev)]
    return ev, [ev[a + 1:b] for a, b in zip(pos[:-1], pos[1:])]


def test_the_folder_holds_every_model_and_variant():
    assert sorted(p.stem for p in CHANGING.glob("*.npz")) == \
        sorted(f"{m}_{v}" for m in MODELS for v in VARIANTS)


@pytest.mark.parametrize("name", [f"{m}_{v}" for m in MODELS for v in VARIANTS])
def test_one_marker_per_step_and_none_empty(name):
    ev, steps = steps_of(name)
    evals = STEPS // 2 if name.endswith("_eval") else 0
    assert ev[0]["kind"] == STEP
    assert ev[ev["kind"] == STEP]["id"].tolist() == list(range(1 + STEPS + evals))
    assert all((s["kind"] == ALLOC).any() for s in steps)  # no empty step (at the end either)


@pytest.mark.parametrize("name", [f"{m}_{v}" for m in MODELS for v in VARIANTS])
def test_the_steps_change(name):
    _, steps = steps_of(name)
    # bytes allocated per optimizer step (STEP 1 also allocates the AdamW state: left out)
    alloc = [int(s["size"][s["kind"] == ALLOC].sum()) for s in steps[2:]]
    assert len(set(alloc)) > 1
    if name.endswith("_eval"):  # the eval passes (every third step from STEP 3) allocate least
        evals = alloc[1::3]
        assert len(evals) == STEPS // 2 and max(evals) < min(alloc[0::3] + alloc[2::3])


def test_bench_changing_lists_every_trace_and_takes_one_more_allocator(capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "bench_changing.py"
    spec = importlib.util.spec_from_file_location("bench_changing", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # one more column: one function returning the peaks
    bench.ALLOCATORS["lower-bound"] = lambda t: {"peak_allocated": t.lower_bound,
                                                 "peak_reserved": t.lower_bound}
    assert bench.main(["--traces", str(CHANGING), "--allocators", "pytorch",
                       "pytorch-expandable", "lower-bound"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + len(MODELS) * len(VARIANTS)
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 4 + 3 * 4
        lb = float(cells[3])
        torch_alloc, torch_reserved, torch_frag = float(cells[4]), float(cells[5]), cells[7]
        assert torch_alloc == lb and torch_reserved >= lb and torch_frag.endswith("%")
        assert cells[-2:] == ["0.00", "0.0%"]  # the lower bound wastes nothing
