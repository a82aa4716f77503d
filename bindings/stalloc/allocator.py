"""The allocator: alloc and free through libstalloc, statistics, steps and record mode."""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass

from ._handle import OwnedHandle
from ._lib import ffi, lib
from .errors import InvalidArgumentError, check
from .replay import plan_record

_U64_END = 1 << 64


def u64(name: str, value) -> int:
    """value as an int in [0, 2**64), or InvalidArgumentError naming it: C would take such a
    pointer or size modulo 2**64 (a.free(p + 2**64) freed p)."""
    v = operator.index(value)
    if not 0 <= v < _U64_END:
        raise InvalidArgumentError(f"{name} {v} is out of range (0 <= {name} < 2**64)")
    return v


def _ptr(name: str, value):
    return ffi.cast("void*", u64(name, value))

__all__ = ["BACKENDS", "Stats", "make_options", "Allocator"]

BACKENDS = ("host", "virtual", "cuda")


@dataclass(frozen=True)
class Stats:
    """A snapshot of ``stalloc_stats_t``. ``allocated`` counts requested bytes of live blocks;
    ``reserved`` counts bytes held from the backend."""

    allocated_bytes: int
    peak_allocated_bytes: int
    reserved_bytes: int
    peak_reserved_bytes: int
    active_blocks: int
    peak_active_blocks: int
    alloc_count: int
    free_count: int
    failed_allocs: int
    segment_count: int
    backend_allocs: int
    backend_frees: int
    plan_hits: int
    plan_misses: int
    resyncs: int
    dynamic_allocs: int
    fallback_allocs: int
    steps: int
    deferred_frees: int = 0
    memory_limit: int = 0
    hinted_allocs: int = 0

    @property
    def fragmentation(self) -> float:
        """1 - peak allocated / peak reserved (0 when nothing was reserved)."""
        if not self.peak_reserved_bytes:
            return 0.0
        return 1.0 - self.peak_allocated_bytes / self.peak_reserved_bytes

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["fragmentation"] = self.fragmentation
        return d


def _backend_kind(name: str) -> int:
    kind = ffi.new("stalloc_backend_kind_t*")
    check(lib.stalloc_backend_parse(name.encode(), kind))
    return kind[0]


def make_options(backend: str | None = None, device: int | None = None,
                 alignment: int | None = None, memory_limit: int | None = None,
                 virtual_capacity: int | None = None, tiny_alignment: int | None = None,
                 growable_pool: bool | None = None, virtual_lag: int | None = None):
    """A ``stalloc_options_t*`` with the library defaults, overridden by every argument that
    is not None."""
    opts = ffi.new("stalloc_options_t*")
    lib.stalloc_options_init(opts)
    if backend is not None:
        opts.backend = _backend_kind(backend)
    for name, value in (("device", device), ("alignment", alignment),
                        ("memory_limit", memory_limit), ("virtual_capacity", virtual_capacity),
                        ("tiny_alignment", tiny_alignment),
                        ("growable_pool", None if growable_pool is None else int(bool(growable_pool))),
                        ("virtual_lag", virtual_lag)):
        if value is not None:
            if name == "virtual_lag" and not 0 <= value < 2**31:
                raise ValueError(f"virtual_lag must be in [0, 2**31), not {value}")
            setattr(opts, name, value if name in ("device", "growable_pool", "virtual_lag") else u64(name, value))
    return opts


