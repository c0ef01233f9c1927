"""PyTorch's all_reduce (float32, sum) on gloo, or with --backend cohort on
cohort's backend of torch.distributed (bench/torch_backend/run.sh), the peer of
`cohort bench collectives --op all_reduce`, measured the same way: per size
(--min..--max bytes, x2) warmup, then timed iterations of dist.all_reduce;
each iteration's time is the slowest rank's; the median is reported. Rank 0
prints one JSON object per size: impl, op, bytes, time_us, algbw_gbps,
busbw_gbps (2(n-1)/n).

    /usr/bin/python3 bench/collectives/torch_allreduce.py [--nproc 2] [--min 8] [--max 64M]
"""
import argparse
import json
import os
import socket
import sys
import time


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mult != 1 else s) * mult


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, nproc, port, lo, hi, warmup, backend):
    import torch
    import torch.distributed as dist

    if backend == "cohort":
        import cohort_torch  # noqa: F401  registers "cohort" (PYTHONPATH=<build>/python)
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=nproc)
    size = lo
    while size <= hi:
        count = max(size // 4, 1)
        nbytes = count * 4
        t = torch.zeros(count, dtype=torch.float32)
        iters = min(max((256 << 20) // nbytes, 20), 1000)
        for _ in range(warmup):
            dist.all_reduce(t)
        times = torch.zeros(iters, dtype=torch.float64)
        for i in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times[i] = (time.perf_counter() - t0) * 1e6
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        us = float(times.sort().values[iters // 2])
        algbw = nbytes / (us * 1e-6) / 1e9
        if rank == 0:
            print(json.dumps({"impl": backend, "op": "all_reduce", "bytes": nbytes, "iters": iters,
                              "time_us": round(us, 3), "algbw_gbps": round(algbw, 4),
                              "busbw_gbps": round(algbw * 2 * (nproc - 1) / nproc, 4)}),
                  flush=True)
        size *= 2
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--min", default="8")
    p.add_argument("--max", default="64M")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--backend", default="gloo", choices=["gloo", "cohort"],
                   help="torch.distributed backend (cohort: cohort_torch, on PYTHONPATH)")
    a = p.parse_args()
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(a.nproc, free_port(), parse_size(a.min), parse_size(a.max), a.warmup,
                             a.backend),
             nprocs=a.nproc, join=True)


if __name__ == "__main__":
    sys.exit(main())
