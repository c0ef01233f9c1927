"""A PyTorch job on the cohort backend as a launcher starts it (backend_test.py):
env:// with nothing set by hand, under `cohort run` or mpirun. Every rank
all-reduces, makes a subgroup, trains a few DDP steps and checks the ranks
agree; rank 0 prints "launcher_job: ok <cohort backend of the world> <world size>".
"""
import torch
import torch.distributed as dist

import cohort_torch

dist.init_process_group("cohort")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((4,), world * (world + 1) / 2)), t
evens = dist.new_group([r for r in range(world) if r % 2 == 0])
if rank % 2 == 0:
    e = torch.ones(2)
    dist.all_reduce(e, group=evens)
    assert e[0].item() == len(range(0, world, 2)), e
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(rank)
for _ in range(5):
    opt.zero_grad()
    model(torch.randn(16, 8, generator=gen)).sum().backward()
    opt.step()
w = model.module.weight.detach().clone()
ws = [torch.empty_like(w) for _ in range(world)]
dist.all_gather(ws, w)
assert all(torch.equal(ws[0], x) for x in ws), "the ranks' parameters differ"
backend = dist.distributed_c10d._get_default_group().cohort_backend
dist.barrier()
if rank == 0:
    print(f"launcher_job: ok {backend} {world}", flush=True)
dist.destroy_process_group()
