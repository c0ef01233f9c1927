#!/usr/bin/env bash
# cohort's DDP for LibTorch vs dist-mnist's per-parameter all_reduce through
# c10d's ProcessGroupGloo vs PyTorch's Python DDP (gloo), dist-mnist's model,
# 2 ranks x 1 thread x batch 32, plus the two scaling baselines: one process
# alone (single) and 2 processes under `cohort run` training independently,
# without any communication (independent: what the host gives two processes
# on its cores). Alternates them `rounds` times (a busy host moves all of
# them alike); each line of cohort's gives the step's phases (see
# libtorch_ddp_bench.cc). Prints the load before each round: measure where
# `pgrep -c cc1plus` is 0.
#   bench/libtorch/run.sh [build-dir] [rounds] [steps] [extra cohort bucket MiB ...]
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-300}
shift $(( $# < 3 ? $# : 3 ))
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/bench/libtorch/libtorch_ddp_bench
cohort=$build/tools/cohort/cohort
rank0() { grep -A1 '^\[rank 0\] mode' | sed 's/^\[rank 0\] //'; }
for r in $(seq "$rounds"); do
  echo "round $r (compilers running: $(pgrep -c cc1plus || true), load $(cut -d' ' -f1-3 /proc/loadavg))"
  OMP_NUM_THREADS=1 "$bench" --mode single --steps "$steps"
  "$cohort" run --nproc-per-node 2 "$bench" --mode independent --steps "$steps" | rank0
  "$cohort" run --nproc-per-node 2 "$bench" --mode cohort --steps "$steps" | rank0
  for mb in "$@"; do
    echo "bucket_cap_mb $mb:"
    "$cohort" run --nproc-per-node 2 "$bench" --mode cohort --bucket-mb "$mb" --steps "$steps" | rank0
  done
  "$cohort" run --nproc-per-node 2 "$bench" --mode cohort-copy --steps "$steps" | rank0
  store=$(mktemp -u /tmp/cohort-libtorch-bench-XXXXXX)
  "$cohort" run --nproc-per-node 2 "$bench" --mode gloo --steps "$steps" --store "$store" | rank0
  rm -f "$store"
  /usr/bin/python3 "$here/torch_ddp.py" 2 "$steps"
done
