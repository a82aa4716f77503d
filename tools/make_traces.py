#!/usr/bin/env python3
"""Record real allocation traces of small transformer training runs on the CPU.

Each run builds a model from a config with random weights (no downloads),
trains it with AdamW for ``--steps`` optimizer steps under
``torch.profiler.profile(activities=[CPU], profile_memory=True,
schedule=schedule(wait=0, warmup=0, active=steps + 1, repeat=1))`` and calls
``prof.step()`` after model/optimizer construction and after each optimizer
step. The profiler therefore writes ``ProfilerStep#0`` (construction of the
model and the optimizer: the weights are allocated there) and
``ProfilerStep#1`` .. ``ProfilerStep#<steps>`` (one per optimizer step; the
first also allocates gradients and the AdamW state).

The Chrome trace is exported (``<name>.profiler.json.gz``) and converted with
``stalloc.importers.torch_profiler.load_profiler_json`` to
``<name>.npz`` (``np.savez_compressed(path, events=array)``).

Models (``--models``): llama (LlamaForCausalLM), gpt2 (GPT2LMHeadModel),
mixtral (MixtralForCausalLM, 4 experts, top-2; ``--moe-impl eager`` by
default, the per-expert loop whose tensor sizes follow the routing).
Held-out families (not recorded by default; runs the planner was never tuned on):
bert (BertForMaskedLM, an encoder), t5 (T5ForConditionalGeneration, encoder and
decoder, labels the first half of the input) and convnet (a small ResNet-style
network with batch norm, images of batch x 3 x r x r, r = sequence / 4, so a
changing sequence is a changing resolution: progressive resizing for curriculum).
They take the variants that need no pipeline split (plain, accum, the runs that
change; bert and t5 also recompute).
Variants (``--variants``):
  plain      one forward/backward per optimizer step
  recompute  activation (gradient) checkpointing of every decoder layer,
             non-reentrant (model.activation_checkpointing_enable /
             gradient_checkpointing_enable)
  accum      gradient accumulation, 2 micro-batches per optimizer step
  1f1b       the layers split into 2 pipeline stages run in this process;
             4 micro-batches per optimizer step executed in 1F1B order
             (stage 0: F0 F1 B0 F2 B1 F3 B2 B3, stage 1: F0 B0 F1 B1 ...),
             stage outputs detached at the boundary and the backward of
             stage 0 driven by torch.autograd.backward(output, grad)
Pipeline variants (run_pipeline; 1f1b above is the one with 4 micro-batches):
  1f1b_m8         as 1f1b with 8 micro-batches per optimizer step
  1f1b_vpp        interleaved 1F1B (virtual pipeline): the layers split into
                  4 model chunks, 2 per stage (stage s holds chunks s and
                  s + 2), 4 micro-batches in Megatron-LM's interleaved order
  1f1b_recompute  as 1f1b with activation checkpointing of every layer
The schedule runs in one process: a forward keeps its output (and with it the
graph) until that micro-batch's backward, so the allocation order is the real
one of the pipeline stages interleaved clock tick by clock tick.
Runs that change (``--changing-steps``, default 12 optimizer steps):
  dynpad      dynamic padding: each batch padded to its longest sample, sample
              lengths uniform between a quarter of the sequence and all of it
  accumvar    gradient accumulation over 2 micro-batches, each padded on its own
  curriculum  sequence length a quarter, then half, then all of it (thirds of the run)
  ramp        batch size a quarter, then half, then all of it
  eval        an evaluation pass (eval mode, no_grad, double batch, half length)
              after every second optimizer step, as a step of its own
Optimizers (``--optimizer``; the runs keep their names, so record each into its own folder):
  adamw          torch.optim.AdamW, one tensor at a time (torch's default on the CPU)
  adamw_foreach  AdamW with foreach=True, torch's default for CUDA tensors: each update
                 makes temporaries for all parameters at once, the optimizer step's own peak
  sgd            SGD with momentum 0.9: one state tensor per parameter, none before the
                 first step
Loop options (the runs keep their names, so record each combination into its own folder):
  --amp          mixed precision: each forward and its loss under torch.autocast (bfloat16, the
                 CPU's), backward outside it, as the PyTorch AMP recipe has it; every weight is
                 cast once per use and the casts autograd saves live until the backward. Not for
                 the pipeline variants (their stages run forward and backward interleaved).
  --clip-grad N  torch.nn.utils.clip_grad_norm_(parameters, N) before each optimizer step
  --micro-batches lazy
                 each micro-batch made right before its own forward, as a loop that moves each
                 to the device when it runs it (the default, upfront, makes a step's
                 micro-batches all before its first forward); not for the pipeline variants
  --seq2seq-targets own
                 t5 in dynpad and accumvar: each batch's target padded to a length of its own
                 (uniform between a quarter of its source's length and all of it), as a seq2seq
                 collator pads source and target each to its longest; the default, half, ties
                 the target to half the source's length
Every shape is drawn before the run (changing_schedule, one function per variant) and the
profiler's active window is exactly its prof.step() calls: one step marker for construction,
one per optimizer step and one per evaluation pass, no empty one at the end.

Example: python3 tools/make_traces.py --small --out tests/data/traces
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore", message="Profiler won't be using warmup")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("llama", "gpt2", "mixtral")
HELD_OUT = ("bert", "t5", "convnet")  # families the planner was never tuned on
# Runs that change from step to step (shape_schedule): each optimizer step's micro-batch shapes
# follow the variant, and "eval" inserts evaluation steps of their own.
CHANGING_VARIANTS = ("dynpad", "accumvar", "curriculum", "ramp", "eval")
VARIANTS = ("plain", "recompute", "accum", "1f1b", "1f1b_m8", "1f1b_vpp", "1f1b_recompute") + CHANGING_VARIANTS


def _load_importer():
    """Import the profiler importer; fall back to loading the file directly."""
    sys.path.insert(0, os.path.join(REPO, "bindings"))
    try:
        from stalloc.importers import torch_profiler  # type: ignore
        return torch_profiler
    except Exception:
        path = os.path.join(REPO, "bindings", "stalloc", "importers", "torch_profiler.py")
        spec = importlib.util.spec_from_file_location("stalloc_torch_profiler", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


def sizes(small: bool) -> dict:
    if small:
        return dict(hidden=64, inter=172, layers=4, heads=4, kv_heads=2, vocab=512,
                    seq=32, batch=2, moe_inter=96)
    return dict(hidden=256, inter=688, layers=4, heads=4, kv_heads=2, vocab=2048,
                seq=128, batch=4, moe_inter=384)


def build_model(name: str, s: dict, moe_impl: str = "eager"):
    if name == "convnet":  # torch alone; a new module is in training mode
        return ConvNet(s["hidden"] // 8)
    import transformers as tf
    if name == "llama":
        cfg = tf.LlamaConfig(hidden_size=s["hidden"], intermediate_size=s["inter"],
                             num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                             num_key_value_heads=s["kv_heads"], vocab_size=s["vocab"],
                             max_position_embeddings=max(256, s["seq"]))
        model = tf.LlamaForCausalLM(cfg)
    elif name == "gpt2":
        cfg = tf.GPT2Config(n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                            vocab_size=s["vocab"], n_positions=max(256, s["seq"]),
                            bos_token_id=0, eos_token_id=0)
        model = tf.GPT2LMHeadModel(cfg)
    elif name == "bert":
        cfg = tf.BertConfig(hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                            num_attention_heads=s["heads"], intermediate_size=s["inter"],
                            vocab_size=s["vocab"], max_position_embeddings=max(512, s["seq"]))
        model = tf.BertForMaskedLM(cfg)
    elif name == "t5":
        cfg = tf.T5Config(d_model=s["hidden"], d_ff=s["inter"], num_layers=s["layers"] // 2 + 1,
                          num_decoder_layers=s["layers"] // 2 + 1, num_heads=s["heads"],
                          d_kv=s["hidden"] // s["heads"], vocab_size=s["vocab"],
                          decoder_start_token_id=0)
        model = tf.T5ForConditionalGeneration(cfg)
    elif name == "mixtral":
        cfg = tf.MixtralConfig(hidden_size=s["hidden"], intermediate_size=s["moe_inter"],
                               num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                               num_key_value_heads=s["kv_heads"], vocab_size=s["vocab"],
                               max_position_embeddings=max(256, s["seq"]),
                               num_local_experts=4, num_experts_per_tok=2,
                               experts_implementation=moe_impl)
        model = tf.MixtralForCausalLM(cfg)
    else:
        raise ValueError(f"unknown model {name!r}")
    model.train()
    return model


class ConvNet(torch.nn.Module):
    """A small ResNet-style image classifier (convolutions, batch norm, residual adds)."""

    def __init__(self, width: int, classes: int = 10):
        super().__init__()
        nn = torch.nn

        def conv(ci, co, stride=1):
            return nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co))

        self.stem = nn.Sequential(conv(3, width), nn.ReLU())
        self.stages = nn.ModuleList()
        for ci, co, stride in ((width, width, 1), (width, 2 * width, 2), (2 * width, 4 * width, 2)):
            self.stages.append(nn.ModuleList([conv(ci, co, stride), conv(co, co),
                                              conv(ci, co, stride) if ci != co else nn.Identity()]))
        self.head = nn.Linear(4 * width, classes)

    def forward(self, images, labels):
        h = self.stem(images)
        for first, second, skip in self.stages:
            h = torch.relu(second(torch.relu(first(h))) + skip(h))
        logits = self.head(h.mean(dim=(2, 3)))
        return torch.nn.functional.cross_entropy(logits, labels)


def make_batch(name: str, shape, s: dict, gen: torch.Generator, own_target: bool = False):
    """One micro-batch of (batch, sequence): token ids, or for convnet images of side seq / 4.
    t5's target is half the source's length, or with `own_target` a length of its own, drawn
    uniform between a quarter of the source's length and all of it (a seq2seq collator padding
    each side to its own longest)."""
    b, q = shape
    if name == "convnet":
        r = max(4, q // 4)
        return torch.randn(b, 3, r, r, generator=gen), torch.randint(0, 10, (b,), generator=gen)
    ids = torch.randint(0, s["vocab"], shape, generator=gen)
    if name == "t5" and own_target:
        t = int(torch.randint(max(1, q // 4), q + 1, (1,), generator=gen))
        return ids, torch.randint(0, s["vocab"], (b, t), generator=gen)
    if name == "t5":
        return ids, ids[:, : max(1, q // 2)].contiguous()
    return ids, ids


def batch_loss(name: str, model, inputs, labels):
    if name == "convnet":
        return model(inputs, labels)
    return model(input_ids=inputs, labels=labels).loss


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


class TwoStages:
    """The model's layers split in two pipeline stages (same process)."""

    def __init__(self, name: str, model):
        from transformers.masking_utils import create_causal_mask
        self.name, self.model, self.mask_fn = name, model, create_causal_mask
        if name == "gpt2":
            self.body, self.blocks = model.transformer, model.transformer.h
        else:
            self.body, self.blocks = model.model, model.model.layers
        self.split = len(self.blocks) // 2

    def _ctx(self, h):
        pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        mask = self.mask_fn(config=self.model.config, inputs_embeds=h, attention_mask=None,
                            past_key_values=None, position_ids=pos)
        pe = None if self.name == "gpt2" else self.body.rotary_emb(h, position_ids=pos)
        return pos, mask, pe

    def _layers(self, h, layers, ctx):
        pos, mask, pe = ctx
        for layer in layers:
            if self.name == "gpt2":
                h = _first(layer(h, None, mask, None, use_cache=False, position_ids=pos))
            else:
                h = _first(layer(h, attention_mask=mask, position_embeddings=pe,
                                 position_ids=pos, use_cache=False))
        return h

    def stage0(self, ids):
        if self.name == "gpt2":
            h = self.body.wte(ids)
            ctx = self._ctx(h)
            h = self.body.drop(h + self.body.wpe(ctx[0]))
        else:
            h = self.body.embed_tokens(ids)
            ctx = self._ctx(h)
        return self._layers(h, self.blocks[: self.split], ctx)

    def stage1(self, h, labels):
        h = self._layers(h, self.blocks[self.split:], self._ctx(h))
        h = self.body.ln_f(h) if self.name == "gpt2" else self.body.norm(h)
        logits = self.model.lm_head(h)
        return self.model.loss_function(logits=logits, labels=labels,
                                        vocab_size=self.model.config.vocab_size)


