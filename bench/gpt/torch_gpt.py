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

--device cuda[:N] (issue 35), PyTorch 2.x on a GPU, as its users train GPT-2 there: the model and
every batch on the GPU, bf16 autocast over fp32 master weights, attention by
F.scaled_dot_product_attention(is_causal=True) (flash attention; --attention sdpa, the default on
a GPU), AdamW with fused=True, --compile for torch.compile(model). Each timed step ends with
torch.cuda.synchronize() before the clock is read; "peak_gpu_mib" is
torch.cuda.max_memory_allocated() over the timed steps (reset after the warm-up), as bench_gpt
prints it; "mfu" divides the model FLOPs per second (bench_gpt's formula) by --peak-tflops (the
measured bf16 GEMM peak, bench/gpu/bf16_peak.py), null without it. A 2.x-only feature asked of
torch 1.13 (--compile; sdpa) ends the run with exit status 3 and the reason on stderr.

Fastest setting on the 2-core hosts here: OPENBLAS_NUM_THREADS=1 in the environment (run.sh
sets it): PyTorch's own intra-op threads plus OpenBLAS's pool oversubscribe the cores otherwise
(docs/kernels.md, "GPT" section, has the measurement).
"""
import argparse
import inspect
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

# The model is the parity test's (tests/parity/torch_gpt_model.py), so the benchmark times the
# model whose numbers were checked against cohort's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "parity"))
from torch_gpt_model import GPT, CausalSelfAttention, init_weights  # noqa: E402

SKIPPED = 3  # exit status: this torch lacks a feature asked for


class SdpaSelfAttention(CausalSelfAttention):
    """The same projections; attention by F.scaled_dot_product_attention (torch >= 2.0), which
    picks flash attention on a GPU (O(T) memory), with no T x T mask buffer."""

    def __init__(self, cfg):
        super().__init__(cfg)
        del self.bias  # is_causal=True masks

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class DeviceGPT(GPT):
    """The parity test's GPT with its positions made on the tokens' device (the parent makes
    them on the CPU); otherwise its forward, loss included."""

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1),
                                       ignore_index=-1)


def skip(why):
    print(f"torch_gpt: skipped: {why} (torch {torch.__version__})", file=sys.stderr)
    sys.exit(SKIPPED)


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
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model) (torch >= 2.0)")
    ap.add_argument("--attention", choices=["manual", "sdpa"], default=None,
                    help="manual: the T x T matrix (the CPU default, torch 1.13's nanoGPT); sdpa: "
                         "F.scaled_dot_product_attention (the GPU default)")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the device's measured peak, the MFU's denominator (0: mfu null)")
    ap.add_argument("--ddp", type=int, default=0,
                    help="N > 0: DistributedDataParallel (gloo) over N local processes of "
                         "--threads threads, --batch sequences each (mp.spawn); rank 0 prints")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "cohort"],
                    help="--ddp's torch.distributed backend (cohort: cohort_torch, on PYTHONPATH)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.attention is None:
        args.attention = "manual" if device.type == "cpu" else "sdpa"
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"torch_gpt: --device {args.device}: torch.cuda.is_available() is False "
              f"(torch {torch.__version__})", file=sys.stderr)
        sys.exit(1)
    if args.ddp > 0 and device.type != "cpu":
        ap.error("--ddp runs on the CPU only")
    if args.compile and not hasattr(torch, "compile"):
        skip("--compile needs torch.compile (torch >= 2.0)")
    if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        skip("--attention sdpa needs F.scaled_dot_product_attention (torch >= 2.0)")
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
        if args.backend == "cohort":
            import cohort_torch  # noqa: F401  registers "cohort" (PYTHONPATH=<build>/python)
        dist.init_process_group(args.backend, rank=rank, world_size=args.ddp)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and device.index is not None:
        torch.cuda.set_device(device)
    T = args.seq or args.block_size
    cfg = {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
           "block_size": args.block_size, "vocab_size": args.vocab}
    model = DeviceGPT(cfg)
    if args.attention == "sdpa":
        for block in model.transformer.h:
            block.attn = SdpaSelfAttention(cfg)
    init_weights(model, args.n_layer)
    model.to(device)  # before the optimizer: fp32 master weights on the device
    params = sum(p.numel() for p in model.parameters())
    params_no_pos = params - args.block_size * args.n_embd
    net = model
    if ddp:
        net = torch.nn.parallel.DistributedDataParallel(model)
    if args.compile:
        net = torch.compile(net)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    # fused=True (one kernel for all tensors) where this torch has it for this device: CUDA
    # from torch 2.0 on; else the default (foreach on a GPU, a loop on the CPU).
    fused = cuda and "fused" in inspect.signature(torch.optim.AdamW).parameters
    adamw = "fused" if fused else "default"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), **({"fused": True} if fused else {}))
    gen = torch.Generator().manual_seed(args.seed + rank)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def step():
        # Drawn on the host and copied, as bench_gpt does.
        idx = torch.randint(0, args.vocab, (args.batch, T), generator=gen).to(device)
        tgt = torch.randint(0, args.vocab, (args.batch, T), generator=gen).to(device)
        if args.precision == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16):
                _, loss = net(idx, tgt)
        else:
            _, loss = net(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    times_sorted = sorted(times)
    n = len(times_sorted)
    med = times_sorted[n // 2] if n % 2 else 0.5 * (times_sorted[n // 2 - 1] + times_sorted[n // 2])
    if rank != 0:
        return
    flops = (6.0 * params_no_pos + 12.0 * args.n_layer * args.n_embd * T) * args.batch * T * \
        max(1, args.ddp)
    mfu = flops / (med * 1e-3) / (args.peak_tflops * 1e12) if args.peak_tflops > 0 else None
    print(json.dumps({
        "impl": "torch", "device": str(device), "backend": args.backend if ddp else "",
        "gpu": torch.cuda.get_device_name(device) if cuda else "",
        "compile": args.compile, "attention": args.attention, "adamw": adamw,
        "precision": args.precision, "threads": args.threads,
        "ranks": max(1, args.ddp),
        "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
        "block_size": args.block_size, "vocab": args.vocab, "batch": args.batch, "seq": T,
        "params": params, "steps": args.steps, "ms_step": round(med, 2),
        "ms_min": round(times_sorted[0], 2), "ms_max": round(times_sorted[-1], 2),
        "loss_last": round(losses[-1], 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if cuda else 0.0,
        "gflop_step": round(flops * 1e-9, 3), "peak_gflops": round(args.peak_tflops * 1e3, 1),
        "mfu": None if mfu is None else round(mfu, 4),
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "torch": torch.__version__,
    }))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
