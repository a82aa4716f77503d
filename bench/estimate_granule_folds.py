"""What folding partly used granules could save: an upper bound, for a design not kept.

The growable pool maps CUDA memory in 2 MiB granules, and on runs of a few GiB most of its
waste is granules that live blocks use only in part (docs/online.md, "Where it stands", item 8).
Two such granules whose used bytes lie at different offsets within the granule could share one
granule of memory, mapped at both addresses (CUDA virtual memory maps one physical allocation at
several addresses; the pool's `alias` backend op does it), with the bytes each address may not
use blocked. This script estimates what that would save, without building it.

Each trace is replayed online as bench_online.py replays it (virtual backend, the defaults of
torch_backend.enable()). At every allocation while live bytes are within 3% of the most so far,
the granules live blocks touch are counted, and so are pairs of partly used granules whose used
byte ranges (offsets within the granule) are disjoint, matched greedily (the granule with the
fewest partners first), each pair one granule fewer. The run's estimate is the most over those
moments of touched granules less pairs. It keeps every address where the pool put it, folds only
pairs, and matches each moment afresh, where a real fold lasts while its blocks live; so it is
an estimate of what is there to take, not a result. Two ways of folding were built and
measured against it and neither was kept (docs/online.md, "Where it stands", item 8): a
fold's granule comes back at any later peak that would have filled the bytes it joined.

    python bench/estimate_granule_folds.py --traces DIR [DIR ...] [--scale K]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import stalloc
from stalloc.allocator import Allocator
from stalloc.trace import ALLOC, FREE, STEP

GRANULE = 2 << 20
NEAR_PEAK = 0.97


def granule_use(blocks):
    """Intra-granule used byte ranges of every touched granule, by granule index."""
    use = defaultdict(list)
    for start, size in blocks:
        for g in range(start // GRANULE, (start + size - 1) // GRANULE + 1):
            lo = max(start, g * GRANULE) - g * GRANULE
            hi = min(start + size, (g + 1) * GRANULE) - g * GRANULE
            use[g].append((lo, hi))
    return use


def disjoint(u, v) -> bool:
    return all(h1 <= l2 or h2 <= l1 for l1, h1 in u for l2, h2 in v)


def fold_pairs(use) -> int:
    """Pairs of partly used granules with disjoint used ranges, matched greedily."""
    part = {g: r for g, r in use.items() if sum(h - l for l, h in r) < GRANULE}
    partners = {g: [h for h in part if h != g and disjoint(part[g], part[h])] for g in part}
    taken, pairs = set(), 0
    for g in sorted(part, key=lambda g: len(partners[g])):
        if g in taken:
            continue
        free = [h for h in partners[g] if h not in taken]
        if free:
            taken |= {g, min(free, key=lambda h: len(partners[h]))}
            pairs += 1
    return pairs


def estimate(path: Path, scale: int):
    events = stalloc.load_trace(str(path)).events
    a = Allocator(backend="virtual")
    a.online_start(wait_for_plan=1)
    live, step, now, most, touched, folded = {}, -1, 0, 0, 0, 0
    for ev in events:
        kind = ev["kind"]
        if kind == STEP:
            step += 1
            a.step(step)
        elif kind == ALLOC:
            size = int(ev["size"]) * scale
            live[int(ev["id"])] = (a.alloc(size), size)
            now += size
            most = max(most, now)
            if now >= NEAR_PEAK * most:
                base = min(p for p, _ in live.values()) // GRANULE * GRANULE
                use = granule_use([(p - base, s) for p, s in live.values()])
                touched = max(touched, len(use))
                folded = max(folded, len(use) - fold_pairs(use))
        elif kind == FREE:
            block = live.pop(int(ev["id"]), None)
            if block:
                a.free(block[0])
                now -= block[1]
    a.close()
    return most, touched * GRANULE, folded * GRANULE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", nargs="+", required=True, help="folders of traces (.npz or native)")
    ap.add_argument("--scale", type=int, default=1, help="multiply every size by K (as bench_online.py)")
    args = ap.parse_args()
    paths = sorted(p for d in args.traces for p in Path(d).iterdir() if p.suffix in (".npz", ".stalloc"))
    print(f"{'trace':28} {'peak allocated MiB':>18} {'waste MiB':>10} {'with folds':>11}")
    total = total_folded = 0.0
    for p in paths:
        most, touched, folded = estimate(p, args.scale)
        waste, waste_folded = (touched - most) / 2**20, (folded - most) / 2**20
        total += waste
        total_folded += waste_folded
        print(f"{p.stem:28} {most / 2**20:18.2f} {waste:10.2f} {waste_folded:11.2f}", flush=True)
    print(f"\nwaste at the peak of touched granules, all traces: {total:.2f} MiB; with pairs folded "
          f"(estimate): {total_folded:.2f} MiB")


if __name__ == "__main__":
    main()
