"""Reads driver_timer.so's counts (driver_timer.c: calls and time of each CUDA driver entry
point stalloc's cuda backend used) when STALLOC_CUDA_DRIVER points at it; a no-op otherwise."""

from __future__ import annotations

import ctypes
import json
import os
import statistics


def _lib():
    path = os.environ.get("STALLOC_CUDA_DRIVER", "")
    if not path.endswith("driver_timer.so"):
        return None
    lib = ctypes.CDLL(path)  # the handle the backend already holds
    lib.driver_timer_read.restype = ctypes.c_int
    lib.driver_timer_read.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
    return lib


def steady_start(steps: int) -> int:
    """The first step the checks count as steady state (their median step time's too)."""
    return min(5, steps - 1)


def step_times(steps: int, times: list, loops: list) -> dict:
    """The steady steps' median time (the training step alone) and mean loop time (each step
    with its eval pass, where there is one: a cost paid only around the passes, the pool's moves
    as the shapes change, shows there, not in the median)."""
    start = steady_start(steps)
    return {"median_step_s": statistics.median(times[start:]), "mean_loop_s": statistics.fmean(loops[start:])}


def steady_figures(steps: int, allocs_then: int, allocs_now: int) -> dict:
    """Granules newly mapped (moves not counted) per steady step and the timed driver calls since
    steady_start (reset())."""
    n = steps - steady_start(steps)
    return {"steady_steps": n, "device_allocs_per_step": (allocs_now - allocs_then) / n,
            "driver_calls": read()}


def reset() -> None:
    lib = _lib()
    if lib is not None:
        lib.driver_timer_reset()


def read() -> dict | None:
    """{entry point: [calls, nanoseconds]} since the last reset, or None without the timer."""
    lib = _lib()
    if lib is None:
        return None
    buf = ctypes.create_string_buffer(1 << 14)
    lib.driver_timer_read(buf, len(buf))
    return json.loads(buf.value.decode())


def summary(r: dict) -> str:
    """Granules newly mapped and driver time per steady step (driver_timer.so, where it was used).
    A granule the pool moves keeps its memory (no new allocation): the moves are the
    cuMemUnmap calls in the driver figures, not this count."""
    out = f"{r['device_allocs_per_step']:.1f} new granules/step"
    calls = r.get("driver_calls")
    if calls:
        n = r["steady_steps"]
        total = sum(ns for _, ns in calls.values()) / n / 1e6
        top = sorted(calls.items(), key=lambda kv: -kv[1][1])[:4]
        out += f", driver {total:.2f} ms/step: " + ", ".join(
            f"{k} {c / n:.0f}x {ns / n / 1e6:.2f} ms" for k, (c, ns) in top)
    return out
