#!/usr/bin/env bash
# all_reduce (float32, sum, 2 ranks, 8 B .. 64 MiB) in one run: cohort
# (`cohort bench collectives`), PyTorch's gloo (torch_allreduce.py), OpenMPI's
# MPI_Allreduce (mpi_allreduce.cc) and single-thread memcpy; prints the table
# and the ratios docs/reference.md sets targets for (report.py).
#
#   bench/collectives/run.sh [BUILD_DIR]     (default: build; run from anywhere)
# Environment: KEEP=DIR keeps the raw JSON lines in DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
cd "$ROOT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target cohort cohort_bench_memcpy cohort_bench_mpi_allreduce >/dev/null
OUT=${KEEP:-$(mktemp -d)}
mkdir -p "$OUT"

echo "cohort ..." >&2
"$BUILD/tools/cohort/cohort" bench collectives --nproc 2 --op all_reduce --dtype float32 \
  -b 8 -e 64M -f 2 --json >"$OUT/cohort.jsonl"
echo "PyTorch gloo ..." >&2
/usr/bin/python3 bench/collectives/torch_allreduce.py --nproc 2 --min 8 --max 64M \
  >"$OUT/gloo.jsonl"
echo "OpenMPI ..." >&2
mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/bench/collectives/cohort_bench_mpi_allreduce" \
  8 $((64 << 20)) >"$OUT/openmpi.jsonl"
echo "memcpy ..." >&2
"$BUILD/bench/collectives/cohort_bench_memcpy" >"$OUT/memcpy.jsonl"

/usr/bin/python3 bench/collectives/report.py "$OUT"
