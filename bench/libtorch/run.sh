#!/usr/bin/env bash
# cohort's DDP for LibTorch vs dist-mnist's per-parameter all_reduce through
# c10d's ProcessGroupGloo vs PyTorch's Python DDP (gloo), dist-mnist's model,
# 2 ranks x 1 thread x batch 32, plus one process without communication for
# the scaling. Alternates the three `rounds` times (a busy host moves all of
# them alike).   bench/libtorch/run.sh [build-dir] [rounds] [steps]
set -euo pipefail
build=${1:-build}; rounds=${2:-3}; steps=${3:-300}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/bench/libtorch/libtorch_ddp_bench
cohort=$build/tools/cohort/cohort
for r in $(seq "$rounds"); do
  echo "round $r"
  OMP_NUM_THREADS=1 "$bench" --mode single --steps "$steps"
  "$cohort" run --nproc-per-node 2 "$bench" --mode cohort --steps "$steps" | grep mode
  "$cohort" run --nproc-per-node 2 "$bench" --mode cohort-copy --steps "$steps" | grep mode
  store=$(mktemp -u /tmp/cohort-libtorch-bench-XXXXXX)
  "$cohort" run --nproc-per-node 2 "$bench" --mode gloo --steps "$steps" --store "$store" | grep mode
  rm -f "$store"
  /usr/bin/python3 "$here/torch_ddp.py" 2 "$steps"
done
