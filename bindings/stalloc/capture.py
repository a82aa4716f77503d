"""Capturing a PyTorch training run's allocations on any machine, through the profiler.

``torch.profiler`` with ``profile_memory=True`` sees every call into PyTorch's allocator; each
optimizer step (a global optimizer hook) or each ``recorder.step()`` becomes a step marker.
The profile is converted to a native trace when the recording ends.

    with stalloc.capture.record("run.stalloc", steps=6) as rec:
        for batch in data:
            train_step(batch)          # optimizer.step() marks the steps

On a GPU with ``stalloc.integrations.torch_backend`` enabled, libstalloc records directly
instead (exact streams, no profiler overhead).

``python -m stalloc.capture -o TRACE [--steps N] -- train.py ARGS`` runs a script under a
recorder; ``stalloc record`` is the same from the command line.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import tempfile
import warnings

__all__ = ["Recorder", "record", "run_script", "main"]


class Recorder:
    """Records PyTorch allocations to a trace file; see the module docstring."""

    def __init__(self, path, steps: int | None = None, hook_optimizer: bool = True,
                 device=None):
        import torch  # noqa: F401  (fail early with ImportError when torch is missing)

        self.path = os.fspath(path)
        self.max_steps = steps
        self.hook_optimizer = hook_optimizer
        self.device = device
        self.steps = 0
        self.trace = None
        self._prof = None
        self._hook = None

    def start(self) -> "Recorder":
        from torch.optim.optimizer import register_optimizer_step_post_hook
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        import torch

        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        # One active window long enough for any run: ProfilerStep#N markers need a schedule.
        with warnings.catch_warnings():  # "won't be using warmup": intended, memory is exact
            warnings.simplefilter("ignore")
            self._prof = profile(activities=activities, profile_memory=True,
                                 schedule=schedule(wait=0, warmup=0, active=1 << 30, repeat=1))
        self._prof.start()
        if self.hook_optimizer:
            self._hook = register_optimizer_step_post_hook(lambda opt, args, kwargs: self.step())
        return self

    def step(self) -> None:
        """Marks the end of a training step (the optimizer hook calls this for you)."""
        if self._prof is None:
            return
        self.steps += 1
        self._prof.step()
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.stop()

    def stop(self):
        """Ends the recording and writes the trace; returns it (a stalloc.Trace)."""
        if self._prof is None:
            return self.trace
        prof, self._prof = self._prof, None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        prof.stop()
        from .importers.torch_profiler import load_profiler_json
        from .trace import Trace

        with tempfile.TemporaryDirectory() as d:
            json_path = os.path.join(d, "profile.json")
            prof.export_chrome_trace(json_path)
            events = load_profiler_json(json_path, device=self.device)
        self.trace = Trace.from_events(events)
        self.trace.save(self.path)
        return self.trace

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def record(path, steps: int | None = None, hook_optimizer: bool = True, device=None) -> Recorder:
    """A context manager recording PyTorch allocations to ``path`` (see the module docstring)."""
    return Recorder(path, steps=steps, hook_optimizer=hook_optimizer, device=device)


def check_output(output) -> None:
    """Raises OSError unless a trace file can be written at ``output`` (its folder exists and
    is writable), so that a run is not recorded only to be lost at the end."""
    path = os.fspath(output)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{path}: no such directory {folder}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{path}: cannot write in {folder}")


def run_script(output, argv: list[str], steps: int | None = None) -> "Recorder":
    """Runs ``argv`` (``script.py args`` or ``-m module args``) as __main__ under a recorder."""
    if not argv:
        raise ValueError("nothing to run: give a script (train.py ...) or -m module")
    check_output(output)
    rec = Recorder(output, steps=steps)
    saved_argv = sys.argv
    rec.start()
    try:
        if argv[0] == "-m":
            if len(argv) < 2:
                raise ValueError("-m needs a module name")
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            if not os.path.isfile(argv[0]):
                raise FileNotFoundError(f"{argv[0]}: no such script")
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv = saved_argv
        rec.stop()
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stalloc.capture",
                                 description="Record a PyTorch script's allocations to a trace.")
    ap.add_argument("-o", "--output", required=True, help="trace file to write")
    ap.add_argument("--steps", type=int, help="stop recording after this many optimizer steps")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- script.py args | -- -m module args")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        rec = run_script(args.output, cmd, steps=args.steps)
    except (ValueError, OSError) as e:
        print(f"stalloc record: {e}", file=sys.stderr)
        return 2
    s = rec.trace.summary()
    print(f"stalloc record: {args.output}: {s.events:,} events, {s.requests:,} requests, "
          f"{s.steps} steps, lower bound {s.lower_bound:,} B", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
