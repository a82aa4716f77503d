"""Python exceptions for libstalloc's status codes: one class per code under StallocError.

The message is the library's detail for the failure (its thread-local last error).
"""

from __future__ import annotations

from ._lib import ffi, lib

__all__ = [
    "StallocError", "InvalidArgumentError", "OutOfMemoryError", "DoubleFreeError",
    "UnknownPointerError", "BadFormatError", "TruncatedError", "VersionError",
    "PlanMismatchError", "NoDeviceError", "BackendError", "TimeoutError_", "CancelledError",
    "StallocIOError", "UnsupportedError", "InternalError", "error_for", "check",
]


class StallocError(Exception):
    """A libstalloc call failed. ``status`` is the C status code."""

    status = -1

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(StallocError, ValueError):
    status = lib.STALLOC_ERR_INVALID_ARGUMENT


class OutOfMemoryError(StallocError, MemoryError):
    status = lib.STALLOC_ERR_OUT_OF_MEMORY


class DoubleFreeError(StallocError):
    status = lib.STALLOC_ERR_DOUBLE_FREE


class UnknownPointerError(StallocError):
    status = lib.STALLOC_ERR_UNKNOWN_POINTER


class BadFormatError(StallocError):
    status = lib.STALLOC_ERR_BAD_FORMAT


class TruncatedError(BadFormatError):
    status = lib.STALLOC_ERR_TRUNCATED


class VersionError(BadFormatError):
    status = lib.STALLOC_ERR_VERSION


class PlanMismatchError(StallocError):
    status = lib.STALLOC_ERR_PLAN_MISMATCH


class NoDeviceError(StallocError):
    status = lib.STALLOC_ERR_NO_DEVICE


class BackendError(StallocError):
    status = lib.STALLOC_ERR_BACKEND


class TimeoutError_(StallocError, TimeoutError):
    status = lib.STALLOC_ERR_TIMEOUT


class CancelledError(StallocError):
    status = lib.STALLOC_ERR_CANCELLED


class StallocIOError(StallocError, OSError):
    status = lib.STALLOC_ERR_IO


class UnsupportedError(StallocError):
    status = lib.STALLOC_ERR_UNSUPPORTED


class InternalError(StallocError):
    status = lib.STALLOC_ERR_INTERNAL


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError, OutOfMemoryError, DoubleFreeError, UnknownPointerError,
        BadFormatError, TruncatedError, VersionError, PlanMismatchError, NoDeviceError,
        BackendError, TimeoutError_, CancelledError, StallocIOError, UnsupportedError,
        InternalError,
    )
}


class ForeignPlanWarning(UserWarning):
    """A plan replayed or compared against a trace it was not made for (Plan.check fails)."""


def error_for(status: int) -> StallocError:
    """The exception for a failed call, carrying the library's message."""
    detail = ffi.string(lib.stalloc_last_error()).decode("utf-8", "replace")
    name = ffi.string(lib.stalloc_status_string(status)).decode()
    cls = _BY_STATUS.get(status, StallocError)
    return cls(detail or name, status)


def check(status: int) -> None:
    """Raises the matching StallocError unless status is STALLOC_OK."""
    if status != 0:
        raise error_for(status)
