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
# Targets (REFERENCE.md): time <= 0.5x PyTorch, accuracy >= PyTorch - 0.5
# points, peak memory <= 0.5x, scaling efficiency (2-worker throughput /
# 1-worker throughput / 2) >= 0.9.
# Usage: bench/ddp/run.sh [build-dir]
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
  peak_mib "$tmp/$1.time" >"$tmp/$1.mem"
  cpu_s "$tmp/$1.time" >"$tmp/$1.cpu"
}

run_cohort cohort2 2
/usr/bin/time -v /usr/bin/python3 "$root/bench/peer/torch_ddp.py" --nproc 2 >"$tmp/torch.json" \
  2>"$tmp/torch.time"
cpu_s "$tmp/torch.time" >"$tmp/torch.cpu"
run_cohort cohort1 1

python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def last(path):
    return json.loads(open(path).read().splitlines()[-1])
c2, c1, p = last(f"{tmp}/cohort2.jsonl"), last(f"{tmp}/cohort1.jsonl"), last(f"{tmp}/torch.json")
m2, m1 = float(open(f"{tmp}/cohort2.mem").read()), float(open(f"{tmp}/cohort1.mem").read())
cpu2, cpu1, cput = (float(open(f"{tmp}/{n}.cpu").read()) for n in ("cohort2", "cohort1", "torch"))
row = "{:<26} {:9.2f} {:11.0f} {:9.4f} {:14.0f} {:10.1f}"
print("{:<26} {:>9} {:>11} {:>9} {:>14} {:>10}".format("run", "seconds", "samples/s", "accuracy",
                                                       "peak_MiB/proc", "job_cpu_s"))
print(row.format("cohort 2 workers x 1 thr", c2["seconds"], c2["samples_per_second"],
                 c2["test_accuracy"], m2, cpu2))
print(row.format("pytorch ddp 2 x 1 thr", p["seconds"], p["samples_per_second"],
                 p["test_accuracy"], p["peak_rss_mib"], cput))
print(row.format("cohort 1 worker x 1 thr", c1["seconds"], c1["samples_per_second"],
                 c1["test_accuracy"], m1, cpu1))
print(f"time ratio cohort/pytorch: {c2['seconds'] / p['seconds']:.3f} (target <= 0.5)")
print(f"accuracy cohort - pytorch: {100 * (c2['test_accuracy'] - p['test_accuracy']):+.2f} points "
      "(target >= -0.5)")
print(f"peak memory ratio: {m2 / p['peak_rss_mib']:.3f} (target <= 0.5)")
print(f"job cpu time ratio cohort/pytorch: {cpu2 / cput:.3f} (all processes, start-up and "
      "evaluation included; less disturbed by a busy machine than wall time)")
print(f"scaling efficiency cohort 2 vs 1 worker: "
      f"{c2['samples_per_second'] / c1['samples_per_second'] / 2:.3f} (target >= 0.9)")
PY
