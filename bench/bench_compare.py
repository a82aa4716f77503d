"""stalloc against PyTorch's caching allocator (simulated, default and expandable segments) on
real training traces: the table behind the README's headline figures.

Two stalloc columns (stalloc.compare): "online" is a first run as it meets the trace (the
online lifecycle: record, plan in the background, switch or decline, re-plan; no look-ahead);
"saved plan" is a later run that loads the plan made from the trace's first steps (set-up,
warm-up step and two steady steps) before its first allocation. Waste = peak reserved - peak
allocated; the ratio columns are the online waste over the others'.

    python bench/bench_compare.py [--traces DIR] [--scale K] [--million]

--traces: a folder of traces (default tests/data/traces; bigger ones come from
  `HF_HUB_OFFLINE=1 python tools/make_traces.py --out DIR`).
--scale K: multiply every request size by K (the shipped traces are tiny; this keeps their
  order and lifetimes and gives GPU-sized requests). The table says when it was used.
--million: also time `stalloc compare` (the CLI, end to end) on a ~1M-event trace made by
  repeating llama_plain's last step.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import stalloc
from stalloc.compare import compare

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def granule_floor(lower_bound: int, granule: int = 2 << 20) -> int:
    """The least waste of memory mapped in 2 MiB granules (CUDA's): the lower bound rounded up."""
    return -(-lower_bound // granule) * granule - lower_bound


def table(paths: list[Path], scale: int) -> None:
    print(f"sizes x{scale}" if scale != 1 else "sizes as recorded")
    head = (f"{'trace':<22} {'events':>8} {'lower bound MiB':>15} {'2 MiB floor':>11} {'PyTorch waste':>13} "
            f"{'expandable waste':>16} {'online waste':>12} {'vs PyTorch':>10} {'vs expandable':>13} "
            f"{'saved-plan waste':>16} {'vs PyTorch':>10} {'seconds':>7}")
    print(head + "\n" + "-" * len(head))
    for p in paths:
        t = stalloc.load_trace(p).scaled(scale)
        t0 = time.perf_counter()
        rows, _ = compare(t)
        sec = time.perf_counter() - t0
        py, ex, st, saved = rows

        def ratio(a, b):
            return a["waste"] / b["waste"] if b["waste"] else float("nan")

        print(f"{p.stem:<22} {len(t):>8,} {mib(t.lower_bound):>15} {mib(granule_floor(t.lower_bound)):>11} "
              f"{mib(py['waste']):>13} "
              f"{mib(ex['waste']):>16} {mib(st['waste']):>12} {ratio(st, py):>10.1%} "
              f"{ratio(st, ex):>13.1%} {mib(saved['waste']):>16} {ratio(saved, py):>10.1%} {sec:>7.2f}")


def million(repeat: int) -> None:
    from bench_planner import repeat_iteration

    base = stalloc.load_trace(REPO / "tests" / "data" / "traces" / "llama_plain.npz")
    per_step = int((np.array(base.events)["kind"] == 3).sum())
    copies = max(1, 1_000_000 * per_step // len(base))
    big = repeat_iteration(base, copies)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.stalloc"
        big.save(path)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "stalloc", "compare", str(path), "--json"],
                           check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
    print(f"\n`stalloc compare` on {len(big):,} events (llama_plain's last step repeated): "
          f"median {statistics.median(times):.1f} s over {repeat} runs (load, plan, replay, 2 simulations)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(REPO / "tests" / "data" / "traces"))
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--million", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    paths = sorted(Path(args.traces).glob("*.npz")) + sorted(Path(args.traces).glob("*.stalloc"))
    if not paths:
        raise SystemExit(f"no traces (*.npz, *.stalloc) in {args.traces}")
    table(paths, args.scale)
    if args.million:
        million(args.repeat)


if __name__ == "__main__":
    main()
