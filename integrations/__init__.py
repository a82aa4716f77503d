"""Thin adapters from frameworks to libstalloc: ``torch_backend`` and ``jax_backend``.

Each imports its framework lazily, so ``import stalloc`` never needs torch or jax.
"""

__all__ = ["jax_backend", "torch_backend"]
