"""GPU check of stalloc as PyTorch's allocator (needs a CUDA build of PyTorch and a GPU).

For a GPT-style model and an MoE model, trains N steps with PyTorch's default allocator and
with stalloc (a first run that records, plans and switches in-process, and a second run served
from the saved plan from its first allocation), each in its own process (the allocator must be
chosen before CUDA starts). Checks that losses match step by step (same seed, deterministic
settings) and reports peak reserved against peak allocated and the median step time.

    python scripts/gpu/check_torch_backend.py [--steps 50] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child(variant: str, mode: str, steps: int, plan_dir: str) -> dict:
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    import torch

    from stalloc import demo_models

    if mode != "pytorch":
        from stalloc.integrations import torch_backend

        torch_backend.enable(plan_path=plan_dir)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    size = dict(dim=512, layers=8, heads=8, seq=256, vocab=8192)
    model, opt = demo_models.build(variant, device="cuda", **size)
    losses, times = [], []
    for x, y in demo_models.batches(steps, batch=16, seq=size["seq"], vocab=size["vocab"], device="cuda"):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses.append(demo_models.train_step(model, opt, x, y))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if mode == "pytorch":
        peak_alloc, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
        extra = {}
    else:
        st = torch_backend.memory_stats()
        peak_alloc, peak_res = st["allocated_bytes.all.peak"], st["reserved_bytes.all.peak"]
        extra = {"state": torch_backend.state(), "hits": st["stalloc.plan_hits"],
                 "misses": st["stalloc.plan_misses"], "fallback": st["stalloc.fallback_allocs"]}
    return {"variant": variant, "mode": mode, "losses": losses,
            "median_step_s": statistics.median(times[5:]), "peak_allocated": peak_alloc,
            "peak_reserved": peak_res, "gpu": torch.cuda.get_device_name(), **extra}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "MODE", "PLAN_DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.steps, args.child[2])))
        return 0
    results, ok = [], True
    for variant in ("dense", "moe"):
        plan_dir = tempfile.mkdtemp(prefix=f"stalloc-{variant}-")
        runs = {}
        for mode in ("pytorch", "stalloc-record", "stalloc-saved"):
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child",
                                  variant, mode, plan_dir], capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                return 1
            runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(runs[mode])
        base = runs["pytorch"]
        print(f"\n{variant} on {base['gpu']}, {args.steps} steps")
        print(f"{'allocator':<16} {'peak alloc MiB':>15} {'peak reserved MiB':>18} {'reserved/alloc':>15} "
              f"{'step ms':>8} {'vs default':>10} {'losses equal':>13}")
        for mode, r in runs.items():
            same = r["losses"] == base["losses"]
            ratio = r["peak_reserved"] / r["peak_allocated"]
            speed = r["median_step_s"] / base["median_step_s"]
            print(f"{mode:<16} {r['peak_allocated'] / 2**20:>15.1f} {r['peak_reserved'] / 2**20:>18.1f} "
                  f"{ratio:>15.4f} {r['median_step_s'] * 1e3:>8.2f} {speed:>10.3f} {str(same):>13}")
            if mode != "pytorch":
                ok &= same
        saved = runs["stalloc-saved"]
        ok &= saved["peak_reserved"] <= 1.02 * saved["peak_allocated"]
        ok &= saved["median_step_s"] <= 1.02 * base["median_step_s"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    print("\nacceptance (losses equal, reserved within 2% of allocated, step time within 2%):",
          "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
