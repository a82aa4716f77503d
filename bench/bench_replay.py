"""Replay table: every shipped real trace served by the runtime from a plan made on the first
two steady-state iterations (STEP 0-3: model set-up, optimizer state, two iterations), the
whole run replayed (six optimizer steps) with the overlap check on. Beside it, PyTorch's
caching allocator (stalloc.baseline's simulator) on the same trace.

    python3 bench/bench_replay.py [--scale 1024] [--alignment 512] [--time-limit 1]

--scale multiplies every request above 512 B (the CPU traces' activations are KiB; a GPU
run's are MiB, so x1024 puts them where segment and slab granularity matter as much as on a
GPU). Columns: lower bound of the replayed trace, peak reserved, fragmentation ratio
(1 - peak allocated / peak reserved), peak reserved / lower bound, plan hits, misses,
fallbacks, resyncs, requests placed in reusable space; PyTorch's fragmentation ratio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import stalloc
from stalloc.baseline import simulate
from stalloc.trace import Trace

REPO = Path(__file__).resolve().parents[1]
TINY = 512


def head(trace: Trace, steps: int) -> Trace:
    ev = trace.events
    marks = np.nonzero(ev["kind"] == 3)[0]
    return Trace.from_events(ev[: marks[steps]].copy())


def mib(n: int) -> str:
    return f"{n / 2**20:9.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=str(REPO / "tests" / "data" / "traces"))
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--alignment", type=int, default=512)
    ap.add_argument("--time-limit", type=float, default=1.0)
    args = ap.parse_args()
    paths = sorted(Path(args.traces).glob("*.npz"))
    print(f"sizes x{args.scale} above {TINY} B, alignment {args.alignment}; MiB")
    print(f"{'trace':18} {'lower bd':>9} {'reserved':>9} {'frag':>7} {'res/LB':>7} {'hits':>6} "
          f"{'misses':>6} {'fallbk':>6} {'resync':>6} {'reuse':>6} {'tiny':>6} {'replay s':>8} {'torch frag':>10}")
    for path in paths:
        trace = stalloc.load_trace(str(path)).scaled(args.scale, min_size=TINY + 1)
        plan = stalloc.plan(head(trace, 4), time_limit=args.time_limit, alignment=args.alignment)
        t0 = time.perf_counter()
        r = stalloc.replay(trace, plan, alignment=args.alignment)
        dt = time.perf_counter() - t0
        torch = simulate(trace, "pytorch")
        lb = r["lower_bound"]
        print(f"{path.stem:18} {mib(lb)} {mib(r['peak_reserved'])} {r['fragmentation']:7.4f} "
              f"{r['peak_reserved'] / lb:7.4f} {r['hits']:6d} {r['misses']:6d} {r['fallbacks']:6d} "
              f"{r['resyncs']:6d} {r['dynamic']:6d} {r['tiny']:6d} {dt:8.3f} {torch['fragmentation']:10.4f}")


if __name__ == "__main__":
    main()
