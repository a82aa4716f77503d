"""stalloc record -o TRACE [--steps N] -- python train.py ARGS: capture a training run."""

from __future__ import annotations

import os
import subprocess
import sys

from . import print_json

__all__ = ["run", "register"]


def _python_argv(command: list[str]) -> list[str]:
    """The script part of a command: 'python train.py a' -> ['train.py', 'a']."""
    if not command:
        raise ValueError("nothing to record: give the command after --, e.g. -- python train.py")
    first = os.path.basename(command[0])
    if first.startswith("python") or os.path.realpath(command[0]) == os.path.realpath(sys.executable):
        rest = command[1:]
    elif first.endswith(".py"):
        rest = command
    else:
        raise ValueError(f"{command[0]}: stalloc record captures Python training scripts "
                         "(-- python train.py ... or -- python -m module ...)")
    return rest


def run(args) -> int:
    cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    script = _python_argv(cmd)
    from ..capture import check_output

    check_output(args.output)  # before the run: a recording that cannot be written is lost
    # A child interpreter, so the script runs as __main__ exactly as it would without us.
    child = [sys.executable, "-m", "stalloc.capture", "-o", args.output]
    if args.steps:
        child += ["--steps", str(args.steps)]
    rc = subprocess.call(child + ["--"] + script)
    if rc != 0:
        return rc
    if args.json:
        from ..trace import Trace

        print_json({"trace": args.output, **Trace.load(args.output).summary().as_dict()})
    return 0


def register(sub) -> None:
    p = sub.add_parser("record", help="capture a PyTorch training run's allocations to a trace",
                       description="Runs a Python training script under the PyTorch profiler and "
                                   "writes its allocations, with a step marker per optimizer step.")
    p.add_argument("-o", "--output", required=True, help="trace file to write")
    p.add_argument("--steps", type=int, help="stop recording after this many optimizer steps")
    p.add_argument("--json", action="store_true", help="print the trace summary as JSON")
    # dest "argv": "command" is the subcommand's name, which the CLI's error lines start with
    p.add_argument("argv", nargs="...", metavar="command", help="-- python train.py ARGS")
    p.set_defaults(func=run)