class Allocator(OwnedHandle):
    """A libstalloc allocator. Every argument left as None keeps the library default (which
    ``STALLOC_<NAME>`` environment variables may override; see docs/options.md).

    >>> with Allocator(backend="host") as a:
    ...     p = a.alloc(1024)
    ...     a.free(p)
    """

    def __init__(self, backend: str | None = None, device: int | None = None,
                 alignment: int | None = None, memory_limit: int | None = None,
                 virtual_capacity: int | None = None, record_path=None,
                 tiny_alignment: int | None = None, growable_pool: bool | None = None,
                 virtual_lag: int | None = None):
        opts = make_options(backend, device, alignment, memory_limit, virtual_capacity, tiny_alignment,
                            growable_pool, virtual_lag)
        keep = None
        if record_path is not None:
            keep = ffi.new("char[]", os.fsencode(os.fspath(record_path)))
            opts.record_path = keep
        out = ffi.new("stalloc_allocator_t**")
        check(lib.stalloc_allocator_create(opts, out))
        self._handle = out[0]
        self.device = int(opts.device)
        self.backend = ffi.string(lib.stalloc_backend_name(opts.backend)).decode()

    def _h(self):
        if self._handle is None:
            raise ValueError("allocator is closed")
        return self._handle

    def alloc(self, size: int, stream: int = 0) -> int:
        """Allocates size bytes; returns the address as an int (0 for size 0)."""
        out = ffi.new("void**")
        check(lib.stalloc_allocator_alloc(self._h(), u64("size", size), self.device,
                                          u64("stream", stream), out))
        return int(ffi.cast("uintptr_t", out[0]))

    def free(self, ptr: int, size: int | None = None, stream: int | None = None) -> None:
        """Frees ptr; with size (and stream), the sized form that checks the size."""
        p = _ptr("pointer", ptr)
        if size is None:
            check(lib.stalloc_allocator_free(self._h(), p))
        else:
            check(lib.stalloc_allocator_free_sized(self._h(), p, u64("size", size), self.device,
                                                   u64("stream", stream or 0)))

    def block_size(self, ptr: int) -> int:
        out = ffi.new("size_t*")
        check(lib.stalloc_allocator_block_size(self._h(), _ptr("pointer", ptr), out))
        return out[0]

    def buffer(self, ptr: int, size: int):
        """A writable memoryview over the first size bytes of the live block at ptr (host
        backend only). The view is valid until that block is freed or the allocator closed."""
        self._h()
        if self.backend != "host":
            raise ValueError(f"the {self.backend} backend's memory is not readable from Python")
        ptr, size = u64("pointer", ptr), u64("size", size)
        if ptr == 0 and size == 0:
            return memoryview(bytearray())  # what alloc(0) gives
        block = self.block_size(ptr)  # UnknownPointerError unless a live block starts at ptr
        if size > block:
            raise InvalidArgumentError(
                f"buffer: {size} bytes at {ptr:#x} run past its live block of {block} bytes")
        return memoryview(ffi.buffer(ffi.cast("char*", ptr), size))

    def stats(self) -> Stats:
        s = ffi.new("stalloc_stats_t*")
        lib.stalloc_stats_init(s)
        check(lib.stalloc_allocator_stats(self._h(), s))
        return Stats(**{f: int(getattr(s, f)) for f in Stats.__dataclass_fields__})

    def reset_peaks(self) -> None:
        check(lib.stalloc_allocator_reset_peaks(self._h()))

    def record_stream(self, ptr: int, stream: int) -> None:
        """The block is also used on ``stream``: once freed, nobody reuses it before that
        stream's work queued up to the free is done."""
        check(lib.stalloc_allocator_record_stream(self._h(), _ptr("pointer", ptr), u64("stream", stream)))

    def set_memory_limit(self, limit: int) -> None:
        """Most bytes this allocator may reserve from now on (0: no limit)."""
        check(lib.stalloc_allocator_set_memory_limit(self._h(), u64("limit", limit)))

    def device_memory(self) -> int:
        """Total memory of the allocator's device (GPU memory, host RAM, the virtual range)."""
        total = ffi.new("uint64_t*")
        check(lib.stalloc_allocator_device_memory(self._h(), total))
        return int(total[0])

    def release_cached(self) -> None:
        check(lib.stalloc_allocator_release_cached(self._h()))

    def load_plan(self, plan) -> None:
        """Switches to plan mode (a stalloc.Plan; the library keeps its own copy). Blocks
        already live stay where they are."""
        check(lib.stalloc_allocator_load_plan(self._h(), plan._handle))

    def step(self, n: int) -> None:
        """Marks the start of training step n."""
        check(lib.stalloc_allocator_step_begin(self._h(), u64("step", n)))

    def online_start(self, **params) -> None:
        """Starts the online lifecycle (docs/online.md): record the first steps, plan them in the
        background, switch at a step boundary (or decline), re-plan or drop a plan on drift.
        ``params``: stalloc_online_params_t fields (record_steps, replan_steps, time_limit,
        replan_miss_share, replan_after, wait_for_plan, layout_hints, pool_fit_candidates,
        pool_at_ends_after); the rest
        keep the library defaults."""
        p = ffi.new("stalloc_online_params_t*")
        lib.stalloc_online_params_init(p)
        for k, v in params.items():
            if k == "struct_size" or not hasattr(p, k):
                raise ValueError(f"unknown online parameter {k!r}")
            setattr(p, k, v)
        check(lib.stalloc_allocator_online_start(self._h(), p))

    ONLINE_STATES = {0: "off", 1: "recording", 2: "planning", 3: "serving", 4: "pool"}

    def online_info(self) -> dict:
        """The lifecycle's state (off, recording, planning, serving, pool), plans switched to,
        step boundaries seen, plans made, whether steps are being recorded, and how many kinds
        of step (training, evaluation: steps with the same number of allocs) a plan serves."""
        info = ffi.new("stalloc_online_info_t*")
        lib.stalloc_online_info_init(info)
        check(lib.stalloc_allocator_online_info(self._h(), info))
        return {"state": self.ONLINE_STATES.get(int(info.state), str(int(info.state))),
                "plans_switched": int(info.plans_switched), "steps": int(info.steps),
                "plan_records": int(info.plan_records), "recording": bool(info.recording),
                "step_kinds": int(info.step_kinds), "hint_layouts": int(info.hint_layouts),
                "hint_layouts_kept": int(info.hint_layouts_kept),
                "hint_seconds_max": float(info.hint_seconds_max),
                "hint_seconds_total": float(info.hint_seconds_total)}

    def online_plans(self) -> list[dict]:
        """The plans the lifecycle made, oldest first, as ``stalloc replay --online --json``
        reports them: when planning began and when the plan was switched to (None: never), its
        pool size, planning time, status (0: used; else why not, see stalloc.errors) and
        whether it was declined (its pool plus what lives outside it would have passed the
        most the growable pool reserved)."""
        count = ffi.new("size_t*")
        check(lib.stalloc_allocator_online_plans(self._h(), ffi.NULL, 0, count))
        n = int(count[0])
        records = ffi.new("stalloc_online_plan_record_t[]", max(n, 1))
        check(lib.stalloc_allocator_online_plans(self._h(), records, n, count))
        out = []
        for i in range(min(n, int(count[0]))):
            r = plan_record(records[i])
            if r["switched_step"] == 2**64 - 1:
                r["switched_step"] = None
            out.append(r)
        return out

    def record_start(self, path) -> None:
        check(lib.stalloc_allocator_record_start(self._h(), os.fsencode(os.fspath(path))))

    def record_stop(self) -> None:
        check(lib.stalloc_allocator_record_stop(self._h()))

    @staticmethod
    def _release(handle) -> int:
        return lib.stalloc_allocator_destroy(handle)

    def close(self) -> None:
        """Frees every live block and returns all memory; finishes a recording."""
        super().close()
