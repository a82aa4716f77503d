"""stalloc compare TRACE: PyTorch, PyTorch with expandable segments, and stalloc side by side."""

from __future__ import annotations

import os

from . import add_scale_argument, fmt_bytes, load_scaled, print_json

__all__ = ["format_table", "run", "register"]


SMALL_RUN = 64 << 21  # under 64 granules of 2 MiB the granules, not the allocator, set the waste


def format_table(rows: list[dict]) -> str:
    head = f"{'allocator':<22} {'peak allocated':>15} {'peak reserved':>15} {'waste':>12} {'fragmentation':>14} {'waste vs PyTorch':>17}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['allocator']:<22} {fmt_bytes(r['peak_allocated']):>15} {fmt_bytes(r['peak_reserved']):>15} "
                     f"{fmt_bytes(r['waste']):>12} {r['fragmentation']:>14.2%} {r['waste_vs_pytorch']:>17.1%}")
    return "\n".join(lines)


def run(args) -> int:
    from ..compare import ROW_KEYS, compare, plot
    from ..plan import Plan

    trace = load_scaled(args)
    plan = Plan.load(args.plan) if args.plan else None
    points = 2000 if args.plot else 0
    rows, how = compare(trace, plan, plan_steps=args.plan_steps, limit=args.limit,
                        time_limit=args.time_limit, timeline_points=points,
                        online=not args.no_online)
    if args.plot:
        plot(rows, args.plot, title=os.path.basename(args.trace))
    if args.json:
        print_json([{k: r[k] for k in ROW_KEYS + ("waste_vs_pytorch", "ooms")} for r in rows])
        return 0
    print(format_table(rows))
    online = next((r for r in rows if r["allocator"] == "stalloc"), None)
    planned = rows[-1]
    if online is not None:
        used = [p for p in online.get("plans", []) if p["switched_step"] != 2**64 - 1]
        print(f"\nstalloc: the online lifecycle, as a first run meets the trace: {len(used)} plan(s) "
              f"switched to (steps {', '.join(str(p['switched_step']) for p in used) or '-'}); "
              f"{online['hits']:,} plan hits, {online['misses']:,} misses, {online['fallbacks']:,} fallbacks.")
    if "plan_events" in how:
        print(f"{planned['allocator']}: a plan {how['plan']} ({how['plan_events']:,} of "
              f"{how['trace_events']:,} events, {how['plan_step_markers']} step markers), loaded "
              f"before the first allocation; the whole trace was replayed.")
        if how.get("saved") is False:
            print("  (those first steps changed shape: torch_backend saves no plan from them, and a "
                  "later run is served online like the first, the stalloc row)")
    print(f"{planned['allocator']}: {planned['hits']:,} plan hits, {planned['misses']:,} misses, "
          f"{planned['fallbacks']:,} fallbacks; plan pool {fmt_bytes(planned['plan_pool'])} "
          f"({planned['plan_ratio']:.4f} x its lower bound).")
    if rows[0]["waste"] and online is not None:
        cut = 1 - online["waste_vs_pytorch"]
        print(f"stalloc cuts PyTorch's waste by {cut:.1%}." if cut >= 0 else
              f"stalloc wastes {-cut:.1%} more than PyTorch on this trace.")
    if trace.lower_bound < SMALL_RUN:
        print(f"(this run's peak is {fmt_bytes(trace.lower_bound)}, a few 2 MiB granules, which set most of "
              "every allocator's waste; --scale N multiplies its sizes as a larger model's would be)")
    for r in rows:
        if r.get("ooms"):
            print(f"{r['allocator']}: out of memory under --limit {args.limit:,}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="PyTorch, expandable segments and stalloc side by side",
                       description="Simulates PyTorch's caching allocator (default and expandable "
                                   "segments) and replays stalloc on the same trace: online, as a "
                                   "first run meets it (the `stalloc` row), and from a plan loaded "
                                   "before the first allocation.")
    p.add_argument("trace", help="trace file (any supported format)")
    p.add_argument("--plan", help="plan file to replay from the first allocation (default: one made "
                                  "from the trace's first steps, as a run saves it for the next)")
    p.add_argument("--no-online", action="store_true",
                   help="leave out the online row (stalloc as a first run meets the trace)")
    p.add_argument("--plan-steps", type=int, default=3,
                   help="steps after the first step marker to plan from when no --plan (default 3)")
    p.add_argument("--limit", type=int, help="device memory limit in bytes for the simulators")
    p.add_argument("--time-limit", type=float, default=2.0, help="planner search time, seconds")
    p.add_argument("--format", help="trace format instead of detecting it")
    add_scale_argument(p)
    p.add_argument("--plot", metavar="PNG", help="draw reserved and allocated memory over the run")
    p.add_argument("--json", action="store_true", help="machine-readable rows")
    p.set_defaults(func=run)
