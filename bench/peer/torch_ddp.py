"""PyTorch peer of cohort's main job: DDP (gloo, or --backend cohort), torch.multiprocessing.spawn,
2 workers x 1 thread, one epoch of Net on Fashion-MNIST with DistributedSampler
(batch 64 per rank, SGD lr 0.01 momentum 0.9, clip_grad_norm 10).
Rank 0 prints one JSON line: seconds, samples_per_second, test_accuracy,
peak_rss_mib (max over ranks)."""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import fashion


def worker(rank, world, a, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if a.backend == "cohort":
        import cohort_torch  # noqa: F401  registers "cohort" (PYTHONPATH=<build>/python)
    dist.init_process_group(a.backend, rank=rank, world_size=world)
    torch.manual_seed(a.seed)
    xtr, ytr = fashion.load("train", a.data_dir)
    xte, yte = fashion.load("test", a.data_dir)
    ds = TensorDataset(xtr, ytr)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    loader = DataLoader(ds, batch_size=64, sampler=sampler)
    model = DDP(fashion.Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dist.barrier()
    start = time.perf_counter()
    samples = 0
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            samples += len(y)
    dist.barrier()
    seconds = time.perf_counter() - start
    acc = fashion.evaluate(model.module, xte, yte) if rank == 0 else 0.0
    rss = torch.tensor([fashion.peak_rss_mib()], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"seconds": seconds, "samples_per_second": samples * world / seconds,
                          "test_accuracy": acc, "peak_rss_mib": rss.item(), "workers": world,
                          "backend": a.backend}),
              flush=True)
    if rank == 0 and a.save:
        torch.save(model.module.state_dict(), a.save)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=fashion.DEFAULT_DIR)
    p.add_argument("--backend", default="gloo", choices=["gloo", "cohort"],
                   help="torch.distributed backend (cohort: cohort_torch, on PYTHONPATH)")
    p.add_argument("--save", default="", help="rank 0 writes the trained state_dict here")
    a = p.parse_args()
    mp.spawn(worker, args=(a.nproc, a, free_port()), nprocs=a.nproc)
