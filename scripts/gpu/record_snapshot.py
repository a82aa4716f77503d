"""Record a real PyTorch CUDA memory snapshot of a small training loop (needs a GPU).

Starts torch.cuda.memory._record_memory_history() before anything is allocated, trains a small
transformer for --steps steps, and writes the snapshot with torch.cuda.memory._dump_snapshot
(a pickle that `stalloc import` reads). Next to it, <out>.stats.json holds what PyTorch's own
counters said: max_memory_reserved, max_memory_allocated, the allocator settings, the device.
PYTORCH_CUDA_ALLOC_CONF must be set before CUDA starts, so --expandable re-runs this script
in a child process with expandable_segments:True.

    python scripts/gpu/record_snapshot.py -o snapshot.pickle [--steps 8] [--expandable]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def train(steps: int, dim: int, layers: int, batch: int, seq: int, vocab: int,
          device: str = "cuda") -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(dim, nhead=8, dim_feedforward=4 * dim, batch_first=True)
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.TransformerEncoder(layer, layers),
                          nn.Linear(dim, vocab)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        # varying sequence lengths, as real data loaders give, exercise the cache
        s = seq - int(torch.randint(0, seq // 4, ()).item())
        x = torch.randint(0, vocab, (batch, s), device=device)
        y = torch.randint(0, vocab, (batch, s), device=device)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()


def record(out: str, steps: int, dim: int, layers: int, batch: int, seq: int, vocab: int) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("record_snapshot: needs a CUDA GPU and a CUDA build of PyTorch")
    torch.cuda.memory._record_memory_history(max_entries=10_000_000, stacks="python")
    train(steps, dim, layers, batch, seq, vocab)
    torch.cuda.memory._dump_snapshot(out)
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = {
        "snapshot": out,
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "steps": steps,
    }
    with open(out + ".stats.json", "w") as f:
        json.dump(stats, f, indent=2)
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, help="snapshot pickle to write")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--expandable", action="store_true",
                    help="run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    args = ap.parse_args(argv)
    want = "expandable_segments:True" if args.expandable else ""
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") != want:
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=want)
        if not want:
            env.pop("PYTORCH_CUDA_ALLOC_CONF")
        cmd = [sys.executable, os.path.abspath(__file__)] + list(argv or sys.argv[1:])
        return subprocess.call(cmd, env=env)
    stats = record(args.out, args.steps, args.dim, args.layers, args.batch, args.seq, args.vocab)
    print(json.dumps(stats, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
