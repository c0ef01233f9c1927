#!/usr/bin/python3
"""PyTorch 1.13 peer of bench_gpt (issue 21): nanoGPT's GPT trained on random tokens.

The model is nanoGPT's (token + learned position embeddings, pre-LayerNorm blocks, causal
multi-head self-attention with the T x T attention matrix materialised, as nanoGPT does when
F.scaled_dot_product_attention is missing (torch 1.13), 4x MLP with tanh GELU, final LayerNorm,
head tied to the token embedding; Linear and LayerNorm layers carry biases, as in GPT-2),
trained with AdamW (betas 0.9/0.95, weight decay 0.1 on 2-D weights only, lr 3e-4).
Batches are random tokens from a seeded generator. After --warmup steps, --steps steps are
timed one by one; prints one JSON line: ms/step median (and min, max), peak RSS
(getrusage ru_maxrss), parameters, settings.

--precision bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), as a
user of torch 1.13 would; fp32 runs plain float32.

Fastest setting on the 2-core hosts here: OPENBLAS_NUM_THREADS=1 in the environment (run.sh
sets it): PyTorch's own intra-op threads plus OpenBLAS's pool oversubscribe the cores otherwise
(docs/kernels.md, "GPT" section, has the measurement).
"""
import argparse
import json
import os
import resource
import sys
import time

import torch

# The model is the parity test's (tests/parity/torch_gpt_model.py), so the benchmark times the
# model whose numbers were checked against cohort's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "parity"))
from torch_gpt_model import GPT, init_weights  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=0, help="tokens per sequence (default block size)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--ddp", type=int, default=0,
                    help="N > 0: DistributedDataParallel (gloo) over N local processes of "
                         "--threads threads, --batch sequences each (mp.spawn); rank 0 prints")
    args = ap.parse_args()
    if args.ddp > 0:
        import socket
        import torch.multiprocessing as mp
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(run, args=(args, port), nprocs=args.ddp)
    else:
        run(0, args, 0)


def run(rank, args, port):
    ddp = args.ddp > 0
    if ddp:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=args.ddp)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    T = args.seq or args.block_size
    model = GPT({"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
                 "block_size": args.block_size, "vocab_size": args.vocab})
    init_weights(model, args.n_layer)
    params = sum(p.numel() for p in model.parameters())
    net = model
    if ddp:
        net = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed + rank)

    def step():
        idx = torch.randint(0, args.vocab, (args.batch, T), generator=gen)
        tgt = torch.randint(0, args.vocab, (args.batch, T), generator=gen)
        if args.precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, loss = net(idx, tgt)
        else:
            _, loss = net(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append((time.perf_counter() - t0) * 1e3)
    times_sorted = sorted(times)
    n = len(times_sorted)
    med = times_sorted[n // 2] if n % 2 else 0.5 * (times_sorted[n // 2 - 1] + times_sorted[n // 2])
    if rank != 0:
        return
    print(json.dumps({
        "impl": "torch", "precision": args.precision, "threads": args.threads,
        "ranks": max(1, args.ddp),
        "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
        "block_size": args.block_size, "vocab": args.vocab, "batch": args.batch, "seq": T,
        "params": params, "steps": args.steps, "ms_step": round(med, 2),
        "ms_min": round(times_sorted[0], 2), "ms_max": round(times_sorted[-1], 2),
        "loss_last": round(losses[-1], 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "torch": torch.__version__,
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
