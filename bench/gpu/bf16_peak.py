#!/usr/bin/python3
"""The GPU's bf16 matrix-product peak, the MFU denominator of the GPU benchmarks (issue 35).

torch.matmul of two N x N bf16 matrices of N(0, 1) values (random data: zeros run faster on
Hopper), products untimed for --warmup-s seconds (an idle GPU's clocks take a moment to
rise), then --runs products each timed alone between CUDA
events; TFLOP/s = 2 N^3 / the median time. Prints one JSON line:
  {"tflops": 798.1, "n": 8192, "runs": 10, "ms_median": 1.378, "ms_min": ..., "gpu": ..., ...}
--device cpu times the same on the host (perf_counter; a check of this script on a machine
without a GPU, not a peak of any interest).
"""
import argparse
import json
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.n < 1 or args.runs < 1 or args.warmup_s < 0:
        ap.error("--n and --runs must be >= 1, --warmup-s >= 0")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"bf16_peak: --device {args.device}: torch.cuda.is_available() is False "
              f"(torch {torch.__version__})", file=sys.stderr)
        sys.exit(1)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(args.n, args.n, generator=gen).to(device, torch.bfloat16)
    b = torch.randn(args.n, args.n, generator=gen).to(device, torch.bfloat16)
    t0 = time.perf_counter()
    while True:  # at least one product: cuBLAS's first call picks its kernel
        for _ in range(10):
            torch.matmul(a, b)
        if cuda:
            torch.cuda.synchronize(device)
        if time.perf_counter() - t0 >= args.warmup_s:
            break
    ms = []
    for _ in range(args.runs):
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a, b)
            stop.record()
            stop.synchronize()
            ms.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    k = len(ms)
    med = ms[k // 2] if k % 2 else 0.5 * (ms[k // 2 - 1] + ms[k // 2])
    print(json.dumps({
        "tflops": round(2.0 * args.n ** 3 / (med * 1e-3) * 1e-12, 1), "n": args.n,
        "runs": args.runs, "ms_median": round(med, 4), "ms_min": round(ms[0], 4),
        "ms_max": round(ms[-1], 4), "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else "", "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
