"""stalloc replay TRACE [--plan PLAN]: drive the runtime with a trace and report its memory."""

from __future__ import annotations

from . import add_scale_argument, fmt_bytes, load_scaled, print_json, print_table

__all__ = ["run", "register"]


def run(args) -> int:
    from ..replay import parse_online_params, replay

    if args.online and args.plan:
        raise ValueError("--online makes its own plans: give no --plan")
    if args.online_param and not args.online:
        raise ValueError("--online-param needs --online")
    params = parse_online_params(args.online_param)  # before the trace loads: a typo fails at once
    trace = load_scaled(args)
    online = {"record_steps": args.record_steps, **params} if args.online else False
    r = replay(trace, args.plan, backend=args.backend, check=args.check,
               use_steps=not args.no_steps, online=online, device_lag=args.device_lag)
    if args.json:
        print_json({"trace": args.trace, "scale": args.scale, "plan": args.plan, "backend": args.backend,
                    "online": bool(args.online), **r})
        return 0
    lb = r["lower_bound"]
    print_table([
        ("peak allocated", f"{fmt_bytes(r['peak_allocated'])} ({r['peak_allocated']:,} B)"),
        ("peak reserved", f"{fmt_bytes(r['peak_reserved'])} ({r['peak_reserved']:,} B)"),
        ("fragmentation ratio", f"{r['fragmentation']:.4f}"),
        ("reserved / lower bound", f"{r['peak_reserved'] / lb:.4f}" if lb else "-"),
        ("plan pool", fmt_bytes(r["pool_size"])),
        ("hits", f"{r['hits']:,}"),
        ("misses", f"{r['misses']:,}"),
        ("fallbacks", f"{r['fallbacks']:,}"),
        ("resyncs", f"{r['resyncs']:,}"),
        ("reusable space", f"{r['dynamic']:,}"),
        ("slab (tiny)", f"{r['tiny']:,}"),
        ("requests", f"{r['requests']:,}"),
        ("checks", f"overlap after {r['checked_events']:,} allocs" + (", data patterns" if args.check else "")),
    ] + ([("layout hints", f"{r['hinted']:,} requests placed by them; {r['hint_layouts_kept']:,} of "
                           f"{r['hint_layouts']:,} layouts kept, the longest took "
                           f"{r['hint_seconds_max'] * 1e3:.1f} ms")] if args.online else [])
      + ([("device lag", f"{args.device_lag:,} events; the host waited for the device "
                         f"{r['device_waits']:,} times")] if args.device_lag else []), title=f"{args.trace}" + (" online (record, plan, switch, re-plan)" if args.online else
                                 f" with {args.plan}" if args.plan else " (no plan: fallback pool)"))
    if args.online:
        print()
        print_table([(f"plan {i + 1}", _plan_line(p)) for i, p in enumerate(r["plans"])] or
                    [("plans", "none: the trace has too few step markers")],
                    title="plans (step boundaries counted from the start)")
    return 0


def _plan_line(p: dict) -> str:
    if p["status"]:
        return f"began at step {p['started_step']}, failed (status {p['status']})"
    used = (f"switched at step {p['switched_step']}" if p["switched_step"] != 2**64 - 1 else
            "declined: the growable pool already serves the run with less memory" if p["declined"]
            else "not used")
    return (f"began at step {p['started_step']} from {p['recorded_steps']} step(s), planned in "
            f"{p['plan_seconds'] * 1e3:.1f} ms, {used}; pool {fmt_bytes(p['pool_size'])}")


def register(sub) -> None:
    p = sub.add_parser("replay", help="drive the runtime with a trace, from a plan",
                       description="Replays a trace's allocs and frees through a fresh allocator "
                                   "(from a plan if given), checking that no two live blocks "
                                   "overlap, and reports peak allocated/reserved and plan hits.")
    p.add_argument("trace", help="trace file (native, npz or torch profiler JSON)")
    p.add_argument("--plan", help="plan file from `stalloc plan`")
    p.add_argument("--backend", choices=("virtual", "host"), default="virtual",
                   help="virtual (default: addresses only) or host (real memory)")
    p.add_argument("--check", action="store_true",
                   help="host backend: write a pattern into every block and verify it at free")
    p.add_argument("--online", action="store_true",
                   help="drive the online lifecycle as a real run does (record the first steps, "
                        "plan in the background, switch at a step boundary, re-plan on drift); "
                        "--json adds `steps` and `plans`")
    p.add_argument("--record-steps", type=int, default=3,
                   help="--online: steps recorded before the first plan (default 3, as torch_backend)")
    p.add_argument("--online-param", action="append", default=[], metavar="KEY=VALUE",
                   help="--online: an online parameter (docs/online.md), e.g. pool_at_ends_after=4; "
                        "repeatable")
    p.add_argument("--no-steps", action="store_true", help="do not pass step markers to the runtime")
    p.add_argument("--device-lag", type=int, default=0, metavar="EVENTS",
                   help="virtual backend: model a GPU running EVENTS allocs and frees behind the host "
                        "(a free's queued work finishes that much later); default 0, synchronous")
    p.add_argument("--format", help="trace format instead of detecting it")
    add_scale_argument(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
