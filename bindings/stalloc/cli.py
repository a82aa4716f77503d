"""The `stalloc` command line. Each subcommand is a module in stalloc/commands/ with a
``register(subparsers)`` function; every one takes --json for machine-readable output.
Errors print one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import zipfile

from . import __version__, commands

__all__ = ["INPUT_ERRORS", "build_parser", "describe", "main"]


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
    import warnings

    # A warning is one line too, naming the command.
    warnings.showwarning = lambda message, category, *rest, **kw: print(
        f"stalloc {args.command}: warning: {message}", file=sys.stderr)
    try:
        return args.func(args)
    except Exception as e:
        # Every failure is one line and exit 2: bad input (files that are not what they claim,
        # numbers out of range, truncated archives) and library errors alike. Anything else is
        # a bug of ours: still one line, with the way to see the traceback.
        if os.environ.get("STALLOC_DEBUG"):
            raise
        print(f"stalloc {args.command}: {describe(e)}", file=sys.stderr)
        return 2


# What input parsing raises for a bad file or a number out of range, besides StallocError.
INPUT_ERRORS = (OSError, ValueError, RuntimeError, ArithmeticError, EOFError, LookupError,
                zipfile.BadZipFile, MemoryError)


def describe(e: BaseException) -> str:
    """One line for an exception the command line reports."""
    from .errors import StallocError

    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, (StallocError,) + INPUT_ERRORS):
        if isinstance(e, (ArithmeticError, EOFError, LookupError, zipfile.BadZipFile)):
            return f"{text} ({type(e).__name__}: the input is damaged or out of range)"
        return text
    return f"internal error ({type(e).__name__}): {text} (STALLOC_DEBUG=1 shows the traceback)"
