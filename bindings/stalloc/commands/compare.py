"""stalloc compare TRACE: PyTorch, PyTorch with expandable segments, and stalloc side by side."""

from __future__ import annotations

import os

from . import fmt_bytes, print_json

__all__ = ["format_table", "run", "register"]


def format_table(rows: list[dict]) -> str:
    head = f"{'allocator':<20} {'peak allocated':>15} {'peak reserved':>15} {'waste':>12} {'fragmentation':>14} {'waste vs PyTorch':>17}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['allocator']:<20} {fmt_bytes(r['peak_allocated']):>15} {fmt_bytes(r['peak_reserved']):>15} "
                     f"{fmt_bytes(r['waste']):>12} {r['fragmentation']:>14.2%} {r['waste_vs_pytorch']:>17.1%}")
    return "\n".join(lines)


def run(args) -> int:
    from ..compare import ROW_KEYS, compare, plot
    from ..load import load_trace
    from ..plan import Plan

    trace = load_trace(args.trace, args.format)
    plan = Plan.load(args.plan) if args.plan else None
    points = 2000 if args.plot else 0
    rows, how = compare(trace, plan, plan_steps=args.plan_steps, limit=args.limit,
                        time_limit=args.time_limit, timeline_points=points)
    if args.plot:
        plot(rows, args.plot, title=os.path.basename(args.trace))
    if args.json:
        print_json([{k: r[k] for k in ROW_KEYS + ("waste_vs_pytorch", "ooms")} for r in rows])
        return 0
    print(format_table(rows))
    s = rows[-1]
    if "plan_events" in how:
        print(f"\nstalloc's plan was {how['plan']} ({how['plan_events']:,} of {how['trace_events']:,} events, "
              f"{how['plan_step_markers']} step markers); the whole trace was replayed.")
    print(f"stalloc: {s['hits']:,} plan hits, {s['misses']:,} misses, {s['fallbacks']:,} fallbacks; "
          f"plan pool {fmt_bytes(s['plan_pool'])} ({s['plan_ratio']:.4f} x its lower bound).")
    if rows[0]["waste"]:
        print(f"stalloc cuts PyTorch's waste by {1 - s['waste_vs_pytorch']:.1%}.")
    for r in rows:
        if r.get("ooms"):
            print(f"{r['allocator']}: out of memory under --limit {args.limit:,}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="PyTorch, expandable segments and stalloc side by side",
                       description="Simulates PyTorch's caching allocator (default and expandable "
                                   "segments) and replays stalloc's runtime on the same trace.")
    p.add_argument("trace", help="trace file (any supported format)")
    p.add_argument("--plan", help="plan file to replay with (default: plan the trace's first steps)")
    p.add_argument("--plan-steps", type=int, default=3,
                   help="steps after the first step marker to plan from when no --plan (default 3)")
    p.add_argument("--limit", type=int, help="device memory limit in bytes for the simulators")
    p.add_argument("--time-limit", type=float, default=2.0, help="planner search time, seconds")
    p.add_argument("--format", help="trace format instead of detecting it")
    p.add_argument("--plot", metavar="PNG", help="draw reserved and allocated memory over the run")
    p.add_argument("--json", action="store_true", help="machine-readable rows")
    p.set_defaults(func=run)
