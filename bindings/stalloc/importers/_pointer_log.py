"""Turning a pointer-keyed allocation log into stalloc events (shared by the importers).

Logs such as RMM's CSV, STAlloc's text log and PyTorch's snapshot name a block by its address,
not by a request id. ``PointerLog`` gives every alloc a new request id (1, 2, 3, ... in log
order) and pairs each free with the latest live alloc at the same address, whose id and size
the FREE event takes. A free with no live alloc at its address (its alloc predates the log)
becomes a FREE flagged UNMATCHED with a fresh id, as record mode writes such frees.
"""

from __future__ import annotations

import numpy as np

from ..trace import ALLOC, ALLOC_FAILED, EVENT_DTYPE, FLAG_UNMATCHED, FREE, STEP

__all__ = ["U64", "PointerLog"]

U64 = (1 << 64) - 1


class PointerLog:
    def __init__(self, device: int = 0):
        self.device = device
        self.rows: list[tuple] = []
        self.live: dict[int, list[tuple[int, int]]] = {}  # address -> stack of (id, size)
        self.next_id = 1
        self.unmatched_frees = 0
        self.size_mismatches = 0
        self.steps = 0

    def alloc(self, address: int, size: int, stream: int = 0, thread: int = 0) -> int:
        rid = self.next_id
        self.next_id += 1
        self.live.setdefault(address, []).append((rid, size))
        self.rows.append((rid, size, address & U64, stream & U64, thread & 0xFFFFFFFF,
                          self.device, ALLOC, 0))
        return rid

    def free(self, address: int, size: int, stream: int = 0, thread: int = 0) -> None:
        stack = self.live.get(address)
        if not stack:
            self.unmatched_frees += 1
            rid = self.next_id
            self.next_id += 1
            self.rows.append((rid, size, address & U64, stream & U64, thread & 0xFFFFFFFF,
                              self.device, FREE, FLAG_UNMATCHED))
            return
        rid, alloc_size = stack.pop()
        if not stack:
            del self.live[address]
        if size and size != alloc_size:
            self.size_mismatches += 1
        self.rows.append((rid, alloc_size, address & U64, stream & U64, thread & 0xFFFFFFFF,
                          self.device, FREE, 0))

    def failed(self, size: int, stream: int = 0, thread: int = 0) -> None:
        rid = self.next_id
        self.next_id += 1
        self.rows.append((rid, size, 0, stream & U64, thread & 0xFFFFFFFF, self.device,
                          ALLOC_FAILED, 0))

    def step(self, number: int, thread: int = 0) -> None:
        self.steps += 1
        self.rows.append((number, 0, 0, 0, thread & 0xFFFFFFFF, self.device, STEP, 0))

    def events(self) -> np.ndarray:
        if not self.rows:
            return np.zeros(0, dtype=EVENT_DTYPE)
        return np.array(self.rows, dtype=EVENT_DTYPE)

    def info(self) -> dict:
        return {
            "unmatched_frees": self.unmatched_frees,
            "size_mismatches": self.size_mismatches,
            "steps": self.steps,
            "live_at_end": sum(len(s) for s in self.live.values()),
        }
