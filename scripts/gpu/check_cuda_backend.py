#!/usr/bin/env python3
"""Checks stalloc's cuda backend on a real GPU (needs torch with CUDA; uses CuPy when present).

1. data:    stalloc pointers seen as torch tensors (and CuPy arrays) through
            __cuda_array_interface__: written on the device, read back, no two blocks overlap.
2. streams: a block freed on stream A while a long kernel on A still writes it is reused on A
            at once, and never handed to stream B before A's work is done.
3. plan:    a recorded trace (default tests/data/traces/gpt2_plain.npz) planned and replayed
            in plan mode on the device: every block is filled with its tag on the device at
            its alloc and checked at its free (an overlap would change it).
4. latency: median alloc+free of one block, stalloc beside cuMemAlloc/cuMemFree (what
            cudaMalloc/cudaFree call), cudaMalloc/cudaFree through CuPy when present, and
            PyTorch's caching allocator. Every row goes through one Python call per op.
5. replay:  the trace's allocs and frees alone through stalloc (plan mode, and no plan) and
            PyTorch's caching allocator: microseconds per event, peak reserved bytes.

Prints a table; --out PATH writes every figure as JSON. Exit status 1 if a check fails.

    python scripts/gpu/check_cuda_backend.py --out cuda_check.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def _fail(msg: str) -> None:
    print(f"check_cuda_backend: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    import torch
except ImportError:
    _fail("needs torch with CUDA")
import stalloc

try:
    import cupy
except ImportError:  # optional
    cupy = None


class _Device:
    """A device byte range as __cuda_array_interface__ (no stream: the caller orders work)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None,
        }


def as_tensor(ptr: int, nbytes: int) -> "torch.Tensor":
    t = torch.as_tensor(_Device(ptr, nbytes), device="cuda")
    assert t.data_ptr() == ptr and t.numel() == nbytes
    return t


# ---- 1. data ----

def check_data(a: stalloc.Allocator) -> dict:
    stream = torch.cuda.current_stream().cuda_stream
    sizes = [512, 4096, 1 << 20, (3 << 20) + 7, 64 << 20]
    blocks = []
    for i, n in enumerate(sizes):
        p = a.alloc(n, stream=stream)
        as_tensor(p, n).fill_(i + 1)
        blocks.append((p, n, i + 1))
    ok = all(bool((as_tensor(p, n) == tag).all().item()) for p, n, tag in blocks)
    ranges = sorted((p, p + n) for p, n, _ in blocks)
    disjoint = all(ranges[i][1] <= ranges[i + 1][0] for i in range(len(ranges) - 1))
    cupy_ok = None
    if cupy is not None:
        p, n, _ = blocks[2]
        mem = cupy.cuda.UnownedMemory(p, n, owner=None)
        arr = cupy.ndarray((n,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))
        arr[:] = 0x5A
        cupy.cuda.runtime.deviceSynchronize()
        cupy_ok = bool((arr.get() == 0x5A).all()) and bool((as_tensor(p, n) == 0x5A).all().item())
    for p, n, _ in blocks:
        a.free(p, n, stream)
    return {"ok": ok and disjoint and cupy_ok is not False, "written_read_back": ok, "disjoint": disjoint,
            "cupy": cupy_ok, "sizes": sizes}


# ---- 2. streams ----

