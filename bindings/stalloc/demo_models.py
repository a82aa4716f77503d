"""Small real transformers in plain PyTorch for the demo, the examples and the GPU checks:
a GPT-style decoder (optionally with activation recomputation) and a mixture-of-experts
variant whose per-expert token counts change every step, the case that makes sizes dynamic.
No downloads: weights are random, data is synthetic next-token prediction."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

__all__ = [
    "Attention", "MLP", "MoE", "Block", "TinyGPT", "VARIANTS", "DYNAMIC_PADDING", "build", "batches",
    "train_step",
]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Top-2 routing over `experts` MLPs; each expert sees a data-dependent number of tokens."""

    def __init__(self, dim: int, experts: int):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(MLP(dim) for _ in range(experts))

    def forward(self, x):
        b, t, d = x.shape
        flat = x.reshape(-1, d)
        weights, chosen = self.router(flat).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        return out.view(b, t, d)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, experts: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MoE(dim, experts) if experts else MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=512, dim=128, layers=4, heads=4, seq=64, experts=0, recompute=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) / math.sqrt(dim))
        self.blocks = nn.ModuleList(Block(dim, heads, experts) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.recompute = recompute

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute and self.training else block(x)
        return self.head(self.norm(x))


VARIANTS = {
    "dense": dict(experts=0, recompute=False),
    "recompute": dict(experts=0, recompute=True),
    "moe": dict(experts=4, recompute=False),
    "dynpad": dict(experts=0, recompute=False),  # dense, trained with dynamic padding
}
DYNAMIC_PADDING = {"dynpad"}  # variants whose batches are padded to their longest sample


def build(variant: str, device="cpu", seed: int = 0, **size):
    """A model and its AdamW optimizer, deterministic for a seed."""
    torch.manual_seed(seed)
    model = TinyGPT(**VARIANTS[variant], **size).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-4)


def batches(steps: int, batch: int = 8, seq: int = 64, vocab: int = 512, device="cpu", seed: int = 1,
            dynamic_padding: bool = False, buckets: int = 0):
    """Synthetic next-token data, the same for a seed. With dynamic_padding each batch is as long
    as its longest sample, sample lengths uniform between a quarter of seq and all of it. With
    buckets=B each batch's length is one of B lengths (seq * k // B, k = 1..B) drawn at random, as
    a length-bucketing sampler makes them: each length is a kind of step of its own."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        length = seq
        if dynamic_padding:
            length = int(torch.randint(max(1, seq // 4), seq + 1, (batch,), generator=g).max())
        elif buckets > 0:
            length = max(1, seq * int(torch.randint(1, buckets + 1, (1,), generator=g)) // buckets)
        tokens = torch.randint(0, vocab, (batch, length + 1), generator=g)
        yield tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def train_step(model, opt, x, y) -> float:
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())
