"""PyTorch peer of bench_transformer_ops: times the same transformer ops,
forward + backward in float32, and prints one line per (size, op, threads) in
bench_transformer_ops' format:
  <size> <op> threads=<t> ms=<best ms per call>
bench_transformer_ops runs this script itself (so that both sets of numbers
come from one run) and prints the ratios. Run with /usr/bin/python3 (Debian's
torch 1.13) and OPENBLAS_NUM_THREADS=1, as the peer's settings say."""
import argparse
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", default="2")
p.add_argument("--seconds", type=float, default=1.0)
p.add_argument("--sizes", default="ref,gpt2")
a = p.parse_args()

# name: (rows, C, vocab, AdamW parameters), as bench_transformer_ops.cc.
SIZES = {"ref": (2048, 256, 256, 3_260_000), "gpt2": (256, 768, 50304, 7_087_872)}


def time_ms(fn, seconds):
    """Best wall time per call over 5 rounds (the machines are shared)."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    iters = max(1, int(seconds / 5 / max(one, 1e-6)))
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e3


def randn(*shape, scale=1.0, grad=True):
    return (torch.randn(*shape) * scale).requires_grad_(grad)


def clear(*ts):
    for t in ts:
        t.grad = None


def ops(rows, c, vocab, nparams):
    x4 = randn(rows, 4 * c)
    g4 = torch.randn(rows, 4 * c)
    x, d = randn(rows, c), randn(rows, c)
    w1, b1 = randn(4 * c, c, scale=0.05), randn(4 * c)
    lw, lb = randn(c), randn(c)
    gs, gy = torch.randn(rows, c), torch.randn(rows, c)
    logits = randn(rows, vocab)
    target = torch.randint(0, vocab, (rows,))

    def gelu():
        clear(x4)
        F.gelu(x4, approximate="tanh").backward(g4)

    def linear_gelu():
        clear(x, w1, b1)
        F.gelu(F.linear(x, w1, b1), approximate="tanh").backward(g4)

    def add_layer_norm():
        clear(x, d, lw, lb)
        s = x + d
        y = F.layer_norm(s, (c,), lw, lb)
        torch.autograd.backward([s, y], [gs, gy])

    def layer_norm():
        clear(x, lw, lb)
        F.layer_norm(x, (c,), lw, lb).backward(gy)

    def cross_entropy():
        clear(logits)
        F.cross_entropy(logits, target).backward()

    param = torch.nn.Parameter(torch.randn(nparams) * 0.02)
    param.grad = torch.randn(nparams) * 1e-3
    opt = torch.optim.AdamW([param], lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)

    def adamw():
        with torch.no_grad():
            opt.step()

    return [("gelu_tanh", gelu), ("linear_gelu", linear_gelu),
            ("add_layer_norm", add_layer_norm), ("layer_norm", layer_norm),
            ("cross_entropy", cross_entropy), ("adamw", adamw)]


torch.manual_seed(0)
for t in [int(s) for s in a.threads.split(",")]:
    torch.set_num_threads(t)
    for size in a.sizes.split(","):
        for name, fn in ops(*SIZES[size]):
            print(f"{size} {name} threads={t} ms={time_ms(fn, a.seconds):.4f}", flush=True)
