"""stalloc import SRC -o TRACE: convert another tool's allocation log to a native trace.

Formats (docs/formats.md): RMM logging CSV, PyTorch memory snapshot, PyTorch profiler JSON,
the reference STAlloc tracer's log, MiniMalloc CSV, npz; detected from the content unless
--format names one. (The module is import_ because `import` is a Python keyword.)"""

from __future__ import annotations

from . import fmt_bytes, print_json, print_table

__all__ = ["run", "register"]


def run(args) -> int:
    from ..load import FORMATS, detect_format, load_trace

    fmt = args.format or detect_format(args.src)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(sorted(FORMATS))})")
    trace = load_trace(args.src, fmt)
    trace.save(args.output)
    s = trace.summary()
    if args.json:
        print_json({"source": args.src, "format": fmt, "output": args.output, **s.as_dict()})
        return 0
    print_table([
        ("format", fmt),
        ("written to", args.output),
        ("events", f"{s.events:,}"),
        ("requests", f"{s.requests:,}"),
        ("never freed", f"{s.unfreed_requests:,}"),
        ("frees of earlier allocs", f"{s.unmatched_frees:,}"),
        ("failed allocs", f"{s.failed_allocs:,}"),
        ("steps", f"{s.steps:,}"),
        ("streams", f"{s.streams:,}"),
        ("total requested", fmt_bytes(s.total_bytes)),
        ("lower bound", f"{fmt_bytes(s.lower_bound)} ({s.lower_bound:,} B)"),
    ], title=args.src)
    return 0


def register(sub) -> None:
    p = sub.add_parser("import", help="convert an RMM log, PyTorch snapshot, profiler JSON, "
                       "STAlloc log or MiniMalloc CSV to a native trace")
    p.add_argument("src", help="the file to convert")
    p.add_argument("-o", "--output", required=True, help="native trace file to write")
    p.add_argument("--format", help="source format instead of detecting it: native, npz, "
                   "torch-profiler, torch-snapshot, rmm, stalloc-log, minimalloc")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
