"""stalloc demo: the whole story on a CPU. Trains small real transformers (dense, with
recomputation, mixture-of-experts, and dense with dynamic padding, a run that changes every
step) while recording their allocations, replays each trace through stalloc (online, as a first
run; and from a plan saved from the first steps, as a later run) and compares with PyTorch's
allocator."""

from __future__ import annotations

import os
import sys
import time

from . import fmt_bytes, print_json

__all__ = ["DEMO_SIZE", "VARIANTS", "progress", "record_variant", "run", "register"]

VARIANTS = ("dense", "recompute", "moe", "dynpad")
# Big enough that 2 MiB granules (CUDA's, which the replay models) are not the whole story,
# small enough to train in seconds on a CPU.
DEMO_SIZE = dict(dim=256, seq=128)


def progress(label: str, done: int, total: int, width: int = 30) -> None:
    if not sys.stderr.isatty() and done != total:
        return  # a log file gets each bar once, finished
    filled = int(width * done / max(total, 1))
    end = "\n" if done == total else ""
    sys.stderr.write(f"\r{label:<28} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
    sys.stderr.flush()


def record_variant(variant: str, steps: int, path: str) -> None:
    import torch

    from .. import capture, demo_models

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    with capture.record(path):  # created inside, so the weights are in the trace
        model, opt = demo_models.build(variant, **DEMO_SIZE)
        progress(f"training {variant}", 0, steps)
        data = demo_models.batches(steps, seq=DEMO_SIZE["seq"],
                                   dynamic_padding=variant in demo_models.DYNAMIC_PADDING)
        for i, (x, y) in enumerate(data):
            demo_models.train_step(model, opt, x, y)  # optimizer.step() marks the step
            progress(f"training {variant}", i + 1, steps)


def run(args) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("stalloc demo: needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    from ..compare import ROW_KEYS, compare, plot
    from ..trace import Trace

    os.makedirs(args.out, exist_ok=True)
    results = {}
    t0 = time.perf_counter()
    for variant in args.variants:
        path = os.path.join(args.out, f"{variant}.stalloc")
        record_variant(variant, args.steps, path)
        progress(f"planning + replaying {variant}", 0, 1)
        rows, how = compare(Trace.load(path), timeline_points=2000 if not args.no_plot else 0)
        progress(f"planning + replaying {variant}", 1, 1)
        if not args.no_plot:
            plot(rows, os.path.join(args.out, f"{variant}.png"), title=f"stalloc demo: {variant}")
        results[variant] = (rows, how)
    elapsed = time.perf_counter() - t0
    if args.json:
        print_json({v: [{k: r[k] for k in ROW_KEYS + ("waste_vs_pytorch",)} for r in rows]
                    for v, (rows, _) in results.items()})
        return 0
    print(f"\nstalloc demo: {len(args.variants)} models trained {args.steps} steps each on the CPU, "
          f"traces recorded with torch.profiler, in {elapsed:.0f} s")
    head = (f"{'model':<10} {'allocator':<20} {'peak allocated':>15} {'peak reserved':>15} "
            f"{'waste':>11} {'fragmentation':>14} {'waste vs PyTorch':>17}")
    print(head + "\n" + "-" * len(head))
    for variant, (rows, _) in results.items():
        for r in rows:
            print(f"{variant:<10} {r['allocator']:<20} {fmt_bytes(r['peak_allocated']):>15} "
                  f"{fmt_bytes(r['peak_reserved']):>15} {fmt_bytes(r['waste']):>11} "
                  f"{r['fragmentation']:>14.2%} {r['waste_vs_pytorch']:>17.1%}")
    print("\n`stalloc` is a first run, online (record, plan in the background, switch or decline; "
          "no look-ahead; the recording phase counts).")
    print("`stalloc-saved-plan` is a later run that loads the plan saved from the first steps:")
    for variant, (_, how) in results.items():
        if "plan_events" in how:
            print(f"  {variant}: first {how['plan_events']:,} of {how['trace_events']:,} events "
                  f"({how['plan_step_markers']} step markers); the whole run was replayed"
                  + ("; those steps changed shape, so torch_backend would save no plan and a "
                     "later run is served online, as `stalloc`" if how.get("saved") is False else ""))
    print(f"Traces{'' if args.no_plot else ' and plots'} are in {os.path.abspath(args.out)}/ "
          f"(try: stalloc info {os.path.join(args.out, 'dense.stalloc')})")
    return 0


def register(sub) -> None:
    p = sub.add_parser("demo", help="the whole story on a small real model, on a CPU",
                       description=__doc__)
    p.add_argument("--steps", type=int, default=8, help="training steps per model (default 8)")
    p.add_argument("--out", default="stalloc-demo", help="directory for traces and plots")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--no-plot", action="store_true", help="skip the plots (no matplotlib needed)")
    p.add_argument("--json", action="store_true", help="machine-readable rows per model")
    p.set_defaults(func=run)
