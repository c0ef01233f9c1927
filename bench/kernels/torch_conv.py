"""PyTorch peer of bench_conv_kernels: times aten's conv2d forward and the two
halves of convolution_backward (what autograd calls) on Net's convolutions,
batch 64, plus "backward_relu" (ReLU backward + both gradients, conv1 without
the input gradient, as in training), and prints lines in bench_conv_kernels'
format:
  <layer> <pass> threads=<t> ms=<best ms per call> gflops=<GFLOP/s> cpu_ms=<CPU ms>
Run with /usr/bin/python3 (Debian's torch 1.13)."""
import argparse
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", default="1,2")
p.add_argument("--seconds", type=float, default=0.5)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--filter", default="", help='only "<layer> <pass>" names containing it')
a = p.parse_args()


def time_ms(fn, seconds):
    """Best wall time per call over 5 rounds, and the best round's process CPU
    time per call (all threads; less disturbed by other load than wall time)."""
    fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    iters = max(1, int(seconds / 5 / max(one, 1e-6)))
    best, best_cpu = 1e30, 1e30
    for _ in range(5):
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
        best_cpu = min(best_cpu, (time.process_time() - c0) / iters)
    return best * 1e3, best_cpu * 1e3


layers = [("conv1", 1, 28), ("conv2", 20, 24)]
torch.manual_seed(0)
with torch.no_grad():
    for t in [int(s) for s in a.threads.split(",")]:
        torch.set_num_threads(t)
        for name, cin, hw in layers:
            x = torch.rand(a.batch, cin, hw, hw) * 2 - 1
            w = torch.rand(20, cin, 5, 5) * 2 - 1
            b = torch.rand(20) * 2 - 1
            dy = torch.rand(a.batch, 20, hw - 4, hw - 4) * 2 - 1
            gflop = 2.0 * a.batch * 20 * (hw - 4) ** 2 * cin * 25 * 1e-9
            conv_bw = torch.ops.aten.convolution_backward

            def bw(mask):
                return lambda: conv_bw(dy, x, w, [20], [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                       mask)

            yr = F.relu(F.conv2d(x, w, b))
            want_dx = cin > 1  # as in training: Net's input needs no gradient

            def bw_relu():
                g = torch.ops.aten.threshold_backward(dy, yr, 0)
                return conv_bw(g, x, w, [20], [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                               [want_dx, True, True])

            for pass_, fn in [("forward", lambda: F.conv2d(x, w, b)),
                              ("forward_relu", lambda: F.relu(F.conv2d(x, w, b))),
                              ("backward_input", bw([True, False, False])),
                              ("backward_weight", bw([False, True, True])),
                              ("backward_relu", bw_relu)]:
                if a.filter not in f"{name} {pass_}":
                    continue
                ms, cpu_ms = time_ms(fn, a.seconds)
                passes = 2 if pass_ == "backward_relu" and want_dx else 1
                print(f"{name} {pass_} threads={t} ms={ms:.4f} "
                      f"gflops={passes * gflop / (ms * 1e-3):.1f} cpu_ms={cpu_ms:.4f}", flush=True)
        # Pool lines are printed unless the filter names something else.
        if a.filter and "pool" not in a.filter:
            continue
        px = torch.rand(a.batch, 20, 20, 20)
        ms, cpu_ms = time_ms(lambda: F.max_pool2d(px, 2, return_indices=True), a.seconds)
        print(f"pool forward threads={t} ms={ms:.4f} cpu_ms={cpu_ms:.4f}", flush=True)
        py, idx = F.max_pool2d(px, 2, return_indices=True)
        ms, cpu_ms = time_ms(lambda: torch.ops.aten.max_pool2d_with_indices_backward(
            py, px, [2, 2], [2, 2], [0, 0], [1, 1], False, idx), a.seconds)
        print(f"pool backward threads={t} ms={ms:.4f} cpu_ms={cpu_ms:.4f}", flush=True)
