"""stalloc plan TRACE -o PLAN: plan a trace (or solve a MiniMalloc CSV).

A trace in any readable format gives a plan file (docs/plan-format.md) and prints the lower
bound, plan peak, ratio, classes, steps and seconds. A MiniMalloc CSV (header
``id,lower,upper,size``, told and read by stalloc.importers.minimalloc_csv, as ``stalloc
import`` does) is solved by the placement solver and written back as CSV with an ``offset``
column.
"""

from __future__ import annotations

from . import fmt_bytes, print_json, print_table

__all__ = ["run", "register"]


def _run_csv(args) -> int:
    try:
        from ..placement import solve_minimalloc_csv
    except ImportError as e:
        raise RuntimeError(f"MiniMalloc CSV input needs stalloc.placement ({e})") from e
    r = solve_minimalloc_csv(args.trace, args.output, args.time_limit)
    lb, peak = int(r["lower_bound"]), int(r["plan_peak"])
    ratio = float(r.get("ratio", peak / lb if lb else 1.0))
    out = {"input": args.trace, "output": args.output, "kind": "minimalloc-csv", **r,
           "lower_bound": lb, "plan_peak": peak, "ratio": ratio, "seconds": float(r["seconds"])}
    if args.json:
        print_json(out)
        return 0
    print_table([
        ("lower bound", f"{fmt_bytes(lb)} ({lb:,} B)"),
        ("plan peak", f"{fmt_bytes(peak)} ({peak:,} B)"),
        ("ratio", f"{ratio:.4f}"),
        ("seconds", f"{out['seconds']:.2f}"),
        ("written", args.output),
    ], title=f"{args.trace} (MiniMalloc CSV)")
    return 0


def run(args) -> int:
    if args.time_limit < 0:
        raise ValueError("--time-limit must be >= 0")
    from ..importers.minimalloc_csv import is_minimalloc_csv

    if args.format is None and is_minimalloc_csv(args.trace):
        return _run_csv(args)
    from ..load import load_trace
    from ..plan import plan

    trace = load_trace(args.trace, args.format)
    p = plan(trace, time_limit=args.time_limit, use_step_markers=not args.no_markers,
             reuse_space=not args.no_reuse, tolerate_sizes=args.tolerate_sizes)
    p.save(args.output)
    i = p.info()
    if args.json:
        d = i.as_dict()
        d["fingerprint"] = f"{i.fingerprint:016x}"
        print_json({"trace": args.trace, "output": args.output, **d})
        return 0
    cls = ", ".join(f"{k} {v:,}" for k, v in i.classes.items())
    steps = f"{i.steps_found} " + ("(step markers)" if i.uses_step_markers else
                                   "(period of the alloc sizes)" if i.iteration_count else
                                   "(no steady state: static plan)")
    if i.sizes_tolerated:
        steps += ", sizes tolerated (each position at its largest)"
    print_table([
        ("lower bound", f"{fmt_bytes(i.lower_bound)} ({i.lower_bound:,} B, of the planned requests)"),
        ("trace lower bound", f"{fmt_bytes(i.trace_lower_bound)} ({i.trace_lower_bound:,} B, all requests)"),
        ("plan peak", f"{fmt_bytes(i.plan_peak)} ({i.plan_peak:,} B)"),
        ("ratio", f"{i.ratio:.4f}"),
        ("pool size", f"{fmt_bytes(i.pool_size)}"),
        ("classes", cls),
        ("steps found", steps),
        ("prologue / iteration", f"{i.prologue_count:,} / {i.iteration_count:,} allocs"),
        ("reusable space", f"{i.window_count} windows, {i.range_count} ranges"),
        ("seconds", f"{i.seconds:.3f}"),
        ("written", args.output),
    ], title=args.trace)
    return 0


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan a trace (also MiniMalloc CSV in, CSV with offsets out)")
    p.add_argument("trace", help="trace file (native, npz, torch profiler JSON) or MiniMalloc CSV")
    p.add_argument("-o", "--output", required=True, help="plan file to write (CSV for CSV input)")
    p.add_argument("--time-limit", type=float, default=2.0,
                   help="seconds for the placement search (default 2)")
    p.add_argument("--format", help="trace format instead of detecting it")
    p.add_argument("--no-markers", action="store_true",
                   help="ignore step markers: find the iteration from the alloc sizes")
    p.add_argument("--no-reuse", action="store_true", help="skip the reusable-space table")
    p.add_argument("--tolerate-sizes", action="store_true",
                   help="steps with as many allocs are one period whatever their sizes (dynamic "
                        "padding, a curriculum): each position planned at its largest size")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
