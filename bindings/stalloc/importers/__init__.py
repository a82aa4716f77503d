"""Importers that turn other tools' allocation logs into stalloc traces.

Each importer lives in its own submodule and is imported on demand, e.g.
``from stalloc.importers.torch_profiler import load_profiler_json``.
Nothing is imported eagerly here.
"""

__all__ = ["minimalloc_csv", "rmm", "stalloc_log", "torch_profiler", "torch_snapshot", "xla"]
