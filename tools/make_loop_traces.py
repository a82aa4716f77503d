#!/usr/bin/env python3
"""Record training loops of other shapes than tools/make_traces.py's, on the CPU.

make_traces.py records transformers (and a convnet) under schedules of one kind each. These
are other models under loops nothing in stalloc was made or tuned on, recorded the same way
(torch.profiler with profile_memory, one ``prof.step()`` after construction and one per
optimizer step, converted with ``stalloc.importers.torch_profiler``):

  gru_bucket       a 2-layer GRU language model, batches of 8 whose length is one of four
                   buckets (32, 64, 96, 128) drawn at random each step; SGD with momentum
  gru_accumvar     the same model, each step accumulating over 1 to 4 micro-batches (drawn)
                   of lengths 16-127 (drawn); RMSprop
  vit_lastbatch    a small vision transformer (patch embedding, 4 encoder layers, dropout)
                   on 32x32 images: epochs of five batches of 16 and a last, partial batch of
                   7, each epoch ending with an evaluation pass of 32 images in the same step;
                   AdamW
  gnn_var          a 3-layer message-passing network on a random graph of 500-4000 nodes and
                   3-8 edges per node each step (index_add_ over the edges); Adam
  unet_multiscale  a small U-Net trained at image sizes that change every 4 steps (64, 96,
                   80, 112, 48), as detection models are trained at several resolutions, with
                   gradient clipping; AdamW one tensor at a time

Every shape is drawn from a seeded generator before it is used, so a recording is the same on
every run with one torch thread on one machine (convolutions' buffers follow the CPU's vector
width: on another CPU the U-Net asks a few percent of its requests at other sizes). Example:
python3 tools/make_loop_traces.py --out tests/data/traces/loops --loops unet_multiscale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_traces  # noqa: E402  (its importer loader and trace summary)

nn = torch.nn


class GRULM(nn.Module):
    def __init__(self, vocab=1000, hidden=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def loss(self, ids):
        h, _ = self.gru(self.embed(ids))
        logits = self.head(h[:, :-1])
        return nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


class ViT(nn.Module):
    def __init__(self, hidden=96, patch=4, classes=10):
        super().__init__()
        self.patches = nn.Conv2d(3, hidden, patch, patch)
        layer = nn.TransformerEncoderLayer(hidden, 4, 4 * hidden, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, classes)

    def loss(self, images, labels):
        tokens = self.patches(images).flatten(2).transpose(1, 2)
        return nn.functional.cross_entropy(self.head(self.encoder(tokens).mean(1)), labels)


class GNN(nn.Module):
    def __init__(self, features=32, hidden=128):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(features, hidden), nn.Linear(hidden, hidden),
                                     nn.Linear(hidden, hidden)])
        self.head = nn.Linear(hidden, 1)

    def loss(self, x, edges, target):
        h = x
        for layer in self.layers:  # each node adds its in-neighbours' features
            messages = torch.zeros_like(h).index_add_(0, edges[1], h[edges[0]])
            h = torch.relu(layer(h + messages))
        return nn.functional.mse_loss(self.head(h).squeeze(-1), target)


class UNet(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.down1 = nn.Conv2d(3, width, 3, 1, 1)
        self.norm = nn.GroupNorm(4, width)
        self.down2 = nn.Conv2d(width, 2 * width, 3, 2, 1)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, 2)
        self.out = nn.Conv2d(2 * width, 3, 3, 1, 1)

    def loss(self, images):
        a = torch.relu(self.norm(self.down1(images)))
        b = torch.relu(self.down2(a))
        return nn.functional.mse_loss(self.out(torch.cat([a, self.up(b)], 1)), images)


def _optimizer_step(opt):
    opt.step()
    opt.zero_grad(set_to_none=True)


def gru_bucket(model, opt, step, rng):
    length = int(rng.choice([32, 64, 96, 128]))
    model.loss(torch.randint(0, 1000, (8, length))).backward()
    _optimizer_step(opt)


def gru_accumvar(model, opt, step, rng):
    micro = int(rng.integers(1, 5))
    for _ in range(micro):
        length = int(rng.integers(16, 128))
        (model.loss(torch.randint(0, 1000, (4, length))) / micro).backward()
    _optimizer_step(opt)


def vit_lastbatch(model, opt, step, rng):
    last = step % 6 == 5  # an epoch: five full batches, then the rest of the data set
    batch = 7 if last else 16
    model.loss(torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))).backward()
    _optimizer_step(opt)
    if last:
        model.eval()
        with torch.no_grad():
            model.loss(torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,)))
        model.train()


def gnn_var(model, opt, step, rng):
    nodes = int(rng.integers(500, 4000))
    edges = int(nodes * rng.uniform(3, 8))
    model.loss(torch.randn(nodes, 32), torch.randint(0, nodes, (2, edges)), torch.randn(nodes)).backward()
    _optimizer_step(opt)


def unet_multiscale(model, opt, step, rng):
    side = (64, 96, 80, 112, 48)[(step // 4) % 5]
    model.loss(torch.randn(4, 3, side, side)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    _optimizer_step(opt)


# name: (model, optimizer, one step, optimizer steps)
LOOPS = {
    "gru_bucket": (GRULM, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), gru_bucket, 16),
    "gru_accumvar": (GRULM, lambda p: torch.optim.RMSprop(p), gru_accumvar, 16),
    "vit_lastbatch": (ViT, lambda p: torch.optim.AdamW(p), vit_lastbatch, 18),
    "gnn_var": (GNN, lambda p: torch.optim.Adam(p), gnn_var, 16),
    "unet_multiscale": (UNet, lambda p: torch.optim.AdamW(p, foreach=False), unet_multiscale, 16),
}


def record(name: str, out_dir: str, importer, seed: int = 0, steps: int | None = None) -> dict:
    from torch.profiler import ProfilerActivity, profile, schedule
    make_model, make_opt, one_step, default_steps = LOOPS[name]
    steps = steps or default_steps
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 5)
    tmp = tempfile.mkdtemp(prefix="stalloc_trace_")
    json_path = os.path.join(tmp, f"{name}.json")
    t0 = time.time()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=0, warmup=0, active=steps + 1, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(json_path)) as prof:
        model = make_model()
        opt = make_opt(model.parameters())
        prof.step()  # end of ProfilerStep#0 (construction)
        for step in range(steps):
            one_step(model, opt, step, rng)
            prof.step()
    secs = time.time() - t0
    events, info = importer.load_profiler_json(json_path, return_info=True)
    np.savez_compressed(os.path.join(out_dir, f"{name}.npz"), events=events)
    shutil.rmtree(tmp, ignore_errors=True)
    return dict(name=name, events=int(len(events)), seconds=round(secs, 1),
                **make_traces.summarize(events, info))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="traces", help="output folder")
    ap.add_argument("--loops", nargs="+", default=list(LOOPS), choices=list(LOOPS))
    ap.add_argument("--steps", type=int, default=None,
                    help="optimizer steps per run (default: each loop's own, 16-18)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1 keeps the event order deterministic)")
    args = ap.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        ap.error(f"--steps must be at least 1, not {args.steps}")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    importer = make_traces._load_importer()
    for name in args.loops:
        print(json.dumps(record(name, args.out, importer, args.seed, args.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
