"""Whole training runs as placement problems: every request of a recorded trace becomes one
MiniMalloc item (lifetime [alloc event, free event), unfreed ones to the end of the trace), and
stalloc's placement is measured against the lower bound, each plan checked by an overlap
checker that shares nothing with the solver.

    python bench/bench_corpus.py [--traces tests/data/traces] [--time-limit 5] [--csv-out DIR]
                                 [--json]

Full-size traces: HF_HUB_OFFLINE=1 python tools/make_traces.py --out /tmp/traces, then
--traces /tmp/traces. --csv-out writes each problem as MiniMalloc CSV (for an exact solver).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import stalloc
from stalloc.placement import place

REPO = Path(__file__).resolve().parents[1]


def problem(path):
    """(lower, upper, size) of every request of the trace at `path`."""
    t = stalloc.load_trace(str(path))
    lt = np.asarray(t.lifetimes, dtype=np.uint64)
    return lt[:, 0].copy(), lt[:, 1].copy(), np.asarray(t.sizes, dtype=np.uint64).copy()


def overlaps(lower, upper, size, offset) -> int:
    """Pairs of items live at the same time that share a byte: items sorted by start, each
    checked against the later-starting ones that begin before it ends."""
    lo, up, sz, off = (np.asarray(a, dtype=np.int64) for a in (lower, upper, size, offset))
    keep = (sz > 0) & (up > lo)
    lo, up, sz, off = lo[keep], up[keep], sz[keep], off[keep]
    order = np.argsort(lo, kind="stable")
    lo, up, sz, off = lo[order], up[order], sz[order], off[order]
    bad = 0
    for i in range(len(lo)):
        k = np.searchsorted(lo, up[i], side="left")
        if k <= i + 1:
            continue
        o, s = off[i + 1:k], sz[i + 1:k]
        bad += int(np.count_nonzero((o < off[i] + sz[i]) & (off[i] < o + s)))
    return bad


def write_csv(path, lower, upper, size):
    with open(path, "w") as f:
        f.write("id,lower,upper,size\n")
        for i, (a, b, c) in enumerate(zip(lower.tolist(), upper.tolist(), size.tolist())):
            if c and b > a:
                f.write(f"{i},{a},{b},{c}\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(REPO / "tests" / "data" / "traces"))
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--csv-out", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    files = sorted(Path(args.traces).glob("*.npz"))
    if not files:
        print(f"no traces in {args.traces}", file=sys.stderr)
        return 1
    rows = []
    for f in files:
        lower, upper, size = problem(f)
        if args.csv_out:
            Path(args.csv_out).mkdir(parents=True, exist_ok=True)
            write_csv(Path(args.csv_out) / f"{f.stem}.csv", lower, upper, size)
        off, r = place(lower, upper, size, time_limit=args.time_limit)
        rows.append({"trace": f.stem, "items": int(len(size)), "lower_bound": r["lower_bound"],
                     "plan_peak": r["peak"], "ratio": r["ratio"], "optimal": r["optimal"],
                     "seconds": r["seconds"], "valid": overlaps(lower, upper, size, off) == 0})
        if not args.json:
            x = rows[-1]
            if len(rows) == 1:
                print(f"whole runs as placement problems ({args.traces}), time limit "
                      f"{args.time_limit:g} s each")
                print(f"{'trace':<24}{'items':>7}{'lower bound':>13}{'plan peak':>13}{'ratio':>8}"
                      f"{'optimal':>9}{'seconds':>9}{'valid':>7}")
            print(f"{x['trace']:<24}{x['items']:>7}{x['lower_bound']:>13}{x['plan_peak']:>13}"
                  f"{x['ratio']:>8.4f}{str(x['optimal']):>9}{x['seconds']:>9.2f}{str(x['valid']):>7}",
                  flush=True)
    ratios = [x["ratio"] for x in rows]
    summary = {"mean_ratio": float(np.mean(ratios)), "max_ratio": float(max(ratios)),
               "max_seconds": max(x["seconds"] for x in rows),
               "all_valid": all(x["valid"] for x in rows)}
    if args.json:
        print(json.dumps({"traces": rows, "summary": summary}, indent=2))
    else:
        print(f"mean ratio {summary['mean_ratio']:.4f}, max ratio {summary['max_ratio']:.4f}, "
              f"slowest {summary['max_seconds']:.2f} s, all valid: {summary['all_valid']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
