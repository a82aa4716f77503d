"""A real transformer training loop with stalloc turned on in one line.

    python examples/torch_train.py [--variant dense|recompute|moe] [--steps 50] [--plan-dir plans/]

On a GPU with a CUDA build of PyTorch, stalloc serves every CUDA allocation: the first steps
are recorded, planned in the background and switched to; with --plan-dir the plan is saved and
the next run is served from it from the first allocation. On a CPU-only machine the script
says why stalloc cannot serve CUDA memory there and trains on the CPU without it.
"""

import argparse
import time

import torch

from stalloc import demo_models
from stalloc.integrations import torch_backend

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--variant", choices=sorted(demo_models.VARIANTS), default="dense")
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--plan-dir", help="save plans here and reuse them in the next run")
args = ap.parse_args()

reason = torch_backend.cuda_unavailable_reason()
if reason is None:
    torch_backend.enable(plan_path=args.plan_dir)  # <- the one line
    device = "cuda"
else:
    print(f"stalloc not enabled: {reason}")
    device = "cpu"

model, opt = demo_models.build(args.variant, device=device)
start = time.perf_counter()
for step, (x, y) in enumerate(demo_models.batches(args.steps, device=device)):
    loss = demo_models.train_step(model, opt, x, y)
    if step % 10 == 0 or step == args.steps - 1:
        print(f"step {step:3d}  loss {loss:.4f}")
print(f"{args.steps} steps in {time.perf_counter() - start:.1f} s")
if device == "cuda":
    print(torch_backend.memory_summary())
