"""Prints run.sh's table: all_reduce (float32, sum, 2 ranks) latency and bus
bandwidth of cohort, PyTorch gloo and OpenMPI per size, single-thread memcpy,
the small-size rounds (cohort through ProcessGroup, OpenMPI, the raw
collectives layer) with their medians, and the ratios docs/reference.md sets
targets for.

    /usr/bin/python3 bench/collectives/report.py DIR   (DIR holds cohort.jsonl, gloo.jsonl,
                                                       openmpi.jsonl, memcpy.jsonl, rounds/,
                                                       cpu.txt, load_start.txt, load_end.txt)
"""
import glob
import json
import os
import statistics
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


def load_raw(path):
    """cohort_bench_allreduce_raw's text table: bytes, iters, time_us (rank 0), ...,
    slowest_us, rank_med_us (the statistics of the JSON benches' time_us and
    rank_median_us)."""
    rows = {}
    with open(path) as f:
        for line in f:
            cols = line.split()
            if len(cols) >= 9 and not line.startswith("#") and cols[0].isdigit():
                rows[int(cols[0])] = {"time_us": float(cols[7]),
                                      "rank_median_us": float(cols[8])}
    return rows


def read_text(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read().strip()


def load_rounds(d):
    """{impl: [rows of round 0, rows of round 1, ...]} from DIR/rounds."""
    rounds = {}
    for impl, pattern, loader in (("cohort", "cohort.*.jsonl", load),
                                  ("openmpi", "openmpi.*.jsonl", load),
                                  ("raw", "raw.*.txt", load_raw)):
        paths = glob.glob(os.path.join(d, "rounds", pattern))
        paths.sort(key=lambda p: int(os.path.basename(p).split(".")[1]))
        rounds[impl] = [loader(p) for p in paths]
    return rounds


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def report_rounds(rounds):
    """Prints each round and the medians over rounds of two statistics: time_us
    (median over iterations of the slowest rank's time) and rank_median_us (the
    slowest of the ranks' own medians; leaves out the skew between ranks).
    Returns the 8 B medians of the per-round ratios cohort/openmpi of both
    (None without rounds)."""
    n = min(len(rounds["cohort"]), len(rounds["openmpi"]))
    if n == 0:
        return None
    print()
    print(f"small sizes, {n} alternating rounds: each round's median, us (cohort = through "
          "ProcessGroup, raw = collectives layer)")
    result = None
    for key, what in (("time_us", "slowest rank per iteration"),
                      ("rank_median_us", "slowest rank's own median")):
        print(f" {key} ({what}):")
        for size in sorted(set().union(*[set(r) for r in rounds["cohort"][:n]])):
            def times(impl):
                return [r.get(size, {}).get(key) for r in rounds[impl][:n]]

            c, m, w = times("cohort"), times("openmpi"), times("raw")
            per_round = [ratio(a, b) for a, b in zip(c, m)]
            print(f"  {human(size)}: cohort  " + " ".join(fmt(x, "6.3f") for x in c))
            print(f"  {human(size)}: openmpi " + " ".join(fmt(x, "6.3f") for x in m))
            if any(x is not None for x in w):
                print(f"  {human(size)}: raw     " + " ".join(fmt(x, "6.3f") for x in w))
            print(f"  {human(size)}: ratio   " + " ".join(fmt(x, "6.3f") for x in per_round))
            rmed = med(per_round)
            print(f"  {human(size)} median: cohort {fmt(med(c), '.3f')} us, openmpi "
                  f"{fmt(med(m), '.3f')} us, raw {fmt(med(w), '.3f')} us; "
                  f"cohort/openmpi {fmt(rmed, '.3f')} (median of the per-round ratios)")
            if size == 8:
                result = result or {}
                result[key] = rmed
    return result


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def main():
    d = sys.argv[1]
    cpu = read_text(os.path.join(d, "cpu.txt"))
    if cpu:
        print(f"CPU: {cpu}")
    for when in ("start", "end"):
        text = read_text(os.path.join(d, f"load_{when}.txt"))
        if text:
            print(f"at the {when}: {text}")
    impls = {name: load(os.path.join(d, name + ".jsonl")) for name in ("cohort", "gloo", "openmpi")}
    memcpy = load(os.path.join(d, "memcpy.jsonl"))
    sizes = sorted(set().union(*[set(v) for v in impls.values()]))
    if sizes:
        table(impls, sizes)
    for s, r in sorted(memcpy.items()):
        print(f"single-thread memcpy {human(s)}: {r['gbps']:.2f} GB/s")
    rounds_ratio = report_rounds(load_rounds(d))
    targets(impls, memcpy, rounds_ratio)


def table(impls, sizes):
    print("all_reduce float32 sum, 2 ranks, one host: median time (us) and bus bandwidth (GB/s)")
    print(f"{'size':>10} | {'cohort us':>10} {'gloo us':>10} {'openmpi us':>10} | "
          f"{'cohort GB/s':>11} {'gloo GB/s':>10} {'openmpi GB/s':>12}")
    for s in sizes:
        t = [impls[k].get(s, {}).get("time_us") for k in ("cohort", "gloo", "openmpi")]
        b = [impls[k].get(s, {}).get("busbw_gbps") for k in ("cohort", "gloo", "openmpi")]
        print(f"{human(s):>10} | {fmt(t[0], '10.2f')} {fmt(t[1], '10.2f')} {fmt(t[2], '10.2f')} | "
              f"{fmt(b[0], '11.3f')} {fmt(b[1], '10.3f')} {fmt(b[2], '12.3f')}")


def targets(impls, memcpy, rounds_ratio):
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
    if rounds_ratio is not None:
        lat.append(("8 B cohort/openmpi, rounds", rounds_ratio.get("time_us"), "<= 1 (goal)",
                    lambda x: x <= 1.0))
        lat.append(("  the same, rank medians", rounds_ratio.get("rank_median_us"),
                    "(skew left out)", None))
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
