"""Whole recorded training runs (tests/data/traces, pipeline schedules included) as placement
problems: every plan is checked by an overlap checker written here (sharing nothing with the
solver), and no plan may come back worse than the pinned peaks. The pinned figures are the
constructive heuristics' (time_limit 0, deterministic); with a time limit the placement only
keeps improvements, so it must be at or below them on any machine."""

from pathlib import Path

import numpy as np
import pytest

import stalloc
from stalloc.placement import place

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"

# trace -> (lower bound, plan peak with time_limit 0)
PINNED = {
    "gpt2_1f1b": (8011112, 8046336), "gpt2_1f1b_m8": (8013160, 8048128),
    "gpt2_1f1b_recompute": (4890344, 4996864), "gpt2_1f1b_vpp": (9112488, 9191168),
    "gpt2_accum": (6795320, 6903052), "gpt2_plain": (5797944, 5919500),
    "gpt2_recompute": (4532144, 4692488), "llama_1f1b": (6382052, 6482668),
    "llama_1f1b_m8": (6384100, 6489836), "llama_1f1b_recompute": (4560740, 4684524),
    "llama_1f1b_vpp": (6955764, 7020268), "llama_accum": (5706212, 5755756),
    "llama_plain": (4716260, 4812140), "llama_recompute": (4220904, 4448940),
    "mixtral_1f1b": (9819728, 9995116), "mixtral_1f1b_m8": (9846820, 9991660),
    "mixtral_1f1b_recompute": (7686352, 7791852), "mixtral_1f1b_vpp": (10873948, 11093612),
    "mixtral_accum": (8858408, 8974060), "mixtral_plain": (7346724, 7666540),
    "mixtral_recompute": (7007496, 7382060),
}


def problem(name):
    t = stalloc.load_trace(str(TRACES / f"{name}.npz"))
    lt = np.asarray(t.lifetimes, dtype=np.uint64)
    return lt[:, 0].copy(), lt[:, 1].copy(), np.asarray(t.sizes, dtype=np.uint64).copy()


def overlapping_pairs(lower, upper, size, offset) -> int:
    lo, up, sz, off = (np.asarray(a, dtype=np.int64) for a in (lower, upper, size, offset))
    keep = (sz > 0) & (up > lo)
    lo, up, sz, off = lo[keep], up[keep], sz[keep], off[keep]
    order = np.argsort(lo, kind="stable")
    lo, up, sz, off = lo[order], up[order], sz[order], off[order]
    bad = 0
    for i in range(len(lo)):
        k = np.searchsorted(lo, up[i], side="left")  # later starts that begin before i ends
        if k > i + 1:
            o, s = off[i + 1:k], sz[i + 1:k]
            bad += int(np.count_nonzero((o < off[i] + sz[i]) & (off[i] < o + s)))
    return bad


def test_every_trace_is_pinned():
    assert sorted(p.stem for p in TRACES.glob("*.npz")) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_whole_run_placement_valid_and_not_worse(name):
    lower, upper, size = problem(name)
    lb, pinned = PINNED[name]
    off0, r0 = place(lower, upper, size, time_limit=0.0)
    assert r0["lower_bound"] == lb and r0["peak"] == pinned
    assert overlapping_pairs(lower, upper, size, off0) == 0
    off, r = place(lower, upper, size, time_limit=0.5)
    assert r["lower_bound"] == lb
    assert lb <= r["peak"] <= pinned, (name, r["ratio"])
    assert overlapping_pairs(lower, upper, size, off) == 0
