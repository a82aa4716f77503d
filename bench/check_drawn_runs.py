"""Data and overlap checks of the online lifecycle on long runs drawn at random from recordings.

From each recorded run, a run of N steps drawn at random from its steps (bench_online.drawn_steps:
evaluation passes two in a row, a ramp that goes back, padding in no fixed rhythm: runs no rule
was tuned on), replayed online on host memory with every block filled with a pattern and checked
at its free, and every event checked for two live blocks sharing a byte (stalloc.replay's
checks). One line per run, then a summary; the exit status is 1 if any run failed a check.

    python bench/check_drawn_runs.py --traces DIR ... [--draw-steps 20] [--seeds 1 2] [--scale 4]

--scale multiplies every size. Host memory is used for real: 64 turns a `--small` recording into
a run of a few hundred MiB. Both scales are worth checking, since plans are switched to more
often at small sizes and the growable pool serves more at large ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import stalloc
from stalloc.replay import replay

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_online import drawn_steps  # noqa: E402  (this folder, as bench_compare.py imports its own)


def check(path: Path, steps: int, seed: int, scale: int) -> dict:
    """One drawn run replayed with every check; `error` is the failure's message, or None."""
    t = drawn_steps(stalloc.load_trace(path), steps, seed).scaled(scale)
    try:
        r = replay(t, backend="host", check=True, online=True)
    except Exception as e:  # a failed check raises; so does any other error, which is a failure too
        return dict(error=f"{type(e).__name__}: {e}")
    if r["checked_events"] != r["requests"]:
        return dict(error=f"only {r['checked_events']} of {r['requests']} requests were checked")
    return dict(error=None, requests=r["requests"], hits=r["hits"], peak_reserved=r["peak_reserved"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", default=[str(REPO / "tests" / "data" / "traces" / "changing")],
                    metavar="DIR", help="folders of recordings (default: tests/data/traces/changing)")
    ap.add_argument("--draw-steps", type=int, default=20, metavar="N",
                    help="steps drawn at random from each run's steps from its third marker on (default 20)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="one drawn run per seed (default 1)")
    ap.add_argument("--scale", type=int, default=4, help="multiply every size by this (default 4)")
    args = ap.parse_args(argv)
    if args.draw_steps < 1:
        ap.error(f"--draw-steps must be 1 or more, not {args.draw_steps}")
    if args.scale < 1:
        ap.error(f"--scale must be 1 or more, not {args.scale}")
    paths = [p for d in args.traces for p in sorted(Path(d).glob("*.npz")) + sorted(Path(d).glob("*.stalloc"))]
    if not paths:
        ap.error(f"no traces (*.npz, *.stalloc) in {' '.join(args.traces)}")
    head = f"{'trace':<28} {'seed':>5} {'requests':>9} {'plan hits':>9} {'peak reserved MiB':>17}  result"
    print(head + "\n" + "-" * len(head))
    failed = runs = 0
    for p in paths:
        for seed in args.seeds:
            r = check(p, args.draw_steps, seed, args.scale)
            runs += 1
            if r["error"]:
                failed += 1
                print(f"{p.stem:<28} {seed:>5} {'':>9} {'':>9} {'':>17}  FAILED: {r['error']}")
            else:
                print(f"{p.stem:<28} {seed:>5} {r['requests']:>9} {r['hits']:>9} "
                      f"{r['peak_reserved'] / 2**20:>17.2f}  ok")
            sys.stdout.flush()
    print(f"\n{runs} drawn runs of {args.draw_steps} steps at {args.scale}x: "
          f"{runs - failed} passed the data and overlap checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
