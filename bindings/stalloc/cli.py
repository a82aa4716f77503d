"""The `stalloc` command line. Each subcommand is a module in stalloc/commands/ with a
``register(subparsers)`` function; every one takes --json for machine-readable output.
Errors print one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__, commands

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stalloc",
        description="Plan GPU memory for deep-learning training from recorded allocation traces.",
    )
    p.add_argument("--version", action="version", version=f"stalloc {__version__}")
    p.add_argument("--cmakedir", action="store_true",
                   help="print the directory of stallocConfig.cmake and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{mod.name}").register(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmakedir:
        from . import cmake_dir

        try:
            print(cmake_dir())
        except ImportError as e:
            print(f"stalloc: {e}", file=sys.stderr)
            return 2
        return 0
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"stalloc {args.command}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a StallocError not covered above
        from .errors import StallocError

        if isinstance(e, StallocError):
            print(f"stalloc {args.command}: {e}", file=sys.stderr)
            return 2
        raise
