"""stalloc as PyTorch's CUDA allocator, in one line:

    import torch
    from stalloc.integrations import torch_backend
    torch_backend.enable()                 # before the first CUDA tensor

libstalloc serves every CUDA allocation through ``CUDAPluggableAllocator``, pointed at the
plug library beside the libstalloc the ``stalloc`` package loaded and at its exports with
PyTorch's exact signatures (``stalloc_torch_shim_malloc``/``stalloc_torch_free``). The first
``record_steps`` optimizer steps are recorded, planned in the background and switched to at a
step boundary (stalloc.session). With ``plan_path`` the plan is saved (unless the recorded
steps changed shape: then the next run is served online too), and reused by the next run when
it still fits. Under torch.distributed each rank keeps its own plan (``rank<R>.stplan``).

Every hook PyTorch's allocator object offers is registered (:func:`register_hooks`):
``Tensor.record_stream`` keeps a block from reuse until the recorded streams are done,
``torch.cuda.empty_cache()`` returns stalloc's cached segments,
``torch.cuda.set_per_process_memory_fraction()`` sets stalloc's memory limit (through the hook
and again directly, :func:`route_memory_fraction`). With
``patch_torch_stats`` (the default) ``torch.cuda.memory_stats()`` and its family answer with
stalloc's figures (:func:`patch_torch_stats`). The malloc PyTorch calls throws where stalloc has
no block (a NULL would become a tensor at address 0, :func:`plug_library`): where
libstalloc_torch.so was built against this PyTorch, an out-of-memory reaches Python as
``torch.cuda.OutOfMemoryError`` with stalloc's message, elsewhere as a RuntimeError with it, which
:func:`oom_guard` turns into the typed error. CUDA graph
capture (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``) is refused with a
message naming the setting that avoids it (:func:`refuse_capture`).
On a CPU-only PyTorch, :func:`enable` explains what is missing; :func:`record` (the profiler
route) still records traces.
"""

from __future__ import annotations

import atexit
import collections.abc
import contextlib
import ctypes
import os
import warnings

from .. import capture
from .._lib import ffi, lib, library_path
from ..allocator import Allocator
from ..errors import OutOfMemoryError
from ..session import PlanSession, check_record_steps, online_params

__all__ = [
    "cuda_unavailable_reason", "enable", "step", "state", "save_plan", "empty_cache",
    "memory_stats", "memory_summary", "last_error", "oom_guard", "record",
]

_allocators: dict[int, Allocator] = {}
_sessions: dict[int, PlanSession] = {}
_hook = None
_patched: dict = {}  # (owner, name) -> the original, for what patch_torch_stats/refuse_capture replaced


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("stalloc.integrations.torch_backend needs PyTorch: pip install torch") from e
    return torch


def _rank() -> int:
    torch = _torch()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def cuda_unavailable_reason() -> str | None:
    """Why stalloc cannot serve PyTorch's CUDA memory here, or None when it can."""
    torch = _torch()
    if torch.version.cuda is None:
        return (f"this PyTorch ({torch.__version__}) is a CPU-only build: stalloc's PyTorch "
                "allocator needs a CUDA build of PyTorch and an NVIDIA GPU. To record traces on "
                "this machine use torch_backend.record(path) or `stalloc record`.")
    if not torch.cuda.is_available():
        return ("PyTorch was built with CUDA but sees no GPU (torch.cuda.is_available() is False); "
                "stalloc's PyTorch allocator needs one.")
    return None