def one_f_one_b(stages: TwoStages, batches, nstages: int = 2):
    """Run forward/backward of the micro-batches in 1F1B order on 2 stages."""
    m = len(batches)
    orders = []
    for s in range(nstages):
        warm = min(nstages - s - 1, m)
        ops = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                ops.append(("F", f))
                f += 1
            ops.append(("B", b))
            b += 1
        orders.append(ops)
    out0, in1, loss1 = {}, {}, {}
    done = [set() for _ in range(nstages)]
    pos = [0] * nstages
    while any(pos[s] < len(orders[s]) for s in range(nstages)):
        progressed = False
        for s in range(nstages):  # one "clock tick": each ready stage runs its next op
            if pos[s] >= len(orders[s]):
                continue
            op, i = orders[s][pos[s]]
            ids, labels = batches[i]
            if s == 0 and op == "F":
                out0[i] = stages.stage0(ids)
            elif s == 1 and op == "F":
                if ("F", i) not in done[0]:
                    continue
                in1[i] = out0[i].detach().requires_grad_()  # "send" activation
                loss1[i] = stages.stage1(in1[i], labels) / m
            elif s == 1 and op == "B":
                loss1.pop(i).backward()
            else:  # stage 0 backward needs the gradient "received" from stage 1
                if ("B", i) not in done[1]:
                    continue
                x = in1.pop(i)
                torch.autograd.backward(out0.pop(i), grad_tensors=x.grad)
                del x
            done[s].add((op, i))
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("1F1B schedule deadlocked")


