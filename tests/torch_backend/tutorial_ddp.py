"""The tutorials' basic DDP program (ToyModel, SGD lr 0.001, MSE loss, the
checkpoint saved on rank 0), as a PyTorch user runs it under torchrun, with
one change for cohort: `import cohort_torch` and the backend's name.

    torchrun --nproc_per_node 2 --redirects 1 --tee 1 tutorial_ddp.py BACKEND CHECKPOINT [STEPS]

Every rank seeds the same model; each trains on its own seeded batches.
Rank 0 saves the final state_dict to CHECKPOINT and prints the seconds the
steps took.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

backend, checkpoint = sys.argv[1], sys.argv[2]
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 50
if backend == "cohort":
    import cohort_torch  # noqa: F401


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def main():
    dist.init_process_group(backend)  # env:// from torchrun
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(1000 + rank)
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10, generator=gen))
        loss_fn(outputs, torch.randn(20, 5, generator=gen)).backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    if rank == 0:
        torch.save(ddp_model.module.state_dict(), checkpoint)
        print(f"tutorial_ddp: {backend}: {steps} steps in {seconds:.4f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