def enable(record_steps: int = 3, plan_path=None, memory_limit: int | None = None,
           time_limit: float = 2.0, hook_optimizer: bool = True, devices=None,
           backend: str = "cuda", patch_torch_stats: bool = True,
           online: bool | collections.abc.Mapping = True) -> None:
    """Installs libstalloc as PyTorch's CUDA allocator. Call it right after ``import torch``,
    before any CUDA tensor exists (PyTorch refuses to change allocators later).

    record_steps: steps recorded before planning (the first is warm-up).
    plan_path: a plan file or directory (one file per rank) to save and reuse plans.
    memory_limit: most bytes stalloc may reserve per device.
    hook_optimizer: mark steps from every optimizer.step(); else call :func:`step` yourself.
    patch_torch_stats: route torch.cuda.memory_stats() and its family to stalloc's figures
    (undone by :func:`disable`).
    online: the run's plans come from libstalloc's online lifecycle (docs/online.md), the code
    `stalloc replay --online` drives: a growable pool serves until a plan made from repeated
    steps needs less, shapes that change are served by the pool, a plan that stops fitting is
    dropped. False: the Python session records, plans and switches once (stalloc.session). A
    dict: online, with these online parameters (docs/online.md), e.g.
    ``{"pool_fit_candidates": 1}`` for best fit alone once the growable pool serves for good.
    """
    global _hook
    torch = _torch()
    _check_arguments(record_steps, time_limit, online)
    reason = cuda_unavailable_reason()
    if reason:
        raise RuntimeError(f"stalloc: {reason}")
    if _allocators:
        raise RuntimeError("stalloc: torch_backend.enable() was already called")
    plug = _plug()  # before anything changes: it may refuse; loaded once, here
    devices = list(range(torch.cuda.device_count())) if devices is None else list(devices)
    for d in devices:
        a = Allocator(backend=backend, device=d, memory_limit=memory_limit)
        _allocators[d] = a
        lib.stalloc_torch_register(d, a._h())
    atexit.register(_at_exit)
    pluggable = torch.cuda.memory.CUDAPluggableAllocator(plug._name, PLUG_MALLOC, "stalloc_torch_free")
    register_hooks(pluggable.allocator(), plug)
    torch.cuda.memory.change_current_allocator(pluggable)
    refuse_capture()
    route_memory_fraction()
    if patch_torch_stats:
        globals()["patch_torch_stats"]()
    rank = _rank()
    for d, a in _allocators.items():
        _sessions[d] = PlanSession(a, record_steps=record_steps, plan_path=_device_path(plan_path, d),
                                   rank=rank, time_limit=time_limit, online=online)
    if hook_optimizer:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _hook = register_optimizer_step_post_hook(lambda opt, args, kwargs: step())


def _check_arguments(record_steps, time_limit, online) -> None:
    """Bad arguments fail here, before PyTorch's allocator changes: it cannot change back, and a
    second enable() would be refused. The online lifecycle checks them as the session will pass
    them (session.online_params)."""
    if not online:
        check_record_steps(record_steps)
        if not time_limit >= 0:
            raise ValueError(f"stalloc: time_limit must be at least 0 (got {time_limit})")
        return
    probe = Allocator(backend="virtual")
    try:
        probe.online_start(**online_params(record_steps, time_limit, online))
    finally:
        probe.close()


def _at_exit() -> None:
    """At interpreter exit: finishes any recording (STALLOC_RECORD_PATH), and keeps each
    allocator alive. PyTorch frees tensors after Python's modules are torn down; an allocator
    collected with its module before that would be freed under those frees, so it is left for
    the process's end to reclaim, as PyTorch leaves its own caching allocator."""
    for a in _allocators.values():
        with contextlib.suppress(Exception):
            a.record_stop()
        a._handle = None  # never destroyed now: Allocator.__del__ finds no handle


def _device_path(plan_path, device: int):
    """One plan per rank and device; a single device keeps the plain per-rank name."""
    if plan_path is None or len(_allocators) == 1:
        return plan_path
    return os.path.join(os.fspath(plan_path), f"device{device}")


def step() -> None:
    """Marks the end of a training step (the optimizer hook does this unless disabled)."""
    for s in _sessions.values():
        s.step()


