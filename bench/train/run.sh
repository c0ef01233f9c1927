#!/usr/bin/env bash
# One epoch of Net on Fashion-MNIST (batch 64, SGD lr 0.01 momentum 0.9,
# clip_grad_norm 10) in cohort (`cohort train`) and in PyTorch
# (bench/peer/torch_train.py), one process, with 1 and 2 threads, in one run.
# Prints per thread count: training seconds (evaluation and data loading
# excluded on both sides), samples/s, test accuracy and peak RSS (VmHWM, via
# /usr/bin/time -v) of each, then the ratios cohort / PyTorch. cpu_s is the
# whole process's user + system time (start-up, data loading and evaluation
# included), which a busy shared machine disturbs less than wall time.
# Targets (docs/reference.md): time ratio <= 0.5, accuracy >= PyTorch's - 0.5 points.
# COHORT_KERNELS=baseline|avx2|avx512 forces cohort's kernel path and holds
# PyTorch to the same ISA (bench/kernel_path.sh).
# Usage: bench/train/run.sh [build-dir] [thread counts, default "1 2"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${2:-1 2}
cohort=$build/tools/cohort/cohort
[[ -x $cohort ]] || { echo "run.sh: $cohort not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

peak_mib() {  # peak RSS in MiB from /usr/bin/time -v output
  awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$1"
}
cpu_s() {  # user + system CPU seconds of the whole process (load and evaluation included)
  awk -F: '/User time|System time/ {s += $2} END {printf "%.1f", s}' "$1"
}

source "$root/bench/kernel_path.sh"
bench_kernel_path "$cohort"
printf '%-8s %-7s %9s %11s %9s %9s %8s\n' impl threads seconds samples/s accuracy peak_MiB cpu_s
for t in $threads; do
  /usr/bin/time -v "$cohort" train --model net --dataset fashion-mnist --epochs 1 --threads "$t" \
    --metrics "$tmp/cohort$t.jsonl" >"$tmp/cohort$t.out" 2>"$tmp/cohort$t.time"
  /usr/bin/time -v /usr/bin/python3 "$root/bench/peer/torch_train.py" --threads "$t" \
    >"$tmp/torch$t.json" 2>"$tmp/torch$t.time"
  python3 - "$tmp" "$t" "$(peak_mib "$tmp/cohort$t.time")" "$(peak_mib "$tmp/torch$t.time")" \
    "$(cpu_s "$tmp/cohort$t.time")" "$(cpu_s "$tmp/torch$t.time")" <<'PY'
import json, sys
tmp, t = sys.argv[1], sys.argv[2]
cmem, tmem, ccpu, tcpu = (float(v) for v in sys.argv[3:7])
c = json.loads(open(f"{tmp}/cohort{t}.jsonl").read().splitlines()[-1])
p = json.loads(open(f"{tmp}/torch{t}.json").read().splitlines()[-1])
row = "{:<8} {:<7} {:9.2f} {:11.0f} {:9.4f} {:9.0f} {:8.1f}"
print(row.format("cohort", t, c["seconds"], c["samples_per_second"], c["test_accuracy"], cmem,
                 ccpu))
print(row.format("pytorch", t, p["seconds"], p["samples_per_second"], p["test_accuracy"], tmem,
                 tcpu))
print(f"ratio   {t:<7} time {c['seconds'] / p['seconds']:.3f} (target <= 0.5)   "
      f"accuracy {100 * (c['test_accuracy'] - p['test_accuracy']):+.2f} points (target >= -0.5)   "
      f"peak memory {cmem / tmem:.3f}   cpu time {ccpu / tcpu:.3f}")
PY
done
