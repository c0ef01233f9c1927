"""Prints run.sh's table: all_reduce (float32, sum, 2 ranks) latency and bus
bandwidth of cohort, PyTorch gloo and OpenMPI per size, single-thread memcpy,
and the ratios docs/reference.md sets targets for.

    /usr/bin/python3 bench/collectives/report.py DIR   (DIR holds cohort.jsonl, gloo.jsonl,
                                                       openmpi.jsonl, memcpy.jsonl)
"""
import json
import os
import sys


def load(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                rows[r["bytes"]] = r
    return rows


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def main():
    d = sys.argv[1]
    impls = {name: load(os.path.join(d, name + ".jsonl")) for name in ("cohort", "gloo", "openmpi")}
    memcpy = load(os.path.join(d, "memcpy.jsonl"))
    sizes = sorted(set().union(*[set(v) for v in impls.values()]))
    print("all_reduce float32 sum, 2 ranks, one host: median time (us) and bus bandwidth (GB/s)")
    print(f"{'size':>10} | {'cohort us':>10} {'gloo us':>10} {'openmpi us':>10} | "
          f"{'cohort GB/s':>11} {'gloo GB/s':>10} {'openmpi GB/s':>12}")
    for s in sizes:
        t = [impls[k].get(s, {}).get("time_us") for k in ("cohort", "gloo", "openmpi")]
        b = [impls[k].get(s, {}).get("busbw_gbps") for k in ("cohort", "gloo", "openmpi")]
        print(f"{human(s):>10} | {fmt(t[0], '10.2f')} {fmt(t[1], '10.2f')} {fmt(t[2], '10.2f')} | "
              f"{fmt(b[0], '11.3f')} {fmt(b[1], '10.3f')} {fmt(b[2], '12.3f')}")
    for s, r in sorted(memcpy.items()):
        print(f"single-thread memcpy {human(s)}: {r['gbps']:.2f} GB/s")

    def get(impl, size, key):
        return impls[impl].get(size, {}).get(key)

    print()
    print("ratios (docs/reference.md targets)")
    lat = [
        ("8 B latency cohort/gloo", ratio(get("cohort", 8, "time_us"), get("gloo", 8, "time_us")),
         "<= 0.1 (must)", lambda x: x <= 0.1),
        ("8 B latency cohort/openmpi",
         ratio(get("cohort", 8, "time_us"), get("openmpi", 8, "time_us")), "<= 1 (goal)",
         lambda x: x <= 1.0),
    ]
    for size in (1 << 20, 64 << 20):
        c = get("cohort", size, "busbw_gbps")
        m = memcpy.get(size, {}).get("gbps")
        lat += [
            (f"{human(size)} busbw cohort/gloo", ratio(c, get("gloo", size, "busbw_gbps")), ">= 3",
             lambda x: x >= 3.0),
            (f"{human(size)} busbw cohort/openmpi", ratio(c, get("openmpi", size, "busbw_gbps")),
             ">= 1", lambda x: x >= 1.0),
            (f"{human(size)} busbw cohort/memcpy", ratio(c, m), "(physical limit)", None),
        ]
    for name, value, target, ok in lat:
        verdict = "" if value is None or ok is None else ("  ok" if ok(value) else "  MISSED")
        print(f"  {name:<32} {fmt(value, '8.3f')}   target {target}{verdict}")


if __name__ == "__main__":
    main()
