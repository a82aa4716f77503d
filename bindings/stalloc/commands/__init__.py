"""One module per `stalloc` subcommand, each with ``register(subparsers)``; cli.py finds
them all. Shared output helpers live here."""

from __future__ import annotations

import json
import sys

__all__ = ["print_json", "fmt_bytes", "print_table"]


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
