"""The one place that loads libstalloc: cffi in ABI mode over the preprocessed header.

The library and its cdef header are found with importlib.resources (not __file__), so the
package works from a wheel, a zip or an editable install. Everything else calls through
``ffi`` and ``lib`` from here, so the process holds one copy of the library's state.
"""

from __future__ import annotations

import os
from importlib import resources

import cffi

__all__ = ["ffi", "lib", "library_path"]

ffi = cffi.FFI()


def _package_file(*parts: str):
    return resources.files(__package__).joinpath(*parts)


def _find(parts: tuple[str, ...], what: str, env: str) -> str:
    override = os.environ.get(env)
    if override:
        return override
    f = _package_file(*parts)
    if not f.is_file():
        raise ImportError(
            f"stalloc: {what} not found at {f}; the package is not built. "
            "Install it with `pip install .` (see README.md), or set "
            f"{env} to the file."
        )
    return str(f)


def _load():
    cdef_path = _find(("include", "stalloc", "stalloc_cdef.h"), "the cdef header", "STALLOC_CDEF")
    lib_path = _find(("lib", "libstalloc.so"), "libstalloc.so", "STALLOC_LIBRARY")
    with open(cdef_path, encoding="utf-8") as f:
        ffi.cdef(f.read())
    return ffi.dlopen(lib_path), lib_path


lib, library_path = _load()
"""The loaded libstalloc and the path it came from."""
