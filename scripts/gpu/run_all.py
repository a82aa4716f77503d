#!/usr/bin/env python3
"""Runs every GPU check of the kit (run_all.sh installs stalloc first) and writes
results.json and results.md to --out. With a GPU each check runs in full, in its own process.
Without one each check runs what a CPU can (the library loads and says why a device is needed,
the adapter's hooks resolve, a recorded snapshot imports and simulates) and is reported as
skipped for want of a device; the exit status is then 0 if those parts passed."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def gpu_present() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device"
    return True, torch.cuda.get_device_name()


def run_script(name: str, args: list[str], out: Path, timeout: int = 3600) -> dict:
    json_path = out / f"{name}.json"
    cmd = [sys.executable, str(HERE / args[0]), *args[1:]]
    if "-o" not in args:  # record_snapshot.py writes its snapshot with -o, its figures beside it
        cmd += ["--out", str(json_path)]
    else:
        json_path = Path(args[args.index("-o") + 1] + ".stats.json")
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    (out / f"{name}.log").write_text(r.stdout + r.stderr)
    result = {"status": "passed" if r.returncode == 0 else "failed", "exit": r.returncode,
              "seconds": round(time.time() - t0, 1), "log": f"{name}.log"}
    if json_path.is_file():
        try:
            result["figures"] = json.loads(json_path.read_text())
        except (ValueError, UnicodeDecodeError) as e:  # reported, not fatal to the other checks
            result["note"] = f"{json_path.name} is not JSON: {e}"
    return result


# ---- what a CPU can check of each ----

def cpu_cuda_backend() -> str:
    import stalloc

    try:
        stalloc.Allocator(backend="cuda").close()
    except stalloc.NoDeviceError as e:
        return f"library loads; cuda backend says: {e}"
    raise AssertionError("a cuda allocator was made but torch sees no GPU")


def cpu_torch_backend() -> str:
    from stalloc.integrations import torch_backend

    reason = torch_backend.cuda_unavailable_reason()
    assert reason, "torch_backend sees a GPU where torch does not"
    hooks = sorted(torch_backend.hook_addresses())
    path, malloc = torch_backend.plug_library()
    assert all(torch_backend.hook_addresses().values())
    return f"enable() would say: {reason[:80]}...; hooks {', '.join(hooks)}; malloc {malloc}"


def cpu_two_streams() -> str:
    import stalloc
    from stalloc._lib import lib

    a = stalloc.Allocator(backend="host")
    p = a.alloc(4096)
    a.record_stream(p, 0x2000)
    a.free(p)
    assert a.stats().deferred_frees == 0  # host memory is synchronous
    a.close()
    assert lib.stalloc_torch_record_stream
    return "record_stream entry points present (stream ordering itself needs a device or the mock driver: ctest)"


def cpu_torch_sim() -> str:
    import stalloc
    from stalloc.baseline import simulate

    snap = REPO / "tests" / "data" / "importers" / "torch_snapshot.pickle"
    trace = stalloc.load_trace(snap)
    sim = simulate(trace, "pytorch")
    return (f"a recorded snapshot ({snap.name}, {trace.summary().events} events) imports and "
            f"simulates: peak reserved {sim['peak_reserved']:,} B")


def load_script(name: str):
    """The kit's script `name`.py run as a module (its definitions, not its main)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_vmm_calls() -> str:
    load_script("bench_vmm_calls")
    return "bench_vmm_calls.py loads (it needs a CUDA driver to time anything)"


def cpu_snapshot() -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_snapshot", HERE / "record_snapshot.py")
    importlib.util.module_from_spec(spec)
    return "record_snapshot.py loads"


def cpu_transformers() -> str:
    import importlib.util

    load_script("check_transformers")
    have = importlib.util.find_spec("transformers") is not None
    return ("check_transformers.py loads; transformers is installed" if have else
            "check_transformers.py loads; transformers is not installed here (the GPU run needs it)")


