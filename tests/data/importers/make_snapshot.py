"""Writes torch_snapshot.pickle: a SYNTHETIC PyTorch memory snapshot (see README.md).

The structure follows torch.cuda.memory._snapshot(): {"segments": [...], "device_traces":
[[entry, ...] per device]}; entries carry action, addr, size, stream, time_us, frames.
Device 1 has the most allocs, so the importer's default picks it."""

import os
import pickle

MiB = 1 << 20
BASE = 0x7F0000000000
S = 0x55AA00001000  # a side stream


def entry(action, addr, size, stream=0, t=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
            "frames": [{"filename": "train.py", "line": 10, "name": "step"}]}


dev0 = [
    entry("segment_alloc", BASE, 2 * MiB, t=1),
    entry("alloc", BASE, 4096, t=2),
    entry("free_requested", BASE, 4096, t=3),
    entry("free_completed", BASE, 4096, t=3),
]
dev1 = [
    entry("segment_alloc", BASE + 64 * MiB, 20 * MiB, t=1),
    entry("alloc", BASE + 64 * MiB, 3 * MiB, t=2),
    entry("alloc", BASE + 67 * MiB, 5 * MiB, S, t=3),
    # used on another stream (record_stream): the free completes later
    entry("free_requested", BASE + 67 * MiB, 5 * MiB, S, t=4),
    entry("alloc", BASE + 72 * MiB, 1 * MiB, t=5),
    entry("free_completed", BASE + 67 * MiB, 5 * MiB, S, t=6),
    entry("free_requested", BASE + 64 * MiB, 3 * MiB, t=7),
    entry("free_completed", BASE + 64 * MiB, 3 * MiB, t=7),
    # a block allocated before recording began
    entry("free_requested", BASE + 90 * MiB, 2 * MiB, t=8),
    entry("free_completed", BASE + 90 * MiB, 2 * MiB, t=8),
    {"action": "oom", "addr": 0, "size": 80 << 30, "stream": 0, "time_us": 9,
     "device_free": 1 << 30, "frames": []},
    entry("alloc", BASE + 64 * MiB, 3 * MiB, t=10),
]
snapshot = {
    "segments": [{"device": 1, "address": BASE + 64 * MiB, "total_size": 20 * MiB,
                  "stream": 0, "segment_type": "large", "allocated_size": 4 * MiB,
                  "active_size": 4 * MiB, "blocks": []}],
    "device_traces": [dev0, dev1],
    "allocator_settings": {"expandable_segments": False},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_snapshot.pickle")
with open(out, "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
print(out)