def _sleep_cycles(seconds: float) -> int:
    """Cycles of torch.cuda._sleep that take about `seconds` on this device."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    ms = max(start.elapsed_time(end), 1e-3)
    return int(cycles * seconds * 1000.0 / ms)


def check_streams(a: stalloc.Allocator, sleep_s: float) -> dict:
    A, B = torch.cuda.Stream(), torch.cuda.Stream()
    n = 8 << 20
    cycles = _sleep_cycles(sleep_s)
    with torch.cuda.stream(A):
        p = a.alloc(n, stream=A.cuda_stream)
        x = as_tensor(p, n)
        torch.cuda._sleep(cycles)  # A is busy for sleep_s ...
        x.fill_(1)                 # ... and then writes the block
    a.free(p, n, A.cuda_stream)
    same = a.alloc(n, stream=A.cuda_stream)  # same stream: ordered after A's work anyway
    a.free(same, n, A.cuda_stream)
    busy_before = not A.query()
    q = a.alloc(n, stream=B.cuda_stream)
    busy_after = not A.query()
    overlaps = q < p + n and p < q + n
    with torch.cuda.stream(B):
        y = as_tensor(q, n)
        y.fill_(2)
    torch.cuda.synchronize()
    data_ok = bool((y == 2).all().item())
    a.free(q, n, B.cuda_stream)
    # Once A is done, B may have the block: all cached memory on B without a new segment.
    before = a.stats()
    chunks = [a.alloc(2 << 20, stream=B.cuda_stream) for _ in range(before.reserved_bytes // (2 << 20))]
    reused = any(c < p + n and p < c + (2 << 20) for c in chunks)
    no_new_segment = a.stats().backend_allocs == before.backend_allocs
    for c in chunks:
        a.free(c, 2 << 20, B.cuda_stream)
    conclusive = busy_before and busy_after
    early = overlaps and busy_after
    return {"ok": (not early) and data_ok and same == p and conclusive, "same_stream_reuse": same == p,
            "b_overlapped_a": overlaps, "a_busy_during_b_alloc": busy_after, "conclusive": conclusive,
            "b_data_intact": data_ok, "reused_after_a_done": reused and no_new_segment,
            "sleep_s": sleep_s}


# ---- 3. plan mode ----

def check_plan(trace_path: Path, time_limit: float) -> dict:
    from stalloc.plan import plan as make_plan
    from stalloc.trace import ALLOC, FLAG_UNMATCHED, FREE, STEP

    trace = stalloc.load_trace(trace_path)
    p = make_plan(trace, time_limit=time_limit)
    info = p.info()
    stream = torch.cuda.current_stream().cuda_stream
    bad = checked = 0
    t0 = time.perf_counter()
    with stalloc.Allocator(backend="cuda", device=torch.cuda.current_device()) as a:
        a.load_plan(p)
        live: dict[int, tuple[int, int, int]] = {}
        for e in trace.events:
            kind = int(e["kind"])
            if kind == STEP:
                a.step(int(e["id"]))
            elif kind == ALLOC:
                size, tag = int(e["size"]), int(e["id"]) % 251 + 1
                ptr = a.alloc(size, stream=stream)
                if ptr:
                    as_tensor(ptr, size).fill_(tag)
                live[int(e["id"])] = (ptr, size, tag)
            elif kind == FREE and not (int(e["flags"]) & FLAG_UNMATCHED):
                ptr, size, tag = live.pop(int(e["id"]))
                if ptr:
                    checked += 1
                    bad += not bool((as_tensor(ptr, size) == tag).all().item())
                    a.free(ptr, size, stream)
        for ptr, size, tag in live.values():
            if ptr:
                checked += 1
                bad += not bool((as_tensor(ptr, size) == tag).all().item())
        s = a.stats()
    seconds = time.perf_counter() - t0
    return {"ok": bad == 0 and s.plan_hits > 0, "trace": str(trace_path), "blocks_checked": checked,
            "blocks_damaged": bad, "plan_hits": s.plan_hits, "plan_misses": s.plan_misses,
            "dynamic_allocs": s.dynamic_allocs, "fallback_allocs": s.fallback_allocs,
            "lower_bound": trace.summary().lower_bound, "plan_pool_size": info.pool_size,
            "peak_reserved": s.peak_reserved_bytes, "peak_allocated": s.peak_allocated_bytes,
            "seconds": seconds}


# ---- 5. replay speed and peak reserved, beside PyTorch's caching allocator ----

def replay_compare(trace_path: Path, time_limit: float) -> dict:
    """The trace's allocs and frees (no kernels) through stalloc in plan mode, stalloc without
    a plan (fallback pool only) and PyTorch's caching allocator: microseconds per event and the
    peak of reserved bytes each needed."""
    from stalloc.plan import plan as make_plan
    from stalloc.trace import ALLOC, FLAG_UNMATCHED, FREE, STEP

    trace = stalloc.load_trace(trace_path)
    ops = [(int(e["kind"]), int(e["id"]), int(e["size"]), bool(int(e["flags"]) & FLAG_UNMATCHED))
           for e in trace.events]
    counted = sum(1 for k, _, size, unmatched in ops if (k == ALLOC and size) or (k == FREE and not unmatched))
    dev = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream

    def run(alloc, free, step=None) -> float:
        live = {}
        t0 = time.perf_counter_ns()
        for kind, i, size, unmatched in ops:
            if kind == STEP:
                if step:
                    step(i)
            elif kind == ALLOC and size:
                live[i] = alloc(size)
            elif kind == FREE and not unmatched and i in live:
                free(live.pop(i))
        elapsed = time.perf_counter_ns() - t0
        for ptr in live.values():
            free(ptr)
        return elapsed / 1000.0 / max(counted, 1)

    out = {"trace": str(trace_path), "events": counted, "lower_bound": trace.summary().lower_bound}
    p = make_plan(trace, time_limit=time_limit)
    for name, with_plan in (("stalloc_plan", True), ("stalloc_no_plan", False)):
        with stalloc.Allocator(backend="cuda", device=dev) as a:
            if with_plan:
                a.load_plan(p)
            us = run(lambda n: a.alloc(n, stream=stream), a.free, a.step)
            out[name] = {"us_per_event": us, "peak_reserved": a.stats().peak_reserved_bytes}
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    us = run(lambda n: torch.cuda.caching_allocator_alloc(n, dev, stream), torch.cuda.caching_allocator_delete)
    out["torch_caching"] = {"us_per_event": us, "peak_reserved": torch.cuda.max_memory_reserved() - base}
    torch.cuda.empty_cache()
    return out


# ---- 4. latency ----

def _median_us(alloc, free, iters: int) -> float:
    for _ in range(min(20, iters)):
        free(alloc())
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        free(alloc())
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000.0


def measure_latency(a: stalloc.Allocator, iters: int) -> list[dict]:
    dev = torch.cuda.current_device()
    stream = torch.cuda.current_stream().cuda_stream
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    def driver_alloc(n):
        p = ctypes.c_uint64()
        r = cuda.cuMemAlloc_v2(ctypes.byref(p), n)
        if r:
            raise RuntimeError(f"cuMemAlloc_v2 failed with CUresult {r}")
        return p.value

    def driver_free(p):
        r = cuda.cuMemFree_v2(p)
        if r:
            raise RuntimeError(f"cuMemFree_v2 failed with CUresult {r}")

    rows = []
    for n in (512, 64 << 10, 1 << 20, 16 << 20, 256 << 20):
        slow = max(50, iters // 10)  # the uncached allocators are slow: fewer samples
        row = {"bytes": n,
               "stalloc_us": _median_us(lambda: a.alloc(n, stream=stream), a.free, iters),
               "cuMemAlloc_us": _median_us(lambda: driver_alloc(n), driver_free, slow),
               "torch_caching_us": _median_us(lambda: torch.cuda.caching_allocator_alloc(n, dev, stream),
                                              torch.cuda.caching_allocator_delete, iters)}
        if cupy is not None:
            row["cudaMalloc_cupy_us"] = _median_us(lambda: cupy.cuda.runtime.malloc(n),
                                                   cupy.cuda.runtime.free, slow)
        rows.append(row)
    torch.cuda.synchronize()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--trace", type=Path, default=REPO / "tests" / "data" / "traces" / "gpt2_plain.npz")
    ap.add_argument("--time-limit", type=float, default=1.0, help="planner search seconds")
    ap.add_argument("--iters", type=int, default=2000, help="alloc+free pairs per cached latency row")
    ap.add_argument("--sleep", type=float, default=0.2, help="seconds the kernel on stream A runs")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        _fail("torch sees no CUDA device")
    torch.cuda.set_device(args.device)
    torch.zeros(1, device="cuda")  # the primary context is current from here on

    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "stalloc": stalloc.__version__, "cupy": getattr(cupy, "__version__", None)}
    # A fresh allocator per check: what one check leaves cached must not steer the next.
    for key, check in (("data", check_data), ("streams", lambda a: check_streams(a, args.sleep)),
                       ("latency", lambda a: measure_latency(a, args.iters))):
        with stalloc.Allocator(backend="cuda", device=args.device) as a:
            result[key] = check(a)
        torch.cuda.synchronize()
    result["plan"] = check_plan(args.trace, args.time_limit)
    result["replay"] = replay_compare(args.trace, args.time_limit)
    result["ok"] = all(result[k]["ok"] for k in ("data", "streams", "plan"))

    print(f"device: {result['device']}   torch {result['torch']}   stalloc {result['stalloc']}")
    for k in ("data", "streams", "plan"):
        detail = {key: v for key, v in result[k].items() if key != "ok"}
        print(f"{k:8s} {'ok' if result[k]['ok'] else 'FAILED'}  {json.dumps(detail)}")
    cols = ["stalloc_us", "cuMemAlloc_us", "torch_caching_us"] + (["cudaMalloc_cupy_us"] if cupy else [])
    print("\nmedian alloc+free, microseconds (one Python call per op in every column)")
    print(f"{'bytes':>12} " + " ".join(f"{c:>20}" for c in cols))
    for row in result["latency"]:
        print(f"{row['bytes']:>12} " + " ".join(f"{row[c]:>20.2f}" for c in cols))
    r = result["replay"]
    print(f"\nreplay of {r['trace']} ({r['events']} allocs+frees, lower bound {r['lower_bound']} B), no kernels")
    print(f"{'allocator':>16} {'us/event':>10} {'peak reserved':>15}")
    for name in ("stalloc_plan", "stalloc_no_plan", "torch_caching"):
        print(f"{name:>16} {r[name]['us_per_event']:>10.2f} {r[name]['peak_reserved']:>15}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