def state() -> dict:
    """Per device: the session's state (recording, planning, planned, failed), plan source, the
    plan file for the next run (``saved_plan_file`` once written, else ``save_skipped`` says
    why none was), the online lifecycle's plans (Allocator.online_plans: whether each was used,
    and why not), how many kinds of step (training, evaluation) a plan of their own serves, and
    the growable pool's layout hints (layouts made and kept, requests they placed:
    docs/online.md)."""
    out = {}
    for d, s in _sessions.items():
        info = s.allocator.online_info()
        out[d] = {"state": s.state, "steps": s.steps, "plan_source": s.plan_source,
                  "plan_file": s.plan_file, "saved_plan_file": s.saved_plan_file,
                  "save_skipped": s.save_skipped, "plans": s.allocator.online_plans(),
                  "step_kinds": info["step_kinds"],
                  "layout_hints": {"layouts": info["hint_layouts"], "kept": info["hint_layouts_kept"],
                                   "placed": s.allocator.stats().hinted_allocs}}
    return out


def save_plan(path, device: int | None = None) -> None:
    """Saves the plan in use for a device (default: the current one) to path."""
    _session(device).save_plan(path)


def _session(device):
    if not _sessions:
        raise RuntimeError("stalloc: torch_backend.enable() has not been called")
    if device is None:
        device = _torch().cuda.current_device()
    return _sessions[device]


def empty_cache() -> None:
    """Returns stalloc's cached, unused fallback segments to the driver."""
    for a in _allocators.values():
        a.release_cached()


def memory_stats(device: int | None = None) -> dict:
    """What stalloc knows, under the key names of ``torch.cuda.memory_stats()``."""
    s = _session(device).allocator.stats()
    out = {
        "allocated_bytes.all.current": s.allocated_bytes,
        "allocated_bytes.all.peak": s.peak_allocated_bytes,
        "reserved_bytes.all.current": s.reserved_bytes,
        "reserved_bytes.all.peak": s.peak_reserved_bytes,
        "active.all.current": s.active_blocks,
        "active.all.peak": s.peak_active_blocks,
        "allocation.all.allocated": s.alloc_count,
        "allocation.all.freed": s.free_count,
        "active_bytes.all.current": s.allocated_bytes,
        "active_bytes.all.peak": s.peak_allocated_bytes,
        "requested_bytes.all.current": s.allocated_bytes,
        "requested_bytes.all.peak": s.peak_allocated_bytes,
        "allocation.all.current": s.active_blocks,
        "allocation.all.peak": s.peak_active_blocks,
        "segment.all.current": s.segment_count,
        "num_ooms": s.failed_allocs,
        # stalloc gives cached segments back and retries inside one alloc, uncounted; what
        # PyTorch counts here (retries after a failed cudaMalloc) has no other figure in stalloc.
        "num_alloc_retries": 0,
        "num_device_alloc": s.backend_allocs,
        "num_device_free": s.backend_frees,
    }
    out.update({f"stalloc.{k}": v for k, v in s.as_dict().items()})
    out["stalloc.failed_frees"] = int(lib.stalloc_torch_failed_frees())
    return out


def memory_summary(device: int | None = None) -> str:
    """A short human-readable report, like ``torch.cuda.memory_summary()``."""
    sess = _session(device)
    s = sess.allocator.stats()
    mib = 1 << 20
    lines = [
        f"stalloc memory summary (device {sess.allocator.device}, state {sess.state})",
        f"  allocated  {s.allocated_bytes / mib:10.1f} MiB   peak {s.peak_allocated_bytes / mib:10.1f} MiB",
        f"  reserved   {s.reserved_bytes / mib:10.1f} MiB   peak {s.peak_reserved_bytes / mib:10.1f} MiB",
        f"  fragmentation (1 - peak allocated / peak reserved): {s.fragmentation:.2%}",
        f"  plan hits {s.plan_hits:,}  misses {s.plan_misses:,}  resyncs {s.resyncs:,}  "
        f"dynamic {s.dynamic_allocs:,}  fallback {s.fallback_allocs:,}  hinted {s.hinted_allocs:,}",
    ]
    if sess.plan is not None:
        info = sess.plan.info()
        lines.append(f"  plan: pool {info.pool_size / mib:.1f} MiB, ratio to lower bound "
                     f"{info.ratio:.4f} ({sess.plan_source})")
    return "\n".join(lines)


