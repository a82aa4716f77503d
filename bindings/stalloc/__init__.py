"""stalloc: a spatio-temporal GPU memory allocator for deep-learning training.

Record a run's allocations, plan every tensor's address offline, and serve the real run from
the plan. This package wraps libstalloc (one shared library, loaded once, through cffi).
"""

from __future__ import annotations

from importlib import resources

from ._lib import ffi, lib, library_path
from .allocator import Allocator, Stats
from .errors import (
    BackendError, BadFormatError, CancelledError, DoubleFreeError, ForeignPlanWarning, InternalError,
    InvalidArgumentError, NoDeviceError, OutOfMemoryError, PlanMismatchError, StallocError,
    StallocIOError, TruncatedError, UnknownPointerError, UnsupportedError, VersionError,
)
from .load import load_trace
from .trace import EVENT_DTYPE, REQUEST_DTYPE, Trace, TraceSummary, TraceWriter
from .plan import Plan, PlanInfo, plan  # noqa: E402  (the function shadows the module name)
from .replay import replay  # noqa: E402  (the function shadows the module name)
# (more imports: one line per module)

__version__ = ffi.string(lib.stalloc_version_string()).decode()


def cmake_dir() -> str:
    """The directory holding stallocConfig.cmake in this installation."""
    d = resources.files(__name__).joinpath("lib", "cmake", "stalloc")
    if not d.joinpath("stallocConfig.cmake").is_file():
        raise ImportError(f"stalloc: stallocConfig.cmake not found in {d}; the package is not installed from a wheel")
    return str(d)


def include_dir() -> str:
    """The directory holding stalloc/stalloc.h."""
    return str(resources.files(__name__).joinpath("include"))


__all__ = [
    "Allocator", "Stats", "Trace", "TraceSummary", "TraceWriter", "EVENT_DTYPE",
    "REQUEST_DTYPE", "load_trace", "cmake_dir", "include_dir", "library_path", "__version__",
    "StallocError", "InvalidArgumentError", "OutOfMemoryError", "DoubleFreeError",
    "UnknownPointerError", "BadFormatError", "TruncatedError", "VersionError",
    "PlanMismatchError", "NoDeviceError", "BackendError", "CancelledError", "StallocIOError",
    "UnsupportedError", "InternalError", "ForeignPlanWarning", "Plan", "PlanInfo", "plan", "replay",
]
