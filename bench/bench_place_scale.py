"""Placement at scale: seconds and plan quality (plan peak / lower bound) from 10k to 1M
items, on two synthetic families generated here (seeded):

- trace: random requests, sizes drawn from a few dozen distinct sizes (as DESIGN.md says
  training traces have), lifetimes mostly short with a tail of long ones;
- training: iterations of a layered forward/backward pattern (activations freed in reverse
  order, temporaries, gradient buckets), a few persistent items spanning everything.

    python bench/bench_place_scale.py [--sizes 10000,100000,1000000] [--time-limit 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from stalloc.placement import place


def trace_like(n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = (rng.integers(1, 64, 40) * 4096).astype(np.int64)
    size = sizes[rng.integers(0, len(sizes), n)]
    lower = np.sort(rng.integers(0, 4 * n, n))
    short = rng.exponential(40, n).astype(np.int64) + 1
    long_ = rng.integers(1, 4 * n // 10 + 2, n)
    length = np.where(rng.random(n) < 0.02, long_, short)
    return lower, lower + length, size


def training_like(n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    layers = 48
    per_iter = layers * 7  # per layer: 3 activations, 1 forward and 3 backward temporaries
    iters = max(1, n // per_iter)
    lo, up, sz = [], [], []
    t = 0
    act = (rng.integers(1, 32, layers) * 65536).astype(np.int64)
    for _ in range(iters):
        fwd_start = t
        acts = []
        for l in range(layers):  # forward: activations live until backward of the layer
            for k in range(3):
                acts.append((t, act[l] * (k + 1)))
                t += 1
            lo.append(t); up.append(t + 2); sz.append(act[l] // 2); t += 1  # temporary
        for l in reversed(range(layers)):  # backward: free in reverse, gradient temporaries
            for k in range(3):
                a0, s = acts.pop()
                lo.append(a0); up.append(t + 1); sz.append(s)
            lo.append(t); up.append(t + 3); sz.append(act[l]); t += 1
            lo.append(t); up.append(t + 2); sz.append(act[l] // 4); t += 1
            lo.append(t); up.append(t + 5); sz.append(8 << 20); t += 1
        t += 1
        del fwd_start
    return np.array(lo), np.array(up), np.array(sz)


def run(kind: str, n: int, time_limit: float) -> dict:
    rng = np.random.default_rng(n)
    lower, upper, size = (trace_like if kind == "trace" else training_like)(n, rng)
    t0 = time.perf_counter()
    off, res = place(lower, upper, size, time_limit=time_limit)
    wall = time.perf_counter() - t0
    return {"family": kind, "items": len(lower), "lower_bound": res["lower_bound"],
            "plan_peak": res["peak"], "ratio": res["ratio"], "seconds": res["seconds"],
            "wall_seconds": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="search seconds on top of the heuristics (default 0)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run(kind, int(n), args.time_limit)
            for kind in ("trace", "training") for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"placement at scale, time limit {args.time_limit:g} s")
    print(f"{'family':<10}{'items':>10}{'lower bound':>16}{'plan peak':>16}{'ratio':>8}{'seconds':>9}")
    for r in rows:
        print(f"{r['family']:<10}{r['items']:>10}{r['lower_bound']:>16}{r['plan_peak']:>16}"
              f"{r['ratio']:>8.4f}{r['seconds']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
