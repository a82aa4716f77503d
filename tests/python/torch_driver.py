"""Drives libstalloc's PyTorch entry points (stalloc_torch_malloc/free, the functions
CUDAPluggableAllocator calls) with a recorded trace, calling a PlanSession's step() at every
step marker, as torch_backend's optimizer hook does on a GPU. Shared by the torch backend
tests and the torchrun script."""

from __future__ import annotations

import stalloc
from stalloc._lib import ffi, lib
from stalloc.session import PlanSession
from stalloc.trace import ALLOC, FREE, STEP


def drive(trace_path, plan_path=None, rank=0, record_steps=3, background=False, check_data=True,
          online=False, growable_pool=None, record_path=None):
    """Returns (session, stats) after replaying the trace through the PyTorch entry points on
    the host backend. With check_data, every block gets a pattern that is verified at free."""
    trace = stalloc.load_trace(trace_path)
    a = stalloc.Allocator(backend="host", growable_pool=growable_pool, record_path=record_path)
    lib.stalloc_torch_register(0, a._h())
    session = PlanSession(a, record_steps=record_steps, plan_path=plan_path, rank=rank,
                          background=background, online=online)
    live = {}
    try:
        for e in trace.events:
            kind = int(e["kind"])
            if kind == STEP and int(e["id"]) > 0:
                session.step()
                if background and not online:
                    session.wait()
            elif kind == ALLOC:
                size = int(e["size"])
                p = lib.stalloc_torch_malloc(size, 0, ffi.NULL)
                if p == ffi.NULL:
                    raise MemoryError(ffi.string(lib.stalloc_torch_last_error(ffi.NULL)).decode())
                tag = int(e["id"]) & 0xFF
                if check_data:
                    ffi.memmove(p, bytes([tag]) * min(size, 64), min(size, 64))
                live[int(e["id"])] = (p, size, tag)
            elif kind == FREE and int(e["id"]) in live:
                p, size, tag = live.pop(int(e["id"]))
                if check_data:
                    got = ffi.buffer(p, min(size, 64))[:]
                    assert got == bytes([tag]) * min(size, 64), "a live block was overwritten"
                lib.stalloc_torch_free(p, size, 0, ffi.NULL)
        return session, a.stats()
    finally:
        lib.stalloc_torch_register(0, ffi.NULL)
