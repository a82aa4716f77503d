"""Check the PyTorch allocator simulator against the real allocator on a GPU.

For the default allocator and for expandable_segments:True, records a real snapshot of a small
training loop (scripts/gpu/record_snapshot.py, each in its own process), imports it
(stalloc.importers.torch_snapshot), simulates the same allocator (stalloc.baseline) and prints
the simulated peak reserved next to torch.cuda.max_memory_reserved(), with the difference.
Peak allocated is shown too: PyTorch counts rounded block sizes, the simulator requested bytes,
so PyTorch's is a little higher by design.

    python scripts/gpu/check_torch_sim.py [--steps 8] [--out results.json]
    python scripts/gpu/check_torch_sim.py --snapshot s.pickle [--expandable]   # no GPU needed:
        compares with the <snapshot>.stats.json that record_snapshot.py wrote
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def compare(snapshot: str, expandable: bool) -> dict:
    from stalloc.baseline import simulate
    from stalloc.importers.torch_snapshot import load_torch_snapshot
    from stalloc.trace import Trace

    with open(snapshot + ".stats.json") as f:
        real = json.load(f)
    events, info = load_torch_snapshot(snapshot, return_info=True)
    trace = Trace.from_events(events)
    allocator = "pytorch-expandable" if expandable else "pytorch"
    sim = simulate(trace, allocator)
    diff = sim["peak_reserved"] - real["max_memory_reserved"]
    return {
        "allocator": allocator,
        "events": len(trace),
        "unmatched_frees": info["unmatched_frees"],
        "torch_max_reserved": real["max_memory_reserved"],
        "sim_peak_reserved": sim["peak_reserved"],
        "difference": diff,
        "relative_difference": diff / real["max_memory_reserved"] if real["max_memory_reserved"] else 0.0,
        "torch_max_allocated": real["max_memory_allocated"],
        "sim_peak_allocated": sim["peak_allocated"],
        "device": real.get("device"),
        "torch": real.get("torch"),
    }


def show(rows: list[dict]) -> None:
    mib = lambda x: f"{x / 2**20:,.1f}"
    print(f"{'allocator':<20}{'torch reserved MiB':>20}{'simulated MiB':>16}{'diff MiB':>11}"
          f"{'diff %':>8}{'torch alloc MiB':>17}{'sim alloc MiB':>15}")
    for r in rows:
        print(f"{r['allocator']:<20}{mib(r['torch_max_reserved']):>20}{mib(r['sim_peak_reserved']):>16}"
              f"{mib(r['difference']):>11}{100 * r['relative_difference']:>7.1f}%"
              f"{mib(r['torch_max_allocated']):>17}{mib(r['sim_peak_allocated']):>15}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--snapshot", help="compare this recorded snapshot instead of recording")
    ap.add_argument("--expandable", action="store_true", help="with --snapshot: it was recorded "
                    "with expandable_segments:True")
    args = ap.parse_args()
    rows = []
    if args.snapshot:
        rows.append(compare(args.snapshot, args.expandable))
    else:
        tmp = tempfile.mkdtemp(prefix="stalloc-check-sim-")
        for expandable in (False, True):
            path = os.path.join(tmp, f"{'expandable' if expandable else 'default'}.pickle")
            cmd = [sys.executable, os.path.join(HERE, "record_snapshot.py"), "-o", path,
                   "--steps", str(args.steps)] + (["--expandable"] if expandable else [])
            rc = subprocess.call(cmd)
            if rc:
                print(f"check_torch_sim: recording failed (exit {rc})", file=sys.stderr)
                return rc
            rows.append(compare(path, expandable))
    show(rows)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
