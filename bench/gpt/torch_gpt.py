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
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0, f"n_embd {n_embd} is not a multiple of n_head {n_head}"
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer(
            "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.size()
        assert T <= self.block_size, f"sequence length {T} exceeds block_size {self.block_size}"
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


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
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, args.vocab)
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
                loss = net(idx, tgt)
        else:
            loss = net(idx, tgt)
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