# ---- pipeline schedules (1F1B with more micro-batches, interleaved, recomputation) ----------

# variant -> (micro-batches per optimizer step, stages, model chunks per stage, recompute)
PIPELINE_VARIANTS = {
    "1f1b_m8": (8, 2, 1, False),
    "1f1b_vpp": (4, 2, 2, False),
    "1f1b_recompute": (4, 2, 1, True),
}


class Chunks(TwoStages):
    """The model's layers split into `n` consecutive chunks; chunk 0 also embeds, the last
    one also normalizes, projects to the vocabulary and takes the loss."""

    def __init__(self, name: str, model, n: int):
        super().__init__(name, model)
        per, extra = divmod(len(self.blocks), n)
        self.bounds, b = [], 0
        for c in range(n):
            e = b + per + (1 if c < extra else 0)
            self.bounds.append((b, e))
            b = e
        self.n = n

    def forward(self, c: int, x, labels):
        b, e = self.bounds[c]
        if c == 0:
            if self.name == "gpt2":
                h = self.body.wte(x)
                ctx = self._ctx(h)
                h = self.body.drop(h + self.body.wpe(ctx[0]))
            else:
                h = self.body.embed_tokens(x)
                ctx = self._ctx(h)
        else:
            h, ctx = x, self._ctx(x)
        h = self._layers(h, self.blocks[b:e], ctx)
        if c < self.n - 1:
            return h
        h = self.body.ln_f(h) if self.name == "gpt2" else self.body.norm(h)
        logits = self.model.lm_head(h)
        return self.model.loss_function(logits=logits, labels=labels,
                                        vocab_size=self.model.config.vocab_size)


