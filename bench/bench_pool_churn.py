"""Granule churn of the growable pool: how many 2 MiB granules it maps per training step, the
cost that a CPU run does not show. On a GPU each one is cuMemCreate + cuMemMap +
cuMemSetAccess, and (the pool gives a cached granule back before it maps another) most come with
a cuMemUnmap; the H100 run of 2026-11-25 put the pool's first runs at 1.6x PyTorch's step time
(README, "On a GPU"). This counts them without a GPU: each shipped trace, sizes scaled to GPU
scale, is served by the growable pool alone (virtual backend, which maps as CUDA does), one
event at a time, with the step markers passed on.

    python bench/bench_pool_churn.py [--traces DIR ...] [--scale 256]

Columns: maps per step in the steady state (median over the steps after the third), in all, and
the pool's waste (peak reserved - peak allocated) beside expandable segments' (simulated).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import stalloc
from stalloc.baseline import simulate


REPO = Path(__file__).resolve().parents[1]
MiB = 2**20


def churn(trace: stalloc.Trace) -> dict:
    """Maps per step of the growable pool serving the trace, and its peaks."""
    a = stalloc.Allocator(backend="virtual", virtual_capacity=1 << 42)
    live, per_step, last = {}, [], 0
    try:
        for e in trace.events:
            kind = int(e["kind"])
            if kind == 1:
                live[int(e["id"])] = a.alloc(int(e["size"]))
            elif kind == 2:
                p = live.pop(int(e["id"]), None)
                if p:
                    a.free(p)
            elif kind == 3:
                a.step(len(per_step) + 1)
                maps = a.stats().backend_allocs
                per_step.append(maps - last)
                last = maps
        s = a.stats()
        return {"steps": per_step, "maps": s.backend_allocs, "peak_reserved": s.peak_reserved_bytes,
                "peak_allocated": s.peak_allocated_bytes}
    finally:
        a.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", default=[str(REPO / "tests" / "data" / "traces"),
                                                    str(REPO / "tests" / "data" / "traces" / "changing")])
    ap.add_argument("--scale", type=int, default=256, help="multiply every size by this")
    args = ap.parse_args()
    files = [f for d in args.traces for f in sorted(Path(d).glob("*.npz"))]
    if not files:
        ap.error(f"no traces in {args.traces}")
    print(f"growable pool, sizes x{args.scale}: granules mapped per step")
    print(f"{'trace':<24}{'steps':>6}{'maps/step':>10}{'maps':>7}{'waste MiB':>11}{'exp. waste MiB':>16}")
    steady_all = []
    for f in files:
        t = stalloc.load_trace(f).scaled(args.scale)
        r = churn(t)
        steady = r["steps"][3:] or r["steps"]
        med = statistics.median(steady) if steady else 0
        steady_all.append(med)
        exp = simulate(t, "pytorch-expandable")
        print(f"{f.stem:<24}{len(r['steps']):>6}{med:>10.0f}{r['maps']:>7}"
              f"{(r['peak_reserved'] - r['peak_allocated']) / MiB:>11.1f}"
              f"{(exp['peak_reserved'] - exp['peak_allocated']) / MiB:>16.1f}", flush=True)
    print(f"median maps per step over {len(files)} traces: {statistics.median(steady_all):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
