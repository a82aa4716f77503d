"""Planner quality and speed: plan peak against the lower bound, and seconds, on the real traces
and on long periodic traces made by repeating a real steady-state iteration.

Usage:
    python bench/bench_planner.py [--traces tests/data/traces] [--time-limit 2] [--repeat 3]
                                  [--scale 10000,100000,1000000] [--scale-from llama_plain]
                                  [--no-markers]
Prints two tables: one row per trace (requests, lower bound, plan peak, ratio, median seconds
over the repeats), then one row per synthetic size. ``lower bound`` is the lower bound of the
planned requests (docs/planner.md); ``trace LB`` counts every request, tiny and dynamic too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import stalloc
from stalloc.trace import ALLOC, FREE, STEP

REPO = Path(__file__).resolve().parents[1]


def plan_timed(trace, time_limit: float, repeat: int, markers: bool, detect: bool = True):
    times, p = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = stalloc.plan(trace, time_limit=time_limit, use_step_markers=markers,
                         detect_period=detect)
        times.append(time.perf_counter() - t0)
    return p, statistics.median(times)


def repeat_iteration(trace, copies: int) -> stalloc.Trace:
    """The trace up to its second-to-last step, then its last step repeated `copies` times with
    fresh ids. A free in the step of a request allocated in the step before is pointed at the
    previous copy's request at the same position, so lifetimes across the boundary repeat too."""
    ev = np.array(trace.events)
    steps = np.flatnonzero(ev["kind"] == STEP)
    if len(steps) < 3:
        raise ValueError("needs a trace with at least 3 step markers")
    prev_start, last_start = steps[-2], steps[-1]
    head, prev, tmpl = ev[:last_start], ev[prev_start:last_start], ev[last_start:]
    prev_pos = {int(i): k for k, i in enumerate(prev["id"][prev["kind"] == ALLOC])}
    t_allocs = tmpl["kind"] == ALLOC
    t_pos = {int(i): k for k, i in enumerate(tmpl["id"][t_allocs])}
    P = int(t_allocs.sum())
    # per template event: (source, position): 0 = this copy, 1 = previous copy, -1 = drop
    src = np.full(len(tmpl), 0, np.int64)
    pos = np.zeros(len(tmpl), np.int64)
    for j, e in enumerate(tmpl):
        i = int(e["id"])
        if e["kind"] == ALLOC:
            pos[j] = t_pos[i]
        elif e["kind"] == FREE:
            if i in t_pos:
                pos[j] = t_pos[i]
            elif i in prev_pos:
                src[j], pos[j] = 1, prev_pos[i]
            else:
                src[j] = -1
    keep = src >= 0
    tmpl, src, pos = tmpl[keep], src[keep], pos[keep]
    prev_ids = prev["id"][prev["kind"] == ALLOC]
    base = int(ev["id"].max()) + 1
    out = [head]
    step_no = int(tmpl["id"][0]) if tmpl["kind"][0] == STEP else 0
    for k in range(copies):
        c = tmpl.copy()
        mine = base + k * P + pos
        older = base + (k - 1) * P + pos if k else prev_ids[pos]
        ids = np.where(src == 1, older, mine)
        is_step = c["kind"] == STEP
        c["id"] = np.where(is_step, step_no + k, ids)
        c["address"] = 0
        out.append(c)
    return stalloc.Trace.from_events(np.concatenate(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default=str(REPO / "tests" / "data" / "traces"),
                    help="directory of .npz (or native) traces")
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", default="10000,100000,1000000",
                    help="request counts for the synthetic traces ('' to skip)")
    ap.add_argument("--scale-from", default="llama_plain", help="trace whose last step is repeated")
    ap.add_argument("--no-markers", action="store_true", help="plan without step markers")
    args = ap.parse_args(argv)
    markers = not args.no_markers

    paths = sorted(p for p in Path(args.traces).iterdir()
                   if p.suffix in (".npz", ".stalloc") and not p.name.startswith("."))
    print(f"# time limit {args.time_limit} s, median of {args.repeat}, "
          f"{'step markers' if markers else 'no step markers'}")
    hdr = f"{'trace':<22} {'requests':>9} {'lower bound':>12} {'plan peak':>12} {'ratio':>8} " \
          f"{'seconds':>8} {'trace LB':>12} {'steps':>5} {'dynamic':>7}"
    print(hdr)
    print("-" * len(hdr))
    worst_dense = 1.0
    for path in paths:
        trace = stalloc.load_trace(path)
        p, sec = plan_timed(trace, args.time_limit, args.repeat, markers)
        i = p.info()
        if "mixtral" not in path.name:
            worst_dense = max(worst_dense, i.ratio)
        print(f"{path.stem:<22} {trace.summary().requests:>9,} {i.lower_bound:>12,} "
              f"{i.plan_peak:>12,} {i.ratio:>8.5f} {sec:>8.3f} {i.trace_lower_bound:>12,} "
              f"{i.steps_found:>5} {i.dynamic:>7}")
    print(f"# worst dense ratio: {worst_dense:.5f}")

    sizes = [int(s) for s in args.scale.split(",") if s.strip()]
    if sizes:
        src = stalloc.load_trace(Path(args.traces) / f"{args.scale_from}.npz")
        ev = np.array(src.events)
        steps = np.flatnonzero(ev["kind"] == STEP)
        per_step = int((ev["kind"][steps[-1]:] == ALLOC).sum())
        head = int((ev["kind"][:steps[-1]] == ALLOC).sum())
        print(f"\n# scale: {args.scale_from}'s last step ({per_step:,} allocs) repeated")
        print("# static: the same trace planned as one timeline (detect_period off): every "
              "request placed")
        hdr = f"{'requests':>10} {'events':>10} {'lower bound':>12} {'plan peak':>12} " \
              f"{'ratio':>8} {'seconds':>8} {'steps':>6} {'static ratio':>12} {'static s':>8}"
        print(hdr)
        print("-" * len(hdr))
        for n in sizes:
            copies = max(2, -(-(n - head) // per_step))
            trace = repeat_iteration(src, copies)
            p, sec = plan_timed(trace, args.time_limit, args.repeat, markers)
            i = p.info()
            s = trace.summary()
            q, qsec = plan_timed(trace, args.time_limit, args.repeat, markers, detect=False)
            print(f"{s.requests:>10,} {s.events:>10,} {i.lower_bound:>12,} {i.plan_peak:>12,} "
                  f"{i.ratio:>8.5f} {sec:>8.3f} {i.steps_found:>6} {q.info().ratio:>12.5f} "
                  f"{qsec:>8.3f}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