def last_error() -> str:
    """Why the last allocation or free from PyTorch failed; "" if none did."""
    return ffi.string(lib.stalloc_torch_last_error(ffi.NULL)).decode("utf-8", "replace")


_oom_classes: dict = {}


def _oom_class(torch):
    """An error that is both torch.cuda.OutOfMemoryError and stalloc.OutOfMemoryError."""
    if torch not in _oom_classes:
        _oom_classes[torch] = type("OutOfMemoryError", (torch.cuda.OutOfMemoryError, OutOfMemoryError),
                                   {"__module__": __name__})
    return _oom_classes[torch]


@contextlib.contextmanager
def oom_guard():
    """Turns PyTorch's out-of-memory error (or the generic error a NULL from the plain C
    malloc gives) into one that is both torch.cuda.OutOfMemoryError and
    stalloc.OutOfMemoryError (a MemoryError) and says how much was asked, allocated, reserved
    and planned."""
    torch = _torch()
    try:
        yield
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if "out of memory" not in str(e).lower() and not isinstance(e, torch.OutOfMemoryError):
            raise
        # libstalloc's message names the bytes asked, allocated, reserved and planned.
        raise _oom_class(torch)(f"stalloc: {last_error() or e}") from e


def disable() -> None:
    """Undoes what enable() patched in PyTorch (memory functions, capture refusal, the memory
    fraction) and stops
    marking steps from the optimizer. PyTorch cannot change its allocator back once it has
    served memory, so stalloc keeps serving the process."""
    global _hook
    restore_torch()
    if _hook is not None:
        _hook.remove()
        _hook = None


# ---- PyTorch's allocator hooks -------------------------------------------------------------

# The C++ halves of the plug (libstalloc/src/interop/torch_shim.cpp), best first: their malloc
# throws where libstalloc's returns NULL, which PyTorch would take as a tensor at address 0.
TYPED_PLUG = "libstalloc_torch.so"  # c10::OutOfMemoryError: torch.cuda.OutOfMemoryError
GENERIC_PLUG = "libstalloc_torch_generic.so"  # std::runtime_error: RuntimeError, any PyTorch
PLUG_MALLOC = "stalloc_torch_shim_malloc"  # exported by both
_warned_typed = False


def _plug_path(name: str) -> str | None:
    """A plug library beside libstalloc.so, where it was built."""
    path = os.path.join(os.path.dirname(library_path), name)
    return path if os.path.isfile(path) else None


def _load_plug(name: str):
    """(the loaded library, None), or (None, why it is not there)."""
    path = _plug_path(name)
    if path is None:
        return None, f"{name} was not built"
    _torch()  # libstalloc_torch links PyTorch's libc10: torch is loaded first
    try:
        return ctypes.CDLL(path), None
    except OSError as e:
        return None, str(e)


