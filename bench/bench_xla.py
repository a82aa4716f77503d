"""XLA's memory for jitted training steps beside stalloc's plan of the same buffers.

    python bench/bench_xla.py                 # mlp, transformer, transformer-remat
    python bench/bench_xla.py --models mlp --json

For each model (tools/xla_trace.py) the training step is compiled with XLA's dump flags (in
a child process; CPU unless JAX_PLATFORMS says otherwise), its buffer assignment and live
ranges become two stalloc traces (stalloc.importers.xla): the temporaries alone, which is what
XLA's heap simulator packs into temp_size_in_bytes, and every buffer of the program
(parameters, temporaries, outputs). Each trace is planned by stalloc.plan as one static
timeline (detect_period=False, classify=False: a compiled program has no iterations to find)
at XLA's CPU alignment of 64 bytes. Columns, in bytes:

  xla temp      memory_analysis().temp_size_in_bytes
  xla peak      memory_analysis().peak_memory_in_bytes ("-" where this jaxlib lacks it)
  temp LB       lower bound of the temporaries (max over the schedule of live bytes)
  stalloc temp  stalloc's plan peak for the temporaries
  all LB        lower bound of every buffer (arguments + temporaries + outputs)
  stalloc all   stalloc's plan peak for every buffer
  xla all       argument + output + temp sizes, XLA's separate allocations added up
  plan s        median planning time of the temporaries over --repeat runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import xla_trace  # noqa: E402

from stalloc.importers import xla  # noqa: E402

ALIGNMENT = 64  # XLA's CPU buffer alignment


def plan_peak(trace, repeat: int):
    """(plan peak, median seconds), or (None, reason) when the planner is not in this build."""
    try:
        from stalloc import plan
    except ImportError as e:
        return None, f"planner missing: {e}"
    times, peak = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = plan(trace, detect_period=False, classify=False, alignment=ALIGNMENT)
        times.append(time.perf_counter() - t0)
        peak = p.info().plan_peak
    return peak, statistics.median(times)


def measure(model: str, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="stalloc-xla-") as d:
        figures = xla_trace.dump(model, d)
        prefix = xla.find_module(d, "jit_step")
        temp, info = xla.import_dump(prefix, only="temp", with_info=True)
        full = xla.import_dump(prefix)
    temp_peak, temp_s = plan_peak(temp, repeat)
    full_peak, _ = plan_peak(full, 1)
    return {
        "model": model,
        "xla_temp": figures.get("temp_size_in_bytes"),
        "xla_peak": figures.get("peak_memory_in_bytes"),
        "xla_all": sum(figures.get(k, 0) for k in
                       ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")),
        "xla_dump_temp_peak": info["xla_temp_peak"],
        "temp_requests": len(temp.requests),
        "all_requests": len(full.requests),
        "temp_lower_bound": temp.lower_bound,
        "stalloc_temp": temp_peak,
        "all_lower_bound": full.lower_bound,
        "stalloc_all": full_peak,
        "plan_seconds": temp_s,
        "shared_in_place": info["shared_in_place"],
    }


def _mib(v) -> str:
    return "-" if not isinstance(v, int) else f"{v / 2**20:,.2f} MiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "transformer", "transformer-remat"],
                    choices=sorted(xla_trace.MODELS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [measure(m, args.repeat) for m in args.models]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cols = [("model", "model"), ("xla temp", "xla_temp"), ("xla peak", "xla_peak"),
            ("temp LB", "temp_lower_bound"), ("stalloc temp", "stalloc_temp"),
            ("all LB", "all_lower_bound"), ("stalloc all", "stalloc_all"), ("xla all", "xla_all")]
    print("| " + " | ".join(c for c, _ in cols) + " | temp requests | plan s |")
    print("|" + "---|" * (len(cols) + 2))
    for r in rows:
        cells = [r["model"]] + [_mib(r[k]) for _, k in cols[1:]]
        s = r["plan_seconds"]
        print("| " + " | ".join(cells) + f" | {r['temp_requests']} | "
              + (f"{s:.4f}" if isinstance(s, float) else str(s)) + " |")
    for r in rows:
        if isinstance(r["stalloc_temp"], int) and r["temp_lower_bound"]:
            print(f"{r['model']}: stalloc temp / temp LB = {r['stalloc_temp'] / r['temp_lower_bound']:.4f}, "
                  f"xla temp / temp LB = {r['xla_temp'] / r['temp_lower_bound']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
