"""PyTorch peer of bench_attention: nanoGPT's causal attention without flash
(q @ k^T * scale, masked_fill(tril == 0, -inf), softmax, @ v), timed on
request so that bench_attention can alternate it with cohort in one run.

Protocol (one line each way): bench_attention writes
  "<B> <H> <T> <D> <seconds> <threads>"
and reads
  "fwd_ms=<ms per forward> fwdbwd_ms=<ms per forward + backward>"
(mean over calls for about `seconds` each). "quit" or EOF ends it. The first
line printed is "torch <version>". Run with /usr/bin/python3 (Debian's torch 1.13)."""
import math
import sys
import time

import torch


def attention(q, k, v, bias, t):
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(bias[:, :, :t, :t] == 0, float("-inf"))
    att = torch.softmax(att, dim=-1)
    return att @ v


def time_ms(fn, seconds):
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, int(seconds / one))
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e3


def main():
    print("torch", torch.__version__, flush=True)
    torch.manual_seed(0)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        b, h, t, d = (int(x) for x in parts[:4])
        seconds, threads = float(parts[4]), int(parts[5])
        torch.set_num_threads(threads)
        q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for _ in range(3))
        dy = torch.randn(b, h, t, d)
        bias = torch.tril(torch.ones(t, t)).view(1, 1, t, t)

        def fwd():
            with torch.no_grad():
                attention(q, k, v, bias, t)

        def fwdbwd():
            q.grad = k.grad = v.grad = None
            attention(q, k, v, bias, t).backward(dy)

        f = time_ms(fwd, seconds)
        fb = time_ms(fwdbwd, seconds)
        print(f"fwd_ms={f:.4f} fwdbwd_ms={fb:.4f}", flush=True)


if __name__ == "__main__":
    main()