def _plug():
    """The plug library whose malloc CUDAPluggableAllocator calls: libstalloc_torch where it
    loads, else libstalloc_torch_generic. Warns once when libstalloc_torch was built but does not
    load (built against another PyTorch); raises RuntimeError when neither loads."""
    global _warned_typed
    typed, why_typed = _load_plug(TYPED_PLUG)
    if typed is not None:
        return typed
    if _plug_path(TYPED_PLUG) and not _warned_typed:
        _warned_typed = True
        warnings.warn(f"stalloc: {TYPED_PLUG} does not load against this PyTorch ({why_typed}); "
                      "an out-of-memory is raised as RuntimeError rather than "
                      "torch.cuda.OutOfMemoryError (torch_backend.oom_guard() turns it into one). "
                      "Rebuilding stalloc against this PyTorch restores it: pip install "
                      "--no-build-isolation --no-binary stalloc stalloc", RuntimeWarning,
                      stacklevel=3)  # _plug, the public function calling it: that one's caller
    generic, why_generic = _load_plug(GENERIC_PLUG)
    if generic is not None:
        return generic
    raise RuntimeError(f"stalloc: neither {TYPED_PLUG} ({why_typed}) nor {GENERIC_PLUG} "
                       f"({why_generic}) loads, and PyTorch takes a failed allocation from a "
                       "malloc that cannot throw as a tensor at address 0; rebuild stalloc where "
                       "a C++ compiler is found")


def plug_library() -> tuple[str, str]:
    """The library and malloc that CUDAPluggableAllocator loads (:func:`_plug`). Its malloc
    throws where stalloc has no block; both libraries export stalloc_torch_free too (through
    their dependency on libstalloc)."""
    return _plug()._name, PLUG_MALLOC


def _address(fn) -> int:
    return int(ffi.cast("uintptr_t", fn))


def hook_addresses(plug=None) -> dict[str, int]:
    """Setter name on ``CUDAPluggableAllocator(...).allocator()`` -> the C function's address,
    each with the signature PyTorch's CUDAPluggableAllocator.h gives that hook. ``plug``: the
    plug library already loaded (:func:`_plug`), else it is loaded here."""
    out = {
        "set_init_fn": _address(lib.stalloc_torch_init),
        "set_reset_fn": _address(lib.stalloc_torch_reset),
        "set_memory_fraction_fn": _address(lib.stalloc_torch_set_memory_fraction),
        "set_base_alloc_fn": _address(lib.stalloc_torch_base_alloc),
        "set_record_stream_fn": _address(lib.stalloc_torch_record_stream),
    }
    # Capture into a private pool is refused where it begins; with no pool ever begun,
    # set_end_allocate_to_pool_fn and set_release_pool have nothing to act on.
    out["set_begin_allocate_to_pool"] = ctypes.cast(
        (plug or _plug()).stalloc_torch_shim_begin_allocate_to_pool, ctypes.c_void_p).value
    return out


def register_hooks(allocator_object, plug=None) -> list[str]:
    """Registers every hook the running PyTorch offers (found with hasattr, since the setters
    are missing from PyTorch's type stubs) on the object CUDAPluggableAllocator(...).allocator()
    returns (``plug``: as :func:`hook_addresses`); gives the setters called."""
    done = []
    for setter, address in hook_addresses(plug).items():
        if hasattr(allocator_object, setter):
            getattr(allocator_object, setter)(address)
            done.append(setter)
    return done


# ---- PyTorch's own memory functions --------------------------------------------------------

_STATS_FUNCTIONS = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated",
                    "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                    "reset_peak_memory_stats", "reset_max_memory_allocated", "memory_summary")


def _device_index(device) -> int:
    torch = _torch()
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def _replacement(name):
    def stats(device=None):
        return memory_stats(_device_index(device))

    def nested(device=None):
        out: dict = {}
        for key, value in stats(device).items():
            node = out
            *path, leaf = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = value
        return out

    def reset(device=None):
        _session(_device_index(device)).allocator.reset_peaks()

    table = {
        "memory_stats": stats,
        "memory_stats_as_nested_dict": nested,
        "memory_allocated": lambda device=None: stats(device)["allocated_bytes.all.current"],
        "max_memory_allocated": lambda device=None: stats(device)["allocated_bytes.all.peak"],
        "memory_reserved": lambda device=None: stats(device)["reserved_bytes.all.current"],
        "max_memory_reserved": lambda device=None: stats(device)["reserved_bytes.all.peak"],
        "reset_peak_memory_stats": reset,
        "reset_max_memory_allocated": reset,
        "memory_summary": lambda device=None, abbreviated=False: memory_summary(_device_index(device)),
    }
    fn = table[name]
    fn.__name__ = name
    fn.__doc__ = f"stalloc's figures in place of torch.cuda.{name} (stalloc torch_backend)."
    return fn


