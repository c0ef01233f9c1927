"""Ratios cohort/gloo from bench/torch_backend/run.sh's rows (one JSON object
per line: workload, backend, round, row), medians over rounds, and the CPU."""
import json
import statistics
import sys
from collections import defaultdict


def cpu():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
        else:
            name = "unknown"
    with open("/proc/cpuinfo") as f:
        avx512 = "avx512f" in f.read()
    return f"{name} ({'AVX-512' if avx512 else 'no AVX-512'})"


def main(path):
    vals = defaultdict(list)  # (key, backend) -> values
    for line in open(path):
        rec = json.loads(line)
        w, b, row = rec["workload"], rec["backend"], rec["row"]
        if w == "all_reduce":
            vals[(f"all_reduce {row['bytes']} B time_us", b)].append(row["time_us"])
            vals[(f"all_reduce {row['bytes']} B busbw_gbps", b)].append(row["busbw_gbps"])
        elif w == "net":
            vals[("net DDP 2x1 epoch seconds", b)].append(row["seconds"])
            vals[("net test_accuracy", b)].append(row["test_accuracy"])
        elif w == "gpt":
            vals[("gpt DDP 2x1 ms_step", b)].append(row["ms_step"])
    def order(k):
        words = k.split()
        size = int(words[1]) if words[0] == "all_reduce" else 0
        return (words[0], words[-1], size)

    keys = sorted({k for k, _ in vals}, key=order)
    print(f"{'measure':40s} {'gloo':>12s} {'cohort':>12s} {'cohort/gloo':>12s}")
    for k in keys:
        g, c = vals.get((k, "gloo")), vals.get((k, "cohort"))
        if not g or not c:
            continue
        gm, cm = statistics.median(g), statistics.median(c)
        ratio = cm / gm if gm else float("nan")
        print(f"{k:40s} {gm:12.4g} {cm:12.4g} {ratio:12.3f}")
    print(f"CPU: {cpu()}")


if __name__ == "__main__":
    main(sys.argv[1])
