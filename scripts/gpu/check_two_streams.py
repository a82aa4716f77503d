#!/usr/bin/env python3
"""Two streams under stalloc as PyTorch's allocator (needs a CUDA build of PyTorch and a GPU).

A side stream reads tensors that the main stream frees right after queueing the read (with
Tensor.record_stream, as NCCL and FSDP do); the main stream then allocates and overwrites new
tensors. With record_stream honoured, no new tensor gets the freed bytes before the side stream
is done, so every copy the side stream made holds the original values. Runs in a fresh process
(the allocator must be chosen before CUDA starts). Exit status 1 if any copy was damaged.

    python scripts/gpu/check_two_streams.py [--rounds 200] [--out two_streams.json]
"""

from __future__ import annotations

import argparse
import json
import sys


def run(rounds: int, numel: int) -> dict:
    import torch

    from stalloc.integrations import torch_backend

    torch_backend.enable(record_steps=3, hook_optimizer=False)
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    damaged = 0
    for i in range(rounds):
        src = torch.full((numel,), float(i), device="cuda")
        out = torch.empty_like(src)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)  # the side stream is still busy when src is freed
            out.copy_(src)
        src.record_stream(side)
        out.record_stream(side)
        del src  # freed on the main stream while the side stream has yet to read it
        junk = [torch.full((numel,), -1.0, device="cuda") for _ in range(4)]
        main.wait_stream(side)
        damaged += int((out != float(i)).any().item())
        del junk, out
    stats = torch_backend.memory_stats()
    return {"rounds": rounds, "damaged": damaged, "ok": damaged == 0,
            "deferred_frees_now": stats.get("stalloc.deferred_frees", 0),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--numel", type=int, default=1 << 20)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("check_two_streams: torch sees no CUDA device", file=sys.stderr)
        return 3
    result = run(args.rounds, args.numel)
    print(f"two streams: {result['rounds']} rounds, {result['damaged']} damaged copies")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
