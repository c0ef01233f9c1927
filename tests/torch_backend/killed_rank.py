"""A PyTorch DDP job on the cohort backend whose rank 1 SIGKILLs itself
mid-training (backend_test.py). Rank 0 must end with an error naming rank 1:
it prints "survivor saw: <error>" and "ended after <s> s" and exits 3.

    python3 killed_rank.py RANK WORLD STORE_PATH
"""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import cohort_torch  # noqa: F401

rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("cohort", init_method="file://" + store, rank=rank, world_size=world,
                        timeout=timedelta(seconds=60))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
killed_at = None
try:
    for step in range(100000):
        if rank == 1 and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == 20:
            killed_at = time.monotonic()
        opt.zero_grad()
        model(torch.randn(16, 64)).sum().backward()
        opt.step()
except RuntimeError as e:
    print(f"survivor saw: {e}", flush=True)
    print(f"ended after {time.monotonic() - killed_at:.3f} s", flush=True)
    sys.exit(3)
print("the job went on without rank 1", flush=True)
sys.exit(1)
