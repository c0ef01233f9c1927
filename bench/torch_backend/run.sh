#!/usr/bin/env bash
# PyTorch programs on gloo against the same programs on cohort's backend of
# torch.distributed (cohort_torch), in one run, only the backend name changed:
#   all_reduce  bench/collectives/torch_allreduce.py, float32 sum, 2 ranks, 8 B
#               to 64 MiB: median latency and bus bandwidth
#   net         bench/peer/torch_ddp.py, PyTorch DDP of the tutorials' Net, one
#               epoch of Fashion-MNIST, 2 ranks x 1 thread (EPOCHS=1)
#   gpt         bench/gpt/torch_gpt.py --ddp 2 --threads 1, the GPT reference size
# Rounds alternate gloo and cohort (ROUNDS, default 3); each figure is the
# median over rounds. Prints cohort/gloo ratios (time: lower is better;
# bandwidth: higher) and the CPU. PyTorch runs with OPENBLAS_NUM_THREADS=1,
# its fastest setting on the 2-core hosts (docs/kernels.md).
# Usage: [ROUNDS=n] [WORKLOADS="all_reduce net gpt"] [STEPS=n] bench/torch_backend/run.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
[[ -f $build/python/cohort_torch/__init__.py ]] || {
  echo "run.sh: $build/python/cohort_torch not built (cmake --build $build --target cohort_torch_C)" >&2
  exit 1
}
py=/usr/bin/python3
export PYTHONPATH=$build/python OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
rounds=${ROUNDS:-3}
workloads=${WORKLOADS:-all_reduce net gpt}
steps=${STEPS:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for b in gloo cohort; do
    for w in $workloads; do
      case $w in
        all_reduce) $py "$root/bench/collectives/torch_allreduce.py" --backend $b --min 8 --max 64M ;;
        net) $py "$root/bench/peer/torch_ddp.py" --backend $b --epochs "${EPOCHS:-1}" ;;
        gpt) $py "$root/bench/gpt/torch_gpt.py" --ddp 2 --threads 1 --backend $b --steps "$steps" ;;
        *) echo "run.sh: unknown workload $w" >&2; exit 2 ;;
      esac | sed "s/^/{\"workload\": \"$w\", \"backend\": \"$b\", \"round\": $r, \"row\": /; s/\$/}/" >>"$out/rows.jsonl"
    done
  done
done
$py "$root/bench/torch_backend/report.py" "$out/rows.jsonl"
