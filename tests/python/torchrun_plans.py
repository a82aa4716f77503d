"""Run under torchrun (gloo, CPU): each rank records and plans its own trace — ranks of a
pipeline see different allocation patterns — and keeps its plan in a shared plan directory.
Usage: torchrun --nproc-per-node=2 torchrun_plans.py PLAN_DIR TRACES_DIR"""

import sys

import torch.distributed as dist

from stalloc.session import rank_plan_path
from torch_driver import drive

dist.init_process_group("gloo")
rank = dist.get_rank()
plan_dir, traces = sys.argv[1], sys.argv[2]
trace = f"{traces}/{'llama_1f1b' if rank == 0 else 'llama_plain'}.npz"
session, stats = drive(trace, plan_path=plan_dir, rank=rank)
assert session.plan_file == rank_plan_path(plan_dir, rank)
dist.barrier()
print(f"rank {rank}: plan source: {session.plan_source}, hits {stats.plan_hits}", flush=True)
session.close()
dist.destroy_process_group()
