#!/usr/bin/env bash
# DDP and ZeRO stages 1-3 on the GPT reference size for 1, 2 and 4 ranks
# (one thread each), alternating the modes in each round so that machine
# noise spreads over all of them. Prints one JSON line per run.
# Usage: bench/zero/run.sh BUILD_DIR [ROUNDS] [extra bench_zero args...]
set -euo pipefail
build=${1:-build}
rounds=${2:-2}
shift $(( $# > 2 ? 2 : $# )) || true
for round in $(seq "$rounds"); do
  for n in 1 2 4; do
    for mode in ddp zero1 zero2 zero3; do
      echo "# round $round, N=$n, $mode: compilers running: $(pgrep -c cc1plus || true), load: $(cut -d' ' -f1 /proc/loadavg)"
      "$build/tools/cohort/cohort" run --nproc-per-node "$n" "$build/bench/zero/bench_zero" \
        --mode "$mode" "$@"
    done
  done
done
