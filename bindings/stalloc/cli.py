"""The `stalloc` command line. Each subcommand is a module in stalloc/commands/ with a
``register(subparsers)`` function; every one takes --json for machine-readable output.
Errors print one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import csv
import importlib
import pickle
import pkgutil
import struct
import sys
import warnings
import zipfile
import zlib

from . import __version__, commands

__all__ = ["build_parser", "main", "INPUT_ERRORS"]

# What a command raises on bad input or a failed call: each becomes one line on stderr and exit
# status 2 (StallocError is among them: each subclasses one of these or is caught by name).
INPUT_ERRORS = (OSError, ValueError, RuntimeError, ArithmeticError, LookupError, EOFError,
                TypeError, zipfile.BadZipFile, pickle.UnpicklingError, struct.error, zlib.error,
                csv.Error)


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
    from .errors import StallocError

    def one_line_warning(message, category, *rest):
        print(f"stalloc {args.command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = one_line_warning
            return args.func(args)
    except (StallocError, *INPUT_ERRORS) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, KeyError) and e.args:
            message = str(e.args[0])
        print(f"stalloc {args.command}: {message}", file=sys.stderr)
        return 2
