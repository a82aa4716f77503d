"""A Python object that owns one libstalloc handle and gives it back exactly once: on close(),
at the end of a with block, or when collected."""

from __future__ import annotations

from .errors import check

__all__ = ["OwnedHandle"]


class OwnedHandle:
    _handle = None

    @staticmethod
    def _release(handle) -> int:
        """The C call that gives the handle back; returns its status."""
        raise NotImplementedError

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            check(self._release(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # No error can be raised from here: the status is dropped.
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._release(handle)
