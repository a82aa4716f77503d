"""Simulation speed of the PyTorch baseline simulators (stalloc.baseline.simulate).

Synthesises traces of 10k..1M events by repeating one real steady iteration (STEP 3 -> STEP 4
of a shipped CPU trace, sizes scaled so they land in PyTorch's large pool as a real model's
do) after that run's persistent allocations, then times each simulator on each size.
Prints medians of --repeat runs.

    python3 bench/bench_sim.py [--trace tests/data/traces/mixtral_1f1b.npz] [--scale 1024]

With --real it instead prints PyTorch vs expandable segments on every shipped real trace, as
recorded and with sizes scaled by each --real-scales factor.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import stalloc
from stalloc.baseline import ALLOCATORS, simulate
from stalloc.trace import ALLOC, FREE, STEP

REPO = Path(__file__).resolve().parents[1]


def repeated(trace: stalloc.Trace, target: int, scale: int) -> np.ndarray:
    ev = np.array(trace.events)
    steps = np.flatnonzero(ev["kind"] == STEP)
    if len(steps) < 5:
        raise SystemExit("the trace needs at least 5 step markers")
    lo, hi = steps[3], steps[4]
    req = trace.requests
    # persistent part: requests allocated before the window and still live at its start
    live = req[(req["alloc_event"] < lo) & (req["free_event"] >= lo)]
    prologue = np.zeros(len(live), dtype=ev.dtype)
    prologue["id"], prologue["size"], prologue["kind"] = live["id"], live["size"], ALLOC
    # the window's requests that begin and end inside it
    inside = req[(req["alloc_event"] >= lo) & (req["free_event"] < hi)]
    keep = np.zeros(len(ev), bool)
    keep[inside["alloc_event"].astype(np.int64)] = True
    keep[inside["free_event"].astype(np.int64)] = True
    body = ev[keep]
    body = body[(body["kind"] == ALLOC) | (body["kind"] == FREE)]
    copies = max(1, -(-(target - len(prologue)) // len(body)))  # ceil; cut to target below
    id_span = np.uint64(int(ev["id"].max()) + 1)
    out = np.concatenate([prologue] + [body] * copies)
    for k in range(copies):
        s = len(prologue) + k * len(body)
        out["id"][s:s + len(body)] += id_span * np.uint64(k + 1)
    out["size"] *= np.uint64(scale)
    return out[:target] if len(out) > target else out


def real_table(scales: list[int]) -> None:
    print("| trace | sizes | lower bound MiB | pytorch reserved MiB | frag. | "
          "expandable reserved MiB | frag. |")
    print("|---|---|---|---|---|---|---|")
    for p in sorted((REPO / "tests/data/traces").glob("*.npz")):
        t0 = stalloc.load_trace(p)
        for scale in scales:
            t = t0.scaled(scale)
            a, b = simulate(t, "pytorch"), simulate(t, "pytorch-expandable")
            mib = lambda x: f"{x / 2**20:.2f}" if x < 2**24 else f"{x / 2**20:.0f}"
            print(f"| {p.stem} | x{scale} | {mib(t.lower_bound)} | {mib(a['peak_reserved'])} | "
                  f"{a['fragmentation']:.3f} | {mib(b['peak_reserved'])} | {b['fragmentation']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(REPO / "tests/data/traces/mixtral_1f1b.npz"))
    ap.add_argument("--scale", type=int, default=1024, help="multiply every size by this")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--real", action="store_true", help="the table over the shipped traces")
    ap.add_argument("--real-scales", default="1,1024")
    args = ap.parse_args()
    if args.real:
        real_table([int(x) for x in args.real_scales.split(",")])
        return
    base = stalloc.load_trace(args.trace)
    print(f"trace {Path(args.trace).name}, one steady iteration repeated, sizes x{args.scale}; "
          f"median of {args.repeat}")
    names = list(ALLOCATORS)
    print(f"{'events':>10}  " + "  ".join(f"{n + ' s':>20}" for n in names) +
          f"  {'M events/s':>10}  {'peak reserved (MiB)':>22}")
    for target in (int(x) for x in args.sizes.split(",")):
        ev = repeated(base, target, args.scale)
        # truncation may cut a request's free: fine, it stays live
        t = stalloc.Trace.from_events(ev)
        times, peaks = [], []
        for name in names:
            samples = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                r = simulate(t, name)
                samples.append(time.perf_counter() - t0)
            times.append(statistics.median(samples))
            peaks.append(r["peak_reserved"] >> 20)
        rate = len(t) / max(times) / 1e6
        print(f"{len(t):>10,}  " + "  ".join(f"{x:>20.4f}" for x in times) +
              f"  {rate:>10.1f}  {' / '.join(map(str, peaks)):>22}")


if __name__ == "__main__":
    main()
