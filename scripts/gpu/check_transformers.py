"""GPU check on transformers' Llama and Mixtral (eager experts, so tensor sizes follow the
routing), built from configs with random weights: stalloc (torch_backend.enable(), the online
lifecycle) against PyTorch's default allocator and expandable_segments:True, each in its own
process, 50 steps each, trained plainly, with dynamic padding (each batch padded to its longest
sample) and with an evaluation pass every 5 steps. Reports peak allocated and reserved, waste
against expandable segments', median step time, the mean time of a step with its evaluation
pass after it, and whether the losses match step by step.

    python scripts/gpu/check_transformers.py [--steps 50] [--out results.json] [--record DIR]
        [--modes stalloc ...] [--runs mixtral_plain ...] [--online-param pool_fit_candidates=1 ...]
    python scripts/gpu/check_transformers.py --device cpu --tiny --steps 3   # smoke test, PyTorch only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts", "gpu"))
import driver_timer  # beside this script
MODES = ("pytorch", "pytorch-expandable", "stalloc")
RUNS = [(m, v) for m in ("llama", "mixtral") for v in ("plain", "dynpad", "eval")]
EVAL_EVERY = 5


def build(name: str, tiny: bool, device: str):
    """The model, from tools/make_traces.py's configs (GPU-sized unless tiny)."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import make_traces

    s = make_traces.sizes(True) if tiny else dict(
        hidden=1024, inter=2816, layers=8, heads=16, kv_heads=4, vocab=8192, seq=512, batch=8,
        moe_inter=1408)
    return make_traces.build_model(name, s).to(device), s


def online_params(pairs: list[str]) -> dict:
    """KEY=VALUE pairs (numbers) as torch_backend.enable(online=...)'s parameters."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--online-param wants KEY=VALUE, not {pair!r}")
        try:
            params[key] = int(value)
        except ValueError:
            params[key] = float(value)
    return params


def child(name: str, variant: str, mode: str, steps: int, device: str, tiny: bool,
          online: dict | None = None) -> dict:
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if mode == "pytorch-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import numpy as np
    import torch

    if mode == "stalloc":
        from stalloc.integrations import torch_backend

        torch_backend.enable(online=online or True)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    model, s = build(name, tiny, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = np.random.default_rng(1)
    gen = torch.Generator().manual_seed(2)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    extra = {}
    losses, times, loops = [], [], []  # loops: a step with the eval pass after it, if any
    steady_allocs = 0
    for step in range(steps):
        if mode == "stalloc" and step == driver_timer.steady_start(steps):
            driver_timer.reset()
            steady_allocs = torch_backend.memory_stats()["num_device_alloc"]
        length = s["seq"]
        if variant == "dynpad":
            length = int(rng.integers(max(1, s["seq"] // 4), s["seq"] + 1, size=s["batch"]).max())
        ids = torch.randint(0, s["vocab"], (s["batch"], length), generator=gen).to(device)
        sync()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        sync()
        times.append(time.perf_counter() - t0)
        if variant == "eval" and step % EVAL_EVERY == EVAL_EVERY - 1:
            model.eval()
            with torch.no_grad():
                e = torch.randint(0, s["vocab"], (2 * s["batch"], s["seq"] // 2), generator=gen).to(device)
                losses.append(float(model(input_ids=e, labels=e).loss))
            model.train()
            if mode == "stalloc":
                torch_backend.step()  # the evaluation pass is a step of its own
            sync()
        loops.append(time.perf_counter() - t0)
    if mode == "stalloc":
        st = torch_backend.memory_stats()
        peak_alloc, peak_res = st["allocated_bytes.all.peak"], st["reserved_bytes.all.peak"]
        extra = {"state": torch_backend.state(),
                 **driver_timer.steady_figures(steps, steady_allocs, st["num_device_alloc"])}
    elif device == "cuda":
        peak_alloc, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    else:
        peak_alloc = peak_res = 0
    return {"model": name, "variant": variant, "mode": mode, "losses": losses, **extra,
            **driver_timer.step_times(steps, times, loops),
            "peak_allocated": peak_alloc, "peak_reserved": peak_res,
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="small configs (a CPU smoke test)")
    ap.add_argument("--record", metavar="DIR",
                    help="stalloc's runs also write their allocation traces here (MODEL_VARIANT.stalloc), "
                         "for replaying a GPU run on a CPU (stalloc replay --online)")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                    help="allocators to run (losses are compared with the first)")
    ap.add_argument("--runs", nargs="+", default=[f"{m}_{v}" for m, v in RUNS],
                    choices=[f"{m}_{v}" for m, v in RUNS], help="MODEL_VARIANT runs to make")
    ap.add_argument("--online-param", action="append", default=[], metavar="KEY=VALUE",
                    help="an online parameter for stalloc's runs (docs/online.md), e.g. "
                         "pool_fit_candidates=1; repeatable")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "VARIANT", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    online = online_params(args.online_param)
    if args.child:
        if args.record and args.child[2] == "stalloc":  # read when the allocator is made
            os.makedirs(args.record, exist_ok=True)
            os.environ["STALLOC_RECORD_PATH"] = os.path.join(args.record, f"{args.child[0]}_{args.child[1]}.stalloc")
        print(json.dumps(child(*args.child, args.steps, args.device, args.tiny, online)))
        return 0
    modes = args.modes if args.device == "cuda" else ("pytorch",)  # stalloc needs a GPU
    results, ok = [], True
    for name, variant in RUNS:
        if f"{name}_{variant}" not in args.runs:
            continue
        runs = {}
        for mode in modes:
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--device", args.device,
                   "--child", name, variant, mode] + (["--tiny"] if args.tiny else []) + \
                  (["--record", args.record] if args.record else []) + \
                  [f"--online-param={p}" for p in args.online_param]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                return 1
            runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(runs[mode])
        base = runs[modes[0]]
        print(f"\n{name} {variant} on {base['device']}, {args.steps} steps")
        print(f"{'allocator':<20} {'peak alloc MiB':>15} {'peak reserved MiB':>18} {'waste MiB':>10} "
              f"{'waste/expandable':>17} {'step ms':>8} {'mean ms':>8} {'losses equal':>13}")
        exp = runs.get("pytorch-expandable")
        exp_waste = exp["peak_reserved"] - exp["peak_allocated"] if exp else 0
        for mode, r in runs.items():
            waste = r["peak_reserved"] - r["peak_allocated"]
            r["waste_vs_expandable"] = waste / exp_waste if exp_waste else float("nan")
            same = r["losses"] == base["losses"]
            print(f"{mode:<20} {r['peak_allocated'] / 2**20:>15.1f} {r['peak_reserved'] / 2**20:>18.1f} "
                  f"{waste / 2**20:>10.1f} {r['waste_vs_expandable']:>17.2f} "
                  f"{r['median_step_s'] * 1e3:>8.2f} {r['mean_loop_s'] * 1e3:>8.2f} {str(same):>13}")
            if mode == "stalloc":
                ok &= same
                print(f"  stalloc steady state: {driver_timer.summary(r)}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    print("\nacceptance (stalloc's losses equal PyTorch's step by step):", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
