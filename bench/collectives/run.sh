#!/usr/bin/env bash
# all_reduce (float32, sum, 2 ranks, 8 B .. 64 MiB) in one run: cohort
# (`cohort bench collectives`, through ProcessGroup), PyTorch's gloo
# (torch_allreduce.py), OpenMPI's MPI_Allreduce (mpi_allreduce.cc) and
# single-thread memcpy; then ROUNDS alternating rounds of the small sizes
# (4 and 8 B: cohort, OpenMPI and the raw collectives layer,
# cohort_bench_allreduce_raw, the order flipped every round, so that load from
# other processes falls on all of them alike); prints the table, the rounds,
# their medians, the 8 B ratio cohort/OpenMPI and the ratios docs/reference.md
# sets targets for (report.py), with the CPU model and the load average.
#
#   bench/collectives/run.sh [BUILD_DIR]     (default: build; run from anywhere)
# Environment: KEEP=DIR keeps the raw JSON lines in DIR; ROUNDS=N small-size
# rounds (default 7, 0: none); SMALL_ONLY=1 runs only the rounds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
cd "$ROOT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target cohort cohort_bench_memcpy cohort_bench_mpi_allreduce \
  cohort_bench_allreduce_raw >/dev/null
OUT=${KEEP:-$(mktemp -d)}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-7}
COHORT="$BUILD/tools/cohort/cohort"
MPI_BENCH="$BUILD/bench/collectives/cohort_bench_mpi_allreduce"
RAW="$BUILD/bench/collectives/cohort_bench_allreduce_raw"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)
awk -F': ' '/^model name/ && !m {m = $2} /^cpu family/ && !f {f = $2} /^model\t/ && !d {d = $2}
  END {printf "%s (family %s, model %s), ", m, f, d}' /proc/cpuinfo >"$OUT/cpu.txt"
echo "$(nproc) CPUs" >>"$OUT/cpu.txt"
load() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg), $(pgrep -c cc1plus || true) compilers"; }
load >"$OUT/load_start.txt"

if [ "${SMALL_ONLY:-0}" != 1 ]; then
  echo "cohort ..." >&2
  "$COHORT" bench collectives --nproc 2 --op all_reduce --dtype float32 \
    -b 8 -e 64M -f 2 --json >"$OUT/cohort.jsonl"
  echo "PyTorch gloo ..." >&2
  /usr/bin/python3 bench/collectives/torch_allreduce.py --nproc 2 --min 8 --max 64M \
    >"$OUT/gloo.jsonl"
  echo "OpenMPI ..." >&2
  "${MPIRUN[@]}" "$MPI_BENCH" 8 $((64 << 20)) >"$OUT/openmpi.jsonl"
  echo "memcpy ..." >&2
  "$BUILD/bench/collectives/cohort_bench_memcpy" >"$OUT/memcpy.jsonl"
fi

# Small sizes: each round runs every implementation once (1000 timed ops per
# size for cohort and OpenMPI, 20000 for raw), the order flipped per round.
run_cohort() {
  "$COHORT" bench collectives --nproc 2 --op all_reduce --dtype float32 -b 4 -e 8 -f 2 \
    --json >"$OUT/rounds/cohort.$1.jsonl"
}
run_mpi() { "${MPIRUN[@]}" "$MPI_BENCH" 4 8 >"$OUT/rounds/openmpi.$1.jsonl"; }
run_raw() { "$RAW" --min 4 --max 8 >"$OUT/rounds/raw.$1.txt"; }
mkdir -p "$OUT/rounds"
for ((r = 0; r < ROUNDS; r++)); do
  echo "small sizes, round $((r + 1)) of $ROUNDS ..." >&2
  if ((r % 2 == 0)); then
    run_cohort $r
    run_mpi $r
    run_raw $r
  else
    run_raw $r
    run_mpi $r
    run_cohort $r
  fi
done
load >"$OUT/load_end.txt"

/usr/bin/python3 bench/collectives/report.py "$OUT"
