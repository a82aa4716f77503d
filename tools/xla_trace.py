"""Compile a real JAX training step with XLA's dump flags and turn its buffer assignment into
a stalloc trace.

    python tools/xla_trace.py --model mlp -o mlp.stalloc          # dump, import, save
    python tools/xla_trace.py --model transformer --keep-dump DIR # also keep XLA's files
    python tools/xla_trace.py --model mlp --tiny --test-data tests/data/xla   # the test dump

Two small models in plain jax (no flax): an MLP and a pre-norm transformer language model,
each with an SGD-with-momentum training step (parameters and optimizer state in, new ones and
the loss out). bench/bench_xla.py uses them too. XLA reads XLA_FLAGS once, when its backend
starts, so the dump is made in a child process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# (hidden, layers, batch) and (vocab, d_model, heads, layers, seq, batch) per size.
MODELS = {
    "mlp": {"normal": dict(d_in=512, hidden=1024, layers=4, d_out=10, batch=256),
            "tiny": dict(d_in=16, hidden=32, layers=2, d_out=4, batch=8)},
    "transformer": {"normal": dict(vocab=2048, d=256, heads=4, layers=4, seq=128, batch=16),
                    "tiny": dict(vocab=64, d=16, heads=2, layers=1, seq=8, batch=2)},
}
# The same transformer with every block rematerialised (jax.checkpoint): activations are
# recomputed in the backward pass, which scrambles lifetimes.
MODELS["transformer-remat"] = MODELS["transformer"]


def build(model: str, size: str = "normal"):
    """(step function, example arguments) for a model's training step."""
    import jax
    import jax.numpy as jnp

    cfg = MODELS[model][size]
    remat = model.endswith("-remat")
    key = jax.random.PRNGKey(0)

    def dense(k, n_in, n_out):
        return {"w": jax.random.normal(k, (n_in, n_out), jnp.float32) / jnp.sqrt(n_in),
                "b": jnp.zeros((n_out,), jnp.float32)}

    if model == "mlp":
        dims = [cfg["d_in"]] + [cfg["hidden"]] * cfg["layers"] + [cfg["d_out"]]
        keys = jax.random.split(key, len(dims))
        params = [dense(keys[i], dims[i], dims[i + 1]) for i in range(len(dims) - 1)]
        x = jax.random.normal(keys[-1], (cfg["batch"], cfg["d_in"]), jnp.float32)
        y = jnp.arange(cfg["batch"]) % cfg["d_out"]

        def loss_fn(p, x, y):
            for layer in p[:-1]:
                x = jax.nn.gelu(x @ layer["w"] + layer["b"])
            logits = x @ p[-1]["w"] + p[-1]["b"]
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))
        batch = (x, y)
    else:
        V, D, H, L, T, B = (cfg[k] for k in ("vocab", "d", "heads", "layers", "seq", "batch"))
        keys = iter(jax.random.split(key, 4 + 6 * L))
        params = {"emb": jax.random.normal(next(keys), (V, D), jnp.float32) * 0.02,
                  "pos": jax.random.normal(next(keys), (T, D), jnp.float32) * 0.02,
                  "blocks": [{"qkv": dense(next(keys), D, 3 * D), "out": dense(next(keys), D, D),
                              "up": dense(next(keys), D, 4 * D), "down": dense(next(keys), 4 * D, D),
                              "ln1": jnp.ones((D,)), "ln2": jnp.ones((D,))} for _ in range(L)]}
        tokens = jax.random.randint(next(keys), (B, T + 1), 0, V)

        def norm(x, g):
            return g * (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)

        mask = jnp.tril(jnp.ones((T, T), bool))

        def block(x, blk):
            h = norm(x, blk["ln1"]) @ blk["qkv"]["w"] + blk["qkv"]["b"]
            q, k, v = (a.reshape(B, T, H, D // H) for a in jnp.split(h, 3, axis=-1))
            att = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(D // H)
            att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
            o = jnp.einsum("bhts,bshd->bthd", att, v).reshape(B, T, D)
            x = x + o @ blk["out"]["w"] + blk["out"]["b"]
            h = jax.nn.gelu(norm(x, blk["ln2"]) @ blk["up"]["w"] + blk["up"]["b"])
            return x + h @ blk["down"]["w"] + blk["down"]["b"]

        if remat:
            block = jax.checkpoint(block)

        def loss_fn(p, tokens):
            x = p["emb"][tokens[:, :-1]] + p["pos"]
            for blk in p["blocks"]:
                x = block(x, blk)
            logits = x @ p["emb"].T
            logp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))
        batch = (tokens,)

    momentum = jax.tree_util.tree_map(jnp.zeros_like, params)

    def step(params, momentum, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        momentum = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, momentum, grads)
        params = jax.tree_util.tree_map(lambda p, m: p - 1e-2 * m, params, momentum)
        return params, momentum, loss

    return step, (params, momentum) + batch


def memory_analysis(model: str, size: str = "normal") -> dict:
    """XLA's own figures for the compiled step (CompiledMemoryStats), in this process."""
    import jax

    step, args = build(model, size)
    stats = jax.jit(step).lower(*args).compile().memory_analysis()
    keys = ("temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes",
            "alias_size_in_bytes", "generated_code_size_in_bytes")
    out = {k: int(getattr(stats, k)) for k in keys if hasattr(stats, k)}
    peak = getattr(stats, "peak_memory_in_bytes", None)  # newer jaxlibs only
    if peak is not None:
        out["peak_memory_in_bytes"] = int(peak)
    return out


_CHILD = """
import json, sys
sys.path.insert(0, {tools!r})
import xla_trace
print(json.dumps(xla_trace.memory_analysis({model!r}, {size!r})))
"""


def dump(model: str, dump_dir, size: str = "normal") -> dict:
    """Compiles the step in a child process with --xla_dump_to=dump_dir; returns its
    memory_analysis() figures."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_dump_to={dump_dir} --xla_dump_hlo_as_text").strip()
    env.setdefault("JAX_PLATFORMS", "cpu")
    code = _CHILD.format(tools=str(Path(__file__).resolve().parent), model=model, size=size)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"compiling {model} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="mlp")
    ap.add_argument("--tiny", action="store_true", help="the tiny configuration (test data)")
    ap.add_argument("-o", "--output", help="write the stalloc trace here")
    ap.add_argument("--keep-dump", metavar="DIR", help="dump into DIR and keep it")
    ap.add_argument("--test-data", metavar="DIR",
                    help="copy the step's buffer-assignment and live-range files and XLA's figures into DIR")
    args = ap.parse_args(argv)

    from stalloc.importers import xla

    size = "tiny" if args.tiny else "normal"
    tmp = None
    dump_dir = args.keep_dump or (tmp := tempfile.mkdtemp(prefix="stalloc-xla-"))
    try:
        figures = dump(args.model, dump_dir, size)
        prefix = xla.find_module(dump_dir, "jit_step")
        trace, info = xla.import_dump(prefix, with_info=True)
        print(json.dumps({"model": args.model, "size": size, "module": Path(prefix).name,
                          "lower_bound": trace.lower_bound, **info, "xla": figures}, indent=1))
        if args.output:
            trace.save(args.output)
        if args.test_data:
            out = Path(args.test_data)
            out.mkdir(parents=True, exist_ok=True)
            name = f"{args.model}_tiny" if args.tiny else args.model
            for suffix in xla.DUMP_SUFFIXES:
                shutil.copy(prefix + suffix, out / f"{name}{suffix}")
            (out / f"{name}.memory_analysis.json").write_text(json.dumps(figures, indent=1) + "\n")
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
