"""stalloc info TRACE: what a trace holds."""

from __future__ import annotations

from . import fmt_bytes, print_json, print_table

__all__ = ["run", "register"]


def run(args) -> int:
    from ..load import load_trace

    trace = load_trace(args.trace, args.format)
    s = trace.summary()
    if args.json:
        print_json({"trace": args.trace, **s.as_dict()})
        return 0
    print_table([
        ("events", f"{s.events:,}"),
        ("requests", f"{s.requests:,}"),
        ("never freed", f"{s.unfreed_requests:,}"),
        ("frees of earlier allocs", f"{s.unmatched_frees:,}"),
        ("failed allocs", f"{s.failed_allocs:,}"),
        ("distinct sizes", f"{s.distinct_sizes:,}"),
        ("steps found", f"{s.steps:,}" + ("" if s.steps else " (no step markers)")),
        ("streams", f"{s.streams:,}"),
        ("total requested", fmt_bytes(s.total_bytes)),
        ("largest request", fmt_bytes(s.max_request)),
        ("lower bound", f"{fmt_bytes(s.lower_bound)} ({s.lower_bound:,} B, at event {s.lower_bound_event:,})"),
    ], title=args.trace)
    return 0


def register(sub) -> None:
    p = sub.add_parser("info", help="what a trace holds: events, sizes, steps, lower bound")
    p.add_argument("trace", help="trace file (native, npz or torch profiler JSON)")
    p.add_argument("--format", help="trace format instead of detecting it")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
