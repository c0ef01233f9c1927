"""PyTorch's side of bench/dp: Net training steps (batch 64, SGD lr 0.01 momentum 0.9) on
synthetic data, as

  single    one process, the module itself with --threads intra-op threads
            (single-half: with half of them, as each replica of "threads" has);
  dp-cpu    torch.nn.DataParallel(module) on this CPU-only machine: torch 1.13 finds no
            accelerator, sets device_ids = [] and forward calls the module itself (one
            replica, no scatter, no threads) -- printed as the reason it cannot replicate;
  threads   what nn.DataParallel would do with 2 CPU "devices", assembled from its own
            pieces: the batch scattered in 2, replica 1 refreshed from the module each
            step, both replicas' forwards on Python threads as parallel_apply runs them (the
            GIL is released inside ATen ops; parallel_apply itself cannot be called: in 1.13
            it asks for CUDA streams, "Torch not compiled with CUDA enabled"), one backward
            through both, gradients summed back into the module.

Prints one JSON object per line: {"mode", "step_ms", "samples_per_s", "note"}.
Run with /usr/bin/python3 (Debian's torch).
"""
import argparse
import copy
import json
import os
import sys
import threading
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
from fashion import Net  # noqa: E402


def batches(n, batch):
    g = torch.Generator().manual_seed(0)
    return [(torch.rand(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]


def timed(step, data, warmup, steps):
    for i in range(warmup):
        step(*data[i % len(data)])
    t0 = time.perf_counter()
    for i in range(steps):
        step(*data[i % len(data)])
    return (time.perf_counter() - t0) / steps


def run_single(model, data, warmup, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        F.nll_loss(model(x), y).backward()
        opt.step()
    return timed(step, data, warmup, steps)


def run_threads(model, data, warmup, steps, replicas):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    others = [copy.deepcopy(model) for _ in range(replicas - 1)]

    def step(x, y):
        opt.zero_grad()
        for r in others:  # nn.DataParallel replicates the module every forward
            r.load_state_dict(model.state_dict())
            r.zero_grad()
        reps = [model] + others
        chunks = x.chunk(replicas)
        outs = [None] * len(chunks)

        def work(i):
            outs[i] = reps[i](chunks[i])
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(chunks))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        F.nll_loss(torch.cat(outs), y).backward()
        with torch.no_grad():
            for r in others:
                for p, q in zip(model.parameters(), r.parameters()):
                    p.grad += q.grad
        opt.step()
    return timed(step, data, warmup, steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    data = batches(8, args.batch)

    def emit(mode, sec, note=""):
        print(json.dumps({"mode": mode, "step_ms": sec * 1e3,
                          "samples_per_s": args.batch / sec, "note": note}), flush=True)

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    emit("single", run_single(Net(), data, args.warmup, args.steps),
         f"torch {torch.__version__}, {args.threads} threads")

    dp = torch.nn.DataParallel(Net())
    why = ("torch.cuda.is_available() is False: nn.DataParallel sets device_ids = "
           f"{dp.device_ids} and forward calls the module itself (no replicas)")
    emit("dp-cpu", run_single(dp, data, args.warmup, args.steps), why)

    torch.set_num_threads(max(1, args.threads // 2))
    # OpenMP's spinning threads suffer most on a loaded machine: this row shows the module
    # with the per-replica thread count, the same as each replica of "threads".
    emit("single-half", run_single(Net(), data, args.warmup, args.steps),
         f"the module itself, {max(1, args.threads // 2)} intra-op threads")
    emit("threads", run_threads(Net(), data, args.warmup, args.steps, 2),
         f"2 CPU replicas on Python threads, {max(1, args.threads // 2)} intra-op threads")


if __name__ == "__main__":
    main()