def cpu_torch_errors() -> str:
    module = load_script("check_torch_errors")
    assert all(callable(getattr(module, f"case_{c}")) for c in module.CASES)
    return f"check_torch_errors.py loads; cases {', '.join(module.CASES)} need a GPU"


CHECKS = [
    # name, what it covers, GPU command (script, args), CPU part
    ("cuda_backend", "CUDA backend: data, streams, plan replay, latency",
     ["check_cuda_backend.py"], cpu_cuda_backend),
    ("torch_backend", "stalloc vs PyTorch default and expandable_segments: losses, peaks, step time",
     ["check_torch_backend.py", "--steps", "50"], cpu_torch_backend),
    ("transformers", "Llama and Mixtral (eager experts), plain, dynamic padding, eval pass: "
                     "stalloc vs PyTorch default and expandable_segments",
     ["check_transformers.py", "--steps", "50"], cpu_transformers),
    ("two_streams", "record_stream: a side stream reads what the main stream freed",
     ["check_two_streams.py"], cpu_two_streams),
    ("torch_errors", "out of memory, CUDA graph capture, PyTorch's memory functions, data under churn",
     ["check_torch_errors.py"], cpu_torch_errors),
    ("torch_sim", "the PyTorch simulator vs torch.cuda.max_memory_reserved()",
     ["check_torch_sim.py"], cpu_torch_sim),
    ("snapshot", "a real PyTorch memory snapshot, saved as test data",
     ["record_snapshot.py", "-o", "snapshot.pickle"], cpu_snapshot),
    ("vmm_calls", "what cuMemSetAccess and cuMemUnmap cost per call and per granule",
     ["bench_vmm_calls.py"], cpu_vmm_calls),
]


def markdown(results: dict) -> str:
    lines = [f"# stalloc GPU kit: {results['device']}", "",
             f"torch {results['torch']}, stalloc {results['stalloc']}, {results['when']}", "",
             "| check | what | status | seconds | note |", "|---|---|---|---:|---|"]
    for name, r in results["checks"].items():
        lines.append(f"| {name} | {r['what']} | {r['status']} | {r.get('seconds', '')} | "
                     f"{r.get('note', '').replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-results"))
    ap.add_argument("--only", nargs="*", help="run only these checks")
    ap.add_argument("--steps", type=int, default=50, help="training steps per run (torch_backend, transformers)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    import stalloc

    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = "absent"
    has_gpu, device = gpu_present()
    results = {"device": device if has_gpu else f"no GPU ({device})", "torch": torch_version,
               "stalloc": stalloc.__version__, "when": time.strftime("%Y-%m-%d %H:%M"),
               "gpu": has_gpu, "checks": {}}
    for name, what, command, cpu_part in CHECKS:
        if args.only and name not in args.only:
            continue
        if has_gpu:
            if name == "snapshot":
                command = command[:2] + [str(args.out / "snapshot.pickle")]
            if "--steps" in command:
                command = [*command[:command.index("--steps") + 1], str(args.steps)]
            if name in ("transformers", "torch_backend"):  # the GPU runs' traces, to study on a CPU
                command = [*command, "--record", str(args.out / "traces")]
            r = run_script(name, command, args.out)
        else:
            t0 = time.time()
            try:
                note = cpu_part()
                r = {"status": "skipped: no device", "note": f"CPU part passed: {note}"}
            except Exception as e:  # noqa: BLE001 - reported, and fails the run
                r = {"status": "failed", "note": f"CPU part failed: {type(e).__name__}: {e}"}
            r["seconds"] = round(time.time() - t0, 1)
        r["what"] = what
        results["checks"][name] = r
        print(f"{name:<14} {r['status']:<20} {r.get('note', '')[:100]}", flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    (args.out / "results.md").write_text(markdown(results))
    skipped = [n for n, r in results["checks"].items() if r["status"].startswith("skipped")]
    if skipped:
        print(f"skipped for want of a device ({device}): {', '.join(skipped)}")
    print(f"results: {args.out / 'results.json'}, {args.out / 'results.md'}")
    return 1 if any(r["status"] == "failed" for r in results["checks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
