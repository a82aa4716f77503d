"""A small real JAX training loop whose parameters and optimizer state live in stalloc memory.

    python examples/jax_train.py                    # 300 steps of an MLP on two spirals
    python examples/jax_train.py --steps 50 --record /tmp/jax_params.stalloc
    stalloc info /tmp/jax_params.stalloc

Plain jax (no flax, no optax): a 2-256-256-2 MLP classifies two interleaved spirals with SGD
and momentum. Parameters and momentum are stalloc blocks handed to JAX by DLPack with zero
copy (jax_backend checks the addresses). The jitted step returns new arrays in XLA's own
memory: XLA does not alias a donated buffer it did not allocate, so the loop writes the new
state back into fresh stalloc blocks (one host copy per leaf per step); the old blocks return
to stalloc when JAX drops the old arrays, which the statistics show.
"""

from __future__ import annotations

import argparse
import gc
import sys

import numpy as np


def spirals(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    t = np.sqrt(rng.uniform(0.05, 1.0, n)) * 3 * np.pi
    label = rng.integers(0, 2, n)
    r = t / (3 * np.pi)
    x = np.stack([r * np.cos(t + np.pi * label), r * np.sin(t + np.pi * label)], 1)
    return (x + rng.normal(0, 0.02, x.shape)).astype(np.float32), label.astype(np.int32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--record", metavar="TRACE", help="record stalloc's allocations to this trace")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from stalloc.integrations import jax_backend as jb

    alloc = jb.default_allocator()
    if args.record:
        alloc.record_start(args.record)
    rng = np.random.default_rng(0)
    sizes = [2, args.hidden, args.hidden, 2]
    params = [{"w": (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
               "b": np.zeros(b, np.float32)} for a, b in zip(sizes[:-1], sizes[1:])]
    # Parameters and optimizer state: stalloc blocks, zero copy into JAX.
    params = jb.tree_asarray(params, allocator=alloc)
    momentum = jb.tree_asarray(jax.tree_util.tree_map(np.zeros_like, params), allocator=alloc)
    first = jb.buffer_pointer(params[0]["w"])
    print(f"params[0].w at {first:#x} in stalloc memory; {alloc.live_tensors()} arrays, "
          f"{alloc.stats().allocated_bytes} bytes")

    def loss_fn(p, x, y):
        for layer in p[:-1]:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        logits = x @ p[-1]["w"] + p[-1]["b"]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1)), jnp.mean(logits.argmax(1) == y)

    @jax.jit
    def step(p, m, x, y):
        (loss, acc), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, m, g)
        p = jax.tree_util.tree_map(lambda p, m: p - args.lr * m, p, m)
        return p, m, loss, acc

    x_test, y_test = spirals(2048, rng)
    for i in range(args.steps):
        alloc.step(i)
        x, y = spirals(args.batch, rng)
        new_p, new_m, loss, acc = step(params, momentum, x, y)
        # Back into stalloc memory; the previous blocks are freed when JAX drops them.
        params = jb.tree_asarray(new_p, allocator=alloc)
        momentum = jb.tree_asarray(new_m, allocator=alloc)
        del new_p, new_m
        if i % 50 == 0 or i == args.steps - 1:
            gc.collect()
            s = alloc.stats()
            print(f"step {i:4d}  loss {float(loss):.4f}  batch acc {float(acc):.3f}  | stalloc: "
                  f"{s.active_blocks} blocks, {s.allocated_bytes} B live, peak {s.peak_allocated_bytes} B, "
                  f"reserved {s.reserved_bytes} B, {s.alloc_count} allocs / {s.free_count} frees")
    _, test_acc = jax.jit(loss_fn)(params, x_test, y_test)
    print(f"test accuracy {float(test_acc):.3f}")
    if args.record:
        alloc.record_stop()
        print(f"trace written to {args.record}")
    del params, momentum
    gc.collect()
    print(f"after dropping the state: {alloc.stats().active_blocks} blocks live")
    return 0


if __name__ == "__main__":
    sys.exit(main())
