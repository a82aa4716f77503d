"""stalloc show PLAN -o plan.png: the plan as address against time.

The plan file holds every entry's lifetime, so the plan alone draws the prologue followed by
``--iterations`` copies of the steady-state iteration; with ``--trace`` the real requests of
that trace are drawn instead (after checking the plan was made for it).
"""

from __future__ import annotations

from . import print_json

__all__ = ["run", "register"]


def run(args) -> int:
    from ..plan import Plan, show

    p = Plan.load(args.plan)
    if args.trace:
        from ..load import load_trace

        trace = load_trace(args.trace, args.format)
        p.check(trace)
    else:
        trace = None
    show(p, args.output, trace=trace, iterations=args.iterations, title=args.title)
    if args.json:
        print_json({"plan": args.plan, "output": args.output})
    else:
        print(f"wrote {args.output}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("show", help="draw a plan as address against time (needs matplotlib)")
    p.add_argument("plan", help="plan file")
    p.add_argument("-o", "--output", required=True, help="image to write (.png, .svg, .pdf)")
    p.add_argument("--trace", help="the trace the plan was made from (real lifetimes)")
    p.add_argument("--format", help="trace format instead of detecting it")
    p.add_argument("--iterations", type=int, default=3,
                   help="iterations to draw without --trace (default 3)")
    p.add_argument("--title", help="figure title")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
