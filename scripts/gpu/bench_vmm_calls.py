"""What CUDA's virtual memory calls cost per call and per granule, on the GPU at hand: whether
one cuMemSetAccess or cuMemUnmap over a run of n granules (each its own physical allocation, as
stalloc's growable pool maps them) costs n times one granule's, and whether the driver takes
one cuMemUnmap over several mappings at all. Needs a CUDA build of PyTorch (for the context).

    python scripts/gpu/bench_vmm_calls.py [--runs 1 4 16] [--repeat 20] [--out vmm.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time


class Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int), ("loc_type", ctypes.c_int),
                ("loc_id", ctypes.c_int), ("win32", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]


class Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int), ("flags", ctypes.c_int)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # the primary context, current on this thread
    cu = ctypes.CDLL("libcuda.so.1")
    u64 = ctypes.c_uint64

    def check(r, what):
        if r != 0:
            raise RuntimeError(f"{what} failed: CUresult {r}")

    prop = Prop(type=1, handle_types=0, loc_type=1, loc_id=torch.cuda.current_device())
    gran = ctypes.c_size_t()
    check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    g = gran.value
    acc = Access(loc_type=1, loc_id=prop.loc_id, flags=3)
    biggest = max(args.runs)
    base = u64()
    check(cu.cuMemAddressReserve(ctypes.byref(base), ctypes.c_size_t(biggest * g), ctypes.c_size_t(0), u64(0),
                                 ctypes.c_ulonglong(0)), "reserve")
    handles = []
    for _ in range(biggest):
        h = ctypes.c_ulonglong()
        check(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(g), ctypes.byref(prop), ctypes.c_ulonglong(0)), "create")
        handles.append(h)

    def map_all(n):
        for i in range(n):
            check(cu.cuMemMap(u64(base.value + i * g), ctypes.c_size_t(g), ctypes.c_size_t(0), handles[i],
                              ctypes.c_ulonglong(0)), "map")

    def timed(fn):
        t0 = time.perf_counter()
        r = fn()
        return r, (time.perf_counter() - t0) * 1e6

    rows, range_unmap = [], None
    for n in args.runs:
        acc_one, acc_run, un_one, un_run = [], [], [], []
        for _ in range(args.repeat):
            map_all(n)  # access granule by granule, then unmap granule by granule
            for i in range(n):
                r, us = timed(lambda i=i: cu.cuMemSetAccess(u64(base.value + i * g), ctypes.c_size_t(g),
                                                            ctypes.byref(acc), ctypes.c_size_t(1)))
                check(r, "setaccess")
                acc_one.append(us)
            for i in range(n):
                r, us = timed(lambda i=i: cu.cuMemUnmap(u64(base.value + i * g), ctypes.c_size_t(g)))
                check(r, "unmap")
                un_one.append(us)
            map_all(n)  # access for the run at once, then one unmap over the run
            r, us = timed(lambda n=n: cu.cuMemSetAccess(base, ctypes.c_size_t(n * g), ctypes.byref(acc),
                                                        ctypes.c_size_t(1)))
            check(r, "setaccess run")
            acc_run.append(us)
            r, us = timed(lambda n=n: cu.cuMemUnmap(base, ctypes.c_size_t(n * g)))
            if r != 0:  # the driver refuses an unmap over several mappings: one by one
                range_unmap = f"refused with CUresult {r} for {n} mappings"
                for i in range(n):
                    check(cu.cuMemUnmap(u64(base.value + i * g), ctypes.c_size_t(g)), "unmap")
            else:
                un_run.append(us)
                if n > 1 and range_unmap is None:
                    range_unmap = "accepted"
        row = {"granules": n, "setaccess_each_us": statistics.median(acc_one),
               "setaccess_run_us": statistics.median(acc_run), "unmap_each_us": statistics.median(un_one),
               "unmap_run_us": statistics.median(un_run) if un_run else None}
        rows.append(row)
        print(row, flush=True)
    for h in handles:
        cu.cuMemRelease(h)
    cu.cuMemAddressFree(base, ctypes.c_size_t(biggest * g))
    out = {"gpu": torch.cuda.get_device_name(), "granularity": g, "range_unmap": range_unmap, "rows": rows}
    print(json.dumps(out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