def _replace(owner, name, new) -> None:
    if (owner, name) not in _patched and hasattr(owner, name):
        _patched[(owner, name)] = getattr(owner, name)
        setattr(owner, name, new)


def patch_torch_stats() -> None:
    """Routes torch.cuda.memory_stats(), memory_allocated(), max_memory_allocated(),
    memory_reserved(), max_memory_reserved(), reset_peak_memory_stats(), memory_summary() (in
    torch.cuda and torch.cuda.memory) to stalloc's figures under PyTorch's key names; under a
    pluggable allocator PyTorch's own raise or return nothing (pytorch#133281)."""
    torch = _torch()
    for name in _STATS_FUNCTIONS:
        new = _replacement(name)
        for owner in (torch.cuda, torch.cuda.memory):
            _replace(owner, name, new)


def route_memory_fraction() -> None:
    """torch.cuda.set_per_process_memory_fraction() also sets stalloc's memory limit itself,
    after PyTorch's own checks of its arguments: the registered hook is all PyTorch promises,
    and on an H200 with PyTorch 2.11 a 5% request went through a 2% fraction (docs/gpu-sessions.md,
    sixth session). Setting the limit twice sets the same limit. get_per_process_memory_fraction(),
    which a pluggable allocator does not answer, gives stalloc's limit over the device's memory."""
    torch = _torch()

    def get_fraction(device=None):
        a = _session(_device_index(device)).allocator
        limit = a.stats().memory_limit
        return min(1.0, limit / a.device_memory()) if limit else 1.0

    get_fraction.__name__ = "get_per_process_memory_fraction"
    for owner in (torch.cuda, torch.cuda.memory):
        original = getattr(owner, "set_per_process_memory_fraction", None)
        if original is None or (owner, "set_per_process_memory_fraction") in _patched:
            continue

        def set_fraction(fraction, device=None, _original=original):
            _original(fraction, device)
            lib.stalloc_torch_set_memory_fraction(float(fraction), _device_index(device))

        set_fraction.__name__ = "set_per_process_memory_fraction"
        set_fraction.__doc__ = original.__doc__
        _replace(owner, "set_per_process_memory_fraction", set_fraction)
        _replace(owner, "get_per_process_memory_fraction", get_fraction)


def refuse_capture() -> None:
    """CUDA graph capture (torch.cuda.graph, make_graphed_callables, torch.compile's
    reduce-overhead mode) needs a private memory pool that stalloc does not provide: starting
    one raises RuntimeError naming the settings that avoid it, before anything is captured."""
    torch = _torch()

    def capture_begin(self, *args, **kwargs):
        raise RuntimeError(CAPTURE_MESSAGE)

    _replace(torch.cuda.graphs.CUDAGraph, "capture_begin", capture_begin)


CAPTURE_MESSAGE = (
    "stalloc does not serve CUDA graph capture: torch.cuda.graph and "
    "torch.compile(mode=\"reduce-overhead\") need a private memory pool, which stalloc's PyTorch "
    "allocator does not provide. Use torch.compile(mode=\"max-autotune-no-cudagraphs\") or "
    "mode=\"default\", or set torch._inductor.config.triton.cudagraphs = False.")


def restore_torch() -> None:
    """Puts back every PyTorch function patch_torch_stats, refuse_capture or
    route_memory_fraction replaced."""
    while _patched:
        (owner, name), original = _patched.popitem()
        setattr(owner, name, original)


def record(path, steps: int | None = None):
    """Records PyTorch allocations through the profiler (works on CPU-only PyTorch too)."""
    return capture.record(path, steps=steps)