def pipeline_orders(nstages: int, chunks: int, m: int):
    """Per stage, its ops ("F" or "B", global chunk, micro-batch) in execution order: plain
    1F1B for one chunk per stage; Megatron-LM's interleaved schedule otherwise (forwards go
    through the stage's chunks in groups of `nstages` micro-batches, backwards through them
    in reverse; warm-up of (nstages - s - 1) * 2 + (chunks - 1) * nstages forwards)."""
    orders = []
    total = m * chunks
    for s in range(nstages):
        if chunks == 1:
            warm = min(nstages - s - 1, m)
        else:
            warm = min((nstages - s - 1) * 2 + (chunks - 1) * nstages, total)

        def op(kind, k, s=s):
            c = (k // nstages) % chunks
            if kind == "B":
                c = chunks - 1 - c
            mb = (k // (nstages * chunks)) * nstages + k % nstages
            return (kind, c * nstages + s, mb)
        ops = [op("F", k) for k in range(warm)]
        for i in range(total - warm):
            ops.append(op("F", warm + i))
            ops.append(op("B", i))
        ops += [op("B", k) for k in range(total - warm, total)]
        orders.append(ops)
    return orders


def run_pipeline(chunks: Chunks, batches, nstages: int):
    """Runs the forward/backward ops of every stage clock tick by clock tick: in each tick every
    stage whose next op has its input (the previous chunk's forward, or the next chunk's
    backward) runs it. Chunk outputs are detached at chunk boundaries ("sent") and a chunk's
    backward is driven by torch.autograd.backward(output, grad of the next chunk's input)."""
    m, last = len(batches), chunks.n - 1
    orders = pipeline_orders(nstages, chunks.n // nstages, m)
    out, inp, done = {}, {}, set()
    pos = [0] * nstages
    while any(pos[s] < len(orders[s]) for s in range(nstages)):
        progressed = False
        for s in range(nstages):
            if pos[s] >= len(orders[s]):
                continue
            kind, c, i = orders[s][pos[s]]
            ids, labels = batches[i]
            if kind == "F":
                if c > 0 and ("F", c - 1, i) not in done:
                    continue
                x = ids
                if c > 0:
                    x = inp[(c, i)] = out[(c - 1, i)].detach().requires_grad_()
                y = chunks.forward(c, x, labels)
                out[(c, i)] = y / m if c == last else y
            else:
                if c < last and ("B", c + 1, i) not in done:
                    continue
                y = out.pop((c, i))
                if c == last:
                    y.backward()
                else:
                    x = inp.pop((c + 1, i))
                    torch.autograd.backward(y, grad_tensors=x.grad)
                    del x
                del y
            done.add((kind, c, i))
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")


def enable_recompute(model):
    kw = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)


def pipeline_runner(name: str, model, variant: str):
    """The callable running one optimizer step's micro-batches of a pipeline variant."""
    _, nstages, per_stage, recompute = PIPELINE_VARIANTS[variant]
    if recompute:
        enable_recompute(model)
    chunks = Chunks(name, model, nstages * per_stage)
    return lambda batches: run_pipeline(chunks, batches, nstages)


# ---- runs that change (dynpad, accumvar, curriculum, ramp, eval) ------------------------------
# One function per variant: given optimizer step `step` (0-based of `steps`), the sizes `s` and
# the schedule's random generator, it returns the (batch, sequence) of each micro-batch of that
# step and the (batch, sequence) of an evaluation pass after it, or None.

def padded_length(rng: np.random.Generator, batch: int, seq: int) -> int:
    """Dynamic padding: a batch is padded to its longest sample; lengths are uniform between a
    quarter of the sequence and all of it."""
    return int(rng.integers(max(1, seq // 4), seq + 1, size=batch).max())


def _stage(step: int, steps: int) -> int:
    """0, 1, 2 over the thirds of the run."""
    return min(2, 3 * step // max(steps, 1))


def dynpad_shapes(step: int, steps: int, s: dict, rng: np.random.Generator):
    """Dynamic padding: one batch per step, padded to its longest sample."""
    return [(s["batch"], padded_length(rng, s["batch"], s["seq"]))], None


def accumvar_shapes(step: int, steps: int, s: dict, rng: np.random.Generator):
    """Gradient accumulation over 2 micro-batches, each padded to its own longest sample."""
    return [(s["batch"], padded_length(rng, s["batch"], s["seq"])) for _ in range(2)], None


def curriculum_shapes(step: int, steps: int, s: dict, rng: np.random.Generator):
    """Sequence-length curriculum: a quarter, then half, then all of the sequence."""
    q = s["seq"]
    return [(s["batch"], (q // 4, q // 2, q)[_stage(step, steps)])], None


def ramp_shapes(step: int, steps: int, s: dict, rng: np.random.Generator):
    """Batch-size ramp-up: a quarter, then half, then all of the batch (at least 1)."""
    b = s["batch"]
    return [((max(1, b // 4), max(1, b // 2), b)[_stage(step, steps)], s["seq"])], None


def eval_shapes(step: int, steps: int, s: dict, rng: np.random.Generator):
    """The full training batch; after every second step an evaluation pass of double batch at
    half length."""
    b, q = s["batch"], s["seq"]
    return [(b, q)], ((2 * b, q // 2) if step % 2 == 1 else None)


CHANGING_SHAPES = {"dynpad": dynpad_shapes, "accumvar": accumvar_shapes,
                   "curriculum": curriculum_shapes, "ramp": ramp_shapes, "eval": eval_shapes}
assert tuple(CHANGING_SHAPES) == CHANGING_VARIANTS


def shape_schedule(variant: str, step: int, steps: int, s: dict, rng: np.random.Generator):
    """The (batch, sequence) of each micro-batch of optimizer step `step` (0-based of `steps`),
    and the (batch, sequence) of an evaluation pass after it, or None."""
    if variant not in CHANGING_SHAPES:
        raise ValueError(variant)
    return CHANGING_SHAPES[variant](step, steps, s, rng)


def changing_schedule(variant: str, steps: int, s: dict, seed: int) -> list:
    """Every optimizer step's (micro-batch shapes, evaluation shape or None), drawn before the
    run so that the profiler's schedule can cover exactly its steps."""
    rng = np.random.default_rng(seed + 2)
    return [shape_schedule(variant, step, steps, s, rng) for step in range(steps)]


def forward_backward(name: str, model, inputs, labels, micro: int, amp: bool) -> None:
    """One micro-batch: its loss (under autocast with `amp`), a share of the step's, and its
    backward; the loss is freed on return."""
    with autocast(amp):
        loss = batch_loss(name, model, inputs, labels) / micro
    loss.backward()


def autocast(amp: bool):
    """Mixed precision on the CPU (bfloat16) when `amp`, else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp)


def evaluate(name: str, model, inputs, labels, amp: bool = False) -> None:
    """An evaluation pass: no gradients, the model in eval mode, then back to training."""
    model.eval()
    with torch.no_grad(), autocast(amp):
        batch_loss(name, model, inputs, labels)
    model.train()


def supported(name: str, variant: str, amp: bool = False) -> bool:
    """Pipeline splits know the decoder stacks of llama, gpt2 and mixtral only; convnet has no
    transformers checkpointing switch; --amp is not taken by the pipeline variants."""
    pipelined = variant == "1f1b" or variant in PIPELINE_VARIANTS
    if amp and pipelined:
        return False
    if name in MODELS:
        return True
    return not pipelined and not (name == "convnet" and variant == "recompute")


OPTIMIZERS = ("adamw", "adamw_foreach", "sgd")


def make_optimizer(kind: str, params):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=False)
    if kind == "adamw_foreach":
        return torch.optim.AdamW(params, lr=1e-3, foreach=True)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9)
    raise ValueError(f"unknown optimizer {kind!r}")


def record(name: str, variant: str, steps: int, small: bool, out_dir: str,
           keep_json: bool, importer, seed: int = 0, moe_impl: str = "eager",
           optimizer: str = "adamw", amp: bool = False, clip_grad: float | None = None,
           seq2seq_targets: str = "half", micro_batches: str = "upfront") -> dict:
    from torch.profiler import ProfilerActivity, profile, schedule
    if amp and not supported(name, variant, amp):
        raise ValueError(f"{name}_{variant}: --amp is not taken by the pipeline variants")
    torch.manual_seed(seed)
    s = sizes(small)
    micro = {"plain": 1, "recompute": 1, "accum": 2, "1f1b": 4}.get(variant)
    if variant in PIPELINE_VARIANTS:
        micro = PIPELINE_VARIANTS[variant][0]
    gen = torch.Generator().manual_seed(seed + 1)
    plan = changing_schedule(variant, steps, s, seed) if variant in CHANGING_VARIANTS else None
    # targets of their own where the sources are padded each to its longest
    own_target = seq2seq_targets == "own" and variant in ("dynpad", "accumvar")
    # one profiler step per prof.step() call: construction, each optimizer step, each eval pass
    # (a longer active window would add an empty step marker at the end)
    active = 1 + steps + (sum(e is not None for _, e in plan) if plan else 0)
    tag = f"{name}_{variant}"
    tmp = tempfile.mkdtemp(prefix="stalloc_trace_")
    json_path = os.path.join(tmp, f"{tag}.json")

    t0 = time.time()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=0, warmup=0, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(json_path)) as prof:
        model = build_model(name, s, moe_impl)
        if variant == "recompute":
            kw = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
        stages = TwoStages(name, model) if variant == "1f1b" else None
        runner = pipeline_runner(name, model, variant) if variant in PIPELINE_VARIANTS else None
        opt = make_optimizer(optimizer, model.parameters())
        prof.step()  # end of ProfilerStep#0 (construction)
        for step in range(steps):
            batches, eval_shape = [], None
            if plan is not None:
                shapes, eval_shape = plan[step]
                micro = len(shapes)
            else:
                shapes = [(s["batch"], s["seq"])] * micro
            # lazy: each micro-batch made right before its own forward (a loop that moves each
            # to the device as it runs it); a pipeline schedule needs them all first
            lazy = micro_batches == "lazy" and runner is None and stages is None
            for shape in ([] if lazy else shapes):
                batches.append(make_batch(name, shape, s, gen, own_target))
            if runner is not None:
                runner(batches)
            elif stages is not None:
                one_f_one_b(stages, batches)
            elif lazy:
                for shape in shapes:
                    inputs, labels = make_batch(name, shape, s, gen, own_target)
                    forward_backward(name, model, inputs, labels, micro, amp)
            else:
                for inputs, labels in batches:
                    forward_backward(name, model, inputs, labels, micro, amp)
            if clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
            opt.step()
            opt.zero_grad(set_to_none=True)
            del batches
            prof.step()
            if eval_shape is not None:  # an evaluation pass is a step of its own
                evaluate(name, model, *make_batch(name, eval_shape, s, gen), amp=amp)
                prof.step()
    secs = time.time() - t0

    events, info = importer.load_profiler_json(json_path, return_info=True)
    np.savez_compressed(os.path.join(out_dir, f"{tag}.npz"), events=events)
    if keep_json:
        with open(json_path, "rb") as fi, gzip.open(
                os.path.join(out_dir, f"{tag}.profiler.json.gz"), "wb", compresslevel=9) as fo:
            shutil.copyfileobj(fi, fo)
    shutil.rmtree(tmp, ignore_errors=True)
    return dict(name=tag, events=int(len(events)), seconds=round(secs, 1), **summarize(events, info))


def summarize(ev, info) -> dict:
    kind = ev["kind"].astype(np.int64)
    delta = np.where(kind == 1, ev["size"].astype(np.int64),
                     np.where(kind == 2, -ev["size"].astype(np.int64), 0))
    live = np.cumsum(delta)
    step_pos = np.flatnonzero(kind == 3)
    per_step = np.diff(np.append(step_pos, len(ev))) - 1
    return dict(lower_bound=int(live.max()) if len(live) else 0,
                steps=int(len(step_pos)), events_per_step=per_step.tolist(),
                unmatched_frees=info["unmatched_frees"], live_at_end=info["live_at_end"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="traces", help="output folder")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS + HELD_OUT,
                    help="default: %s; held out: %s (variants without a pipeline split)"
                         % (" ".join(MODELS), " ".join(HELD_OUT)))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per run")
    ap.add_argument("--changing-steps", type=int, default=12,
                    help="optimizer steps of the runs that change (%s)" % ", ".join(CHANGING_VARIANTS))
    ap.add_argument("--small", action="store_true", help="tiny sizes (test data)")
    ap.add_argument("--json-for", nargs="*", default=None, metavar="NAME",
                    help="keep the gzipped profiler JSON only for these runs "
                         "(e.g. llama_plain); default: all runs")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1 keeps the event order deterministic)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--moe-impl", default="eager", choices=("eager", "grouped_mm", "batched_mm"),
                    help="transformers experts_implementation for mixtral: 'eager' loops over "
                         "the experts hit, so tensor sizes follow the routing (dynamic); "
                         "'grouped_mm' (the transformers default) sorts tokens and gives "
                         "fixed sizes")
    ap.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                    help="adamw: one tensor at a time (the default on a CPU); adamw_foreach: "
                         "all tensors at once, the default on a GPU; sgd: with momentum")
    ap.add_argument("--amp", action="store_true",
                    help="mixed precision: forward and loss under torch.autocast (bfloat16); "
                         "not for the pipeline variants")
    ap.add_argument("--clip-grad", type=float, default=None, metavar="N",
                    help="clip the gradients' norm to N before each optimizer step")
    ap.add_argument("--micro-batches", default="upfront", choices=("upfront", "lazy"),
                    help="upfront (default): a step's micro-batches all made before its first "
                         "forward; lazy: each right before its own forward (not for the "
                         "pipeline variants, which take them all first)")
    ap.add_argument("--seq2seq-targets", default="half", choices=("half", "own"),
                    help="t5's target length: half the source's (default), or, in dynpad and "
                         "accumvar, a length of its own per batch (source and target each "
                         "padded to its own longest)")
    args = ap.parse_args(argv)
    if args.clip_grad is not None and not args.clip_grad > 0:
        ap.error(f"--clip-grad must be positive, not {args.clip_grad}")

    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:  # convnet needs torch alone
        if any(m != "convnet" for m in args.models):
            ap.error("these models need transformers (pip install transformers); convnet needs torch alone")
        tf_version = "not installed"
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    importer = _load_importer()
    print(f"torch {torch.__version__}, transformers {tf_version}", flush=True)
    for name in args.models:
        for variant in args.variants:
            if not supported(name, variant, args.amp):
                why = ("pipeline schedule under --amp" if args.amp and supported(name, variant)
                       else "checkpointing switch" if variant == "recompute" else "pipeline split")
                print(f"skipped {name}_{variant}: {name} has no {why}", flush=True)
                continue
            tag = f"{name}_{variant}"
            keep = args.json_for is None or tag in args.json_for
            steps = args.changing_steps if variant in CHANGING_VARIANTS else args.steps
            r = record(name, variant, steps, args.small, args.out, keep, importer,
                       args.seed, args.moe_impl, args.optimizer, args.amp, args.clip_grad,
                       args.seq2seq_targets, args.micro_batches)
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
