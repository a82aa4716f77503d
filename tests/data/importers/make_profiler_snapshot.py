"""Writes torch_snapshot_from_profiler.pickle: a snapshot made by PyTorch's own code from a
real CPU run. torch.cuda._memory_viz._profile_to_snapshot turns a torch.profiler profile (with
profile_memory=True) into the dict torch.cuda.memory._snapshot() returns, with alloc /
free_requested / free_completed entries in device_traces (the CPU is the last device index:
0 on a machine without GPUs). Pickled as _dump_snapshot pickles it. Run from anywhere:
python3 tests/data/importers/make_profiler_snapshot.py (torch 2.13.0+cpu, ~4 s). Addresses
differ between runs; the sequence of sizes does not."""

import os
import pickle, torch
from torch import nn
from torch.cuda._memory_viz import _profile_to_snapshot
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                            record_shapes=True, with_stack=True) as prof:
    for _ in range(3):
        x = torch.randn(16, 64)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
snap = _profile_to_snapshot(prof)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_snapshot_from_profiler.pickle")
with open(out, "wb") as f:
    pickle.dump(snap, f)
