#!/usr/bin/env python3
"""What a PyTorch user meets when things go wrong under stalloc (needs a CUDA build of PyTorch
and a GPU): each case in a fresh process, since the allocator is chosen before CUDA starts.

- oom: past `set_per_process_memory_fraction`, a request raises `torch.cuda.OutOfMemoryError`
  with stalloc's message (through libstalloc_torch.so where it loads, else the RuntimeError of
  libstalloc_torch_generic.so through `torch_backend.oom_guard()`); the process then allocates
  and computes as before, and once the limit is raised the same request succeeds.
- graph: `torch.cuda.graph` capture is refused before anything is captured, with a message naming
  the settings that avoid it, and the stream computes normally after.
- stats: `torch.cuda.memory_allocated()`, `max_memory_reserved()`, `memory_stats()`,
  `reset_peak_memory_stats()`, `memory_summary()` and `empty_cache()` answer with stalloc's
  figures, which follow the tensors made and freed.
- churn: tensors of many sizes made, filled with their own values, half freed and others made
  over them, several times; every tensor still live holds its values at the end.

    python scripts/gpu/check_torch_errors.py [--cases oom graph stats churn] [--out errors.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CASES = ("oom", "graph", "stats", "churn")
MiB = 2**20


def case_oom() -> dict:
    import torch

    from stalloc.integrations import torch_backend

    torch_backend.enable()
    plug = os.path.basename(torch_backend.plug_library()[0])  # whose malloc throws (a NULL made a tensor)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.02)
    limit = torch_backend._session(0).allocator.stats().memory_limit  # what stalloc took from it
    x = torch.ones(MiB, device="cuda")
    big = int(total * 0.05)
    raised, message, typed = False, "", False
    try:
        with torch_backend.oom_guard():
            torch.empty(big, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        raised, message, typed = True, str(e), True
    except RuntimeError as e:  # the wrong type: reported as a failure
        raised, message = True, str(e)
    after = float((x * 2).sum().item())  # the process goes on
    torch.cuda.set_per_process_memory_fraction(0.5)
    y = torch.empty(big, dtype=torch.uint8, device="cuda")
    y.fill_(7)
    fits = int(y[-1].item()) == 7
    ok = raised and typed and "stalloc" in message and after == 2.0 * MiB and fits
    return {"ok": ok, "raised": raised, "typed": typed, "message": message[:300], "plug": plug, "stalloc_limit": limit,
            "fraction_read_back": torch.cuda.get_per_process_memory_fraction(),
            "computes_after": after == 2.0 * MiB, "fits_after_raising_limit": fits}


def case_graph() -> dict:
    import torch

    from stalloc.integrations import torch_backend

    torch_backend.enable()
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    refused, message = False, ""
    try:
        with torch.cuda.graph(g):
            y = x * 2
    except RuntimeError as e:
        refused, message = True, str(e)
    torch.cuda.synchronize()
    after = float((x * 3).sum().item())
    named = "max-autotune-no-cudagraphs" in message
    return {"ok": refused and named and after == 3.0 * 1024, "refused": refused,
            "names_the_settings": named, "message": message[:300], "computes_after": after == 3.0 * 1024}


def case_stats() -> dict:
    import torch

    from stalloc.integrations import torch_backend

    torch_backend.enable()
    base = torch.cuda.memory_allocated()
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    with_x = torch.cuda.memory_allocated()
    stats = torch.cuda.memory_stats()
    reserved = torch.cuda.max_memory_reserved()
    summary = torch.cuda.memory_summary()
    del x
    without_x = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.empty_cache()
    peak_after_reset = torch.cuda.max_memory_allocated()
    follows = with_x - base >= 64 * MiB and with_x - without_x >= 64 * MiB
    consistent = stats["allocated_bytes.all.current"] == with_x and reserved >= with_x
    return {"ok": follows and consistent and peak_after_reset <= with_x and bool(summary),
            "allocated": [base, with_x, without_x], "max_reserved": reserved,
            "peak_after_reset": peak_after_reset, "summary_chars": len(summary)}


def case_churn(rounds: int = 20) -> dict:
    import torch

    from stalloc.integrations import torch_backend

    torch_backend.enable()
    gen = torch.Generator().manual_seed(0)
    live: list[tuple[torch.Tensor, float]] = []
    made = 0
    for r in range(rounds):
        for _ in range(50):
            n = int(torch.randint(1, 4 * MiB, (1,), generator=gen).item())
            value = float(made % 1000)
            live.append((torch.full((n,), value, device="cuda"), value))
            made += 1
        keep = torch.randperm(len(live), generator=gen)[: len(live) // 2].tolist()
        live = [live[i] for i in sorted(keep)]
        torch_backend.step()
    damaged = sum(int((t != v).any().item()) for t, v in live)
    return {"ok": damaged == 0, "tensors_made": made, "checked": len(live), "damaged": damaged}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--out")
    ap.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(globals()[f"case_{args.child}"]()))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("check_torch_errors: torch sees no CUDA device", file=sys.stderr)
        return 3
    results, ok = {}, True
    for case in args.cases:
        out = subprocess.run([sys.executable, __file__, "--child", case], capture_output=True, text=True)
        try:
            r = json.loads(out.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            r = {"ok": False, "exit": out.returncode, "stderr": out.stderr[-2000:]}
        if out.stderr.strip():  # what the library or PyTorch printed (a hook's complaint, say)
            r["stderr_tail"] = out.stderr.strip()[-600:]
        results[case] = r
        ok &= bool(r.get("ok"))
        print(f"{case:<6} {'ok' if r.get('ok') else 'FAILED'}  {json.dumps(r)[:300]}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
