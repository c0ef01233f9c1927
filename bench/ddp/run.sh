#!/usr/bin/env bash
# cohort's main job against PyTorch DDP, in one run:
#   cohort:  cohort run --nproc-per-node 2 cohort train --model net --dataset fashion-mnist
#            --epochs 1 --threads 1            (2 workers x 1 thread)
#   pytorch: bench/peer/torch_ddp.py           (gloo, mp.spawn, 2 workers x 1 thread)
#   cohort with 1 worker x 1 thread            (for the scaling efficiency)
# Prints epoch training time, samples/s, test accuracy and peak RSS per
# process (cohort: /usr/bin/time -v of the launcher, i.e. the largest of its
# workers; PyTorch: VmHWM, max over ranks), the CPU time of each whole job,
# and the ratios.
# The three runs alternate ROUNDS times (default 1) and each figure is the
# round with the shortest epoch: on a shared machine the minimum is the least
# disturbed measurement of either side.
# Targets (docs/reference.md): time <= 0.5x PyTorch, accuracy >= PyTorch - 0.5
# points, peak memory <= 0.5x, scaling efficiency (2-worker throughput /
# 1-worker throughput / 2) >= 0.9.
# COHORT_KERNELS=baseline|avx2|avx512 forces cohort's kernel path and holds
# PyTorch to the same ISA (bench/kernel_path.sh).
# Usage: [ROUNDS=n] bench/ddp/run.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cohort=$build/tools/cohort/cohort
[[ -x $cohort ]] || { echo "run.sh: $cohort not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

peak_mib() {
  awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$1"
}
cpu_s() {  # user + system CPU seconds of the whole job (all processes)
  awk -F: '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$1"
}

run_cohort() {  # name nproc
  /usr/bin/time -v "$cohort" run --nproc-per-node "$2" "$cohort" train --model net \
    --dataset fashion-mnist --epochs 1 --threads 1 --metrics "$tmp/$1.jsonl" \
    >"$tmp/$1.out" 2>"$tmp/$1.time" || { cat "$tmp/$1.out" "$tmp/$1.time" >&2; exit 1; }
  echo "{\"mem\": $(peak_mib "$tmp/$1.time"), \"cpu\": $(cpu_s "$tmp/$1.time")}" >"$tmp/$1.res"
}

source "$root/bench/kernel_path.sh"
bench_kernel_path "$cohort"
for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
  echo "== round $r" >&2
  run_cohort "cohort2.$r" 2
  /usr/bin/time -v /usr/bin/python3 "$root/bench/peer/torch_ddp.py" --nproc 2 \
    >"$tmp/torch.$r.json" 2>"$tmp/torch.$r.time"
  echo "{\"cpu\": $(cpu_s "$tmp/torch.$r.time")}" >"$tmp/torch.$r.res"
  run_cohort "cohort1.$r" 1
done

python3 - "$tmp" "${ROUNDS:-1}" <<'PY'
import json, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def last(path):
    return json.loads(open(path).read().splitlines()[-1])
def best(name, metrics):
    runs = []
    for r in range(1, rounds + 1):
        m = last(f"{tmp}/{name}.{r}.{metrics}")
        m.update(json.load(open(f"{tmp}/{name}.{r}.res")))
        runs.append(m)
    return min(runs, key=lambda m: m["seconds"])
c2, c1, p = best("cohort2", "jsonl"), best("cohort1", "jsonl"), best("torch", "json")
row = "{:<26} {:9.2f} {:11.0f} {:9.4f} {:14.0f} {:10.1f}"
print("{:<26} {:>9} {:>11} {:>9} {:>14} {:>10}".format("run", "seconds", "samples/s", "accuracy",
                                                       "peak_MiB/proc", "job_cpu_s"))
print(row.format("cohort 2 workers x 1 thr", c2["seconds"], c2["samples_per_second"],
                 c2["test_accuracy"], c2["mem"], c2["cpu"]))
print(row.format("pytorch ddp 2 x 1 thr", p["seconds"], p["samples_per_second"],
                 p["test_accuracy"], p["peak_rss_mib"], p["cpu"]))
print(row.format("cohort 1 worker x 1 thr", c1["seconds"], c1["samples_per_second"],
                 c1["test_accuracy"], c1["mem"], c1["cpu"]))
print(f"best of {rounds} round(s)")
print(f"time ratio cohort/pytorch: {c2['seconds'] / p['seconds']:.3f} (target <= 0.5)")
print(f"accuracy cohort - pytorch: {100 * (c2['test_accuracy'] - p['test_accuracy']):+.2f} points "
      "(target >= -0.5)")
print(f"peak memory ratio: {c2['mem'] / p['peak_rss_mib']:.3f} (target <= 0.5)")
print(f"job cpu time ratio cohort/pytorch: {c2['cpu'] / p['cpu']:.3f} (all processes, start-up "
      "and evaluation included; less disturbed by a busy machine than wall time)")
print(f"scaling efficiency cohort 2 vs 1 worker: "
      f"{c2['samples_per_second'] / c1['samples_per_second'] / 2:.3f} (target >= 0.9)")
PY
