"""Allocators on the runs that change (dynamic padding, variable micro-batches, curriculum,
batch ramp, eval passes; tools/make_traces.py): per trace, each allocator's peak allocated,
peak reserved, waste and fragmentation, as a table.

    python bench/bench_changing.py [--traces DIR ...] [--allocators pytorch pytorch-expandable]

Default: tests/data/traces/changing (the small recordings). Full-size ones:

    HF_HUB_OFFLINE=1 python tools/make_traces.py --out /tmp/traces_changing \\
        --variants dynpad accumvar curriculum ramp eval --json-for
    python bench/bench_changing.py --traces /tmp/traces_changing

Columns per allocator: peak allocated and peak reserved (MiB), waste = peak reserved - peak
allocated (MiB), fragmentation = 1 - peak allocated / peak reserved. PyTorch's default caching
allocator and expandable segments are simulated (stalloc.baseline.simulate). An allocator is one
function in ALLOCATORS: trace -> dict with peak_allocated, peak_reserved, waste, fragmentation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import stalloc
from stalloc.baseline import simulate

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20


def pytorch(trace) -> dict:
    """PyTorch's default CUDACachingAllocator (simulated)."""
    return simulate(trace, "pytorch")


def pytorch_expandable(trace) -> dict:
    """PyTorch with expandable_segments:True (simulated)."""
    return simulate(trace, "pytorch-expandable")


# name -> function(trace) -> {"peak_allocated", "peak_reserved", "waste", "fragmentation"};
# one more column is one more entry here.
ALLOCATORS = {
    "pytorch": pytorch,
    "pytorch-expandable": pytorch_expandable,
}

FIELDS = (("peak_allocated", "alloc MiB"), ("peak_reserved", "reserved MiB"),
          ("waste", "waste MiB"), ("fragmentation", "frag."))


def figures(r: dict) -> dict:
    """The four figures of one allocator's result (waste and fragmentation derived when the
    allocator gives only the peaks)."""
    alloc, reserved = int(r["peak_allocated"]), int(r["peak_reserved"])
    return {"peak_allocated": alloc, "peak_reserved": reserved,
            "waste": int(r.get("waste", reserved - alloc)),
            "fragmentation": float(r.get("fragmentation", 1 - alloc / reserved if reserved else 0.0))}


def trace_info(trace) -> dict:
    ev = trace.events
    return {"events": len(ev), "steps": int((ev["kind"] == stalloc.trace.STEP).sum()),
            "lower_bound": int(trace.lower_bound)}


def measure(path: Path, allocators: list[str]) -> dict:
    t = stalloc.load_trace(path)
    return {"trace": path.stem, **trace_info(t),
            **{name: figures(ALLOCATORS[name](t)) for name in allocators}}


def fmt(key: str, v) -> str:
    return f"{v:.1%}" if key == "fragmentation" else f"{v / MiB:.2f}"


def table(rows: list[dict], allocators: list[str]) -> str:
    """A markdown table: trace, events, steps, lower bound, then the four figures per allocator."""
    head = ["trace", "events", "steps", "lower bound MiB"] + \
        [f"{a} {label}" for a in allocators for _, label in FIELDS]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in rows:
        cells = [r["trace"], str(r["events"]), str(r["steps"]), fmt("", r["lower_bound"])] + \
            [fmt(k, r[a][k]) for a in allocators for k, _ in FIELDS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", default=[str(REPO / "tests" / "data" / "traces" / "changing")],
                    help="folders of traces (*.npz, *.stalloc; not recursive)")
    ap.add_argument("--allocators", nargs="+", default=list(ALLOCATORS), choices=list(ALLOCATORS))
    args = ap.parse_args(argv)
    paths = [p for d in args.traces for p in sorted(Path(d).glob("*.npz")) + sorted(Path(d).glob("*.stalloc"))]
    if not paths:
        raise SystemExit(f"no traces (*.npz, *.stalloc) in {' '.join(args.traces)}")
    print(table([measure(p, args.allocators) for p in paths], args.allocators))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
