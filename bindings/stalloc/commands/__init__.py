"""One module per `stalloc` subcommand, each with ``register(subparsers)``; cli.py finds
them all. Shared output helpers live here."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["print_json", "fmt_bytes", "print_table", "add_scale_argument", "load_scaled"]


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def fmt_bytes(n: float) -> str:
    """1536 -> '1.50 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def print_table(rows: list[tuple[str, str]], title: str | None = None) -> None:
    """Two aligned columns, as `stalloc info` prints."""
    if title:
        print(title)
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def _scale_factor(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_scale_argument(p: argparse.ArgumentParser) -> None:
    """--scale N, for the commands that replay a trace."""
    p.add_argument("--scale", type=_scale_factor, default=1, metavar="N",
                   help="multiply every request's size by N first, as the benchmarks do to turn a "
                        "small CPU recording into a GPU-sized run (default 1)")


def load_scaled(args):
    """The trace named on the command line, at its --scale."""
    from ..load import load_trace

    trace = load_trace(args.trace, args.format)
    return trace.scaled(args.scale) if args.scale != 1 else trace
