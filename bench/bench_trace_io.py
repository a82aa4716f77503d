"""Trace file speed: write and load native traces of 10k to 1M+ events.

The format promises that 1M events load in under a second. Usage:
    python bench/bench_trace_io.py [--events 10000,100000,1000000] [--repeat 5]
Prints one row per size with median seconds over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import stalloc
from stalloc.trace import ALLOC, FREE


def make_events(n_events: int) -> np.ndarray:
    """Alloc/free pairs with training-like sizes, each freed a few requests later."""
    n = n_events // 2
    rng = np.random.default_rng(0)
    ev = np.zeros(2 * n, dtype=stalloc.EVENT_DTYPE)
    # Allocs at even slots in blocks of 8, their frees after the block: nested lifetimes.
    ids = np.arange(1, n + 1)
    order = []
    for start in range(0, n, 8):
        block = ids[start:start + 8]
        order.extend((int(i), ALLOC) for i in block)
        order.extend((int(i), FREE) for i in block[::-1])
    ev["id"] = [i for i, _ in order]
    ev["kind"] = [k for _, k in order]
    sizes = rng.choice([512, 4096, 1 << 20, 3 << 20, 16 << 20], size=n + 1)
    ev["size"] = sizes[ev["id"]]
    ev["address"] = ev["id"] * 4096
    ev["thread"] = 1
    return ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", default="10000,100000,1000000,4000000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'events':>10} {'MiB':>8} {'save s':>8} {'load s':>8} {'load Mev/s':>11}")
    with tempfile.TemporaryDirectory() as d:
        for n in map(int, args.events.split(",")):
            ev = make_events(n)
            trace = stalloc.Trace.from_events(ev)
            path = Path(d) / f"{n}.stalloc"
            saves, loads = [], []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                trace.save(path)
                t1 = time.perf_counter()
                loaded = stalloc.Trace.load(path)
                t2 = time.perf_counter()
                saves.append(t1 - t0)
                loads.append(t2 - t1)
                assert len(loaded) == len(ev)
            load = statistics.median(loads)
            print(f"{len(ev):>10,} {path.stat().st_size / 2**20:>8.1f} {statistics.median(saves):>8.3f} "
                  f"{load:>8.3f} {len(ev) / load / 1e6:>11.1f}")


if __name__ == "__main__":
    main()
