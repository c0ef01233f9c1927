#!/bin/bash
# The GPU benchmark of issue 35, in one go on one GPU (scripts/gpu_check.sh
# calls it; about 3 minutes on an H100; its pieces stop within
# GPU_BENCH_BUDGET_S, 270 s, and the table follows in seconds):
#   1. the bf16 GEMM peak (bench/gpu/bf16_peak.py: torch.matmul 8192^3, the
#      median of 10), the MFU denominator of the GPT rows;
#   2. GPT-2 124M (12 x 768, vocabulary 50304), batch 16 x 1024 tokens, bf16
#      autocast over fp32 master weights, AdamW: cohort (bench_gpt --device
#      cuda), PyTorch eager (bench/gpt/torch_gpt.py: SDPA flash attention,
#      fused AdamW); GPU_BENCH_WARMUP steps, then GPU_BENCH_STEPS timed;
#   3. Net one epoch on Fashion-MNIST, batch 64: cohort (`cohort train
#      --device cuda --model net`) and PyTorch (bench/peer/torch_train.py);
#   4. PyTorch torch.compile on the GPT (last: its compilation takes a minute
#      or two, and the other rows come first if time runs out);
# then one table (bench/gpu/table.py): ms/step or s/epoch, cohort / PyTorch,
# MFU, peak GPU memory and its ratio, the GPU's name and driver, the date, and
# the issue's targets met or not. A piece that fails prints its error and the
# script goes on (a kernel missing in cohort leaves the PyTorch rows); each
# piece has a time limit, and one that would start with under 15 s of the
# budget left is not started. The table goes to stdout and to
# GPU_BENCH_OUT/gpu_bench.txt, with each piece's output under GPU_BENCH_OUT/gpu_bench/
# (scripts/gpu_check.sh archives that folder); without GPU_BENCH_OUT but with the
# device tool's OUT set, to $OUT/gpu_bench.txt and $OUT/gpu_bench_pieces.tar.xz: two
# files, as the tool returns at most 8.
# Exit status: 0 when the table was written (whatever it says), 2 on a bad
# command line.
#
# Usage: bench/gpu/run.sh BUILD_DIR DATA_DIR
#   BUILD_DIR: the cohort build (bench/gpt/bench_gpt, tools/cohort/cohort);
#     or, with COHORT_BIN_DIR set, ignored: the programs are in that folder
#     (scripts/gpu_check.sh's unpacked bundle, BIN/bench_gpt and BIN/cohort)
#   DATA_DIR: Fashion-MNIST's four IDX .gz files
# The Python pieces run with GPU_BENCH_PY_LD_LIBRARY_PATH where it is set
# (scripts/gpu_check.sh: its caller's, without the CUDA libraries it chose for
# cohort, so that PyTorch loads its own cuDNN), else with the LD_LIBRARY_PATH
# entries under the bundle (COHORT_BIN_DIR's parent folder) left out: the
# Debian libraries carried for cohort (an older libstdc++ among them) must not
# replace the device image's own under PyTorch.
# Environment: PYTHON (python3: the one with PyTorch), GPU_BENCH_DEVICE (cuda),
#   GPU_BENCH_STEPS (10), GPU_BENCH_WARMUP (3), GPU_BENCH_BUDGET_S (270),
#   GPU_BENCH_GPT (the GPT's shape flags, common to both programs),
#   GPU_BENCH_PEAK_N (8192), GPU_BENCH_NET_MAX_STEPS (0: the whole epoch),
#   GPU_BENCH_OUT, GPU_BENCH_PY_LD_LIBRARY_PATH (above).
#   The last three and GPU_BENCH_DEVICE=cpu exist to check this script on a
#   machine without a GPU, on small shapes.
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR DATA_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${COHORT_BIN_DIR:-}" ]; then
  bench_gpt=$COHORT_BIN_DIR/bench_gpt
  cohort=$COHORT_BIN_DIR/cohort
  bundle=$(cd "$COHORT_BIN_DIR/.." && pwd)
else
  build=$(cd "$1" 2>/dev/null && pwd) || { echo "$0: no build directory $1" >&2; exit 2; }
  bench_gpt=$build/bench/gpt/bench_gpt
  cohort=$build/tools/cohort/cohort
  bundle=
fi
data=$2
py_ld=
IFS=: read -ra ld_dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${ld_dirs[@]}"; do
  if [ -n "$d" ] && ! [[ -n $bundle && ($d == "$bundle" || $d == "$bundle"/*) ]]; then
    py_ld=${py_ld:+$py_ld:}$d
  fi
done
[ -n "${GPU_BENCH_PY_LD_LIBRARY_PATH+x}" ] && py_ld=$GPU_BENCH_PY_LD_LIBRARY_PATH
py=(env "LD_LIBRARY_PATH=$py_ld" "${PYTHON:-python3}")
device=${GPU_BENCH_DEVICE:-cuda}
steps=${GPU_BENCH_STEPS:-10}
warmup=${GPU_BENCH_WARMUP:-3}
budget=${GPU_BENCH_BUDGET_S:-270}
gpt2="--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --vocab 50304 --batch 16 --seq 1024"
gpt_shape=${GPU_BENCH_GPT:-$gpt2}
gpt_label="GPT-2 124M: 12 layers, 12 heads, width 768, vocabulary 50304, batch 16 x 1024 tokens"
[ "$gpt_shape" = "$gpt2" ] || gpt_label=$gpt_shape
peak_n=${GPU_BENCH_PEAK_N:-8192}
net_max_steps=${GPU_BENCH_NET_MAX_STEPS:-0}
threads=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work" "$work.pieces"' EXIT
deadline=$(($(date +%s) + budget))
export PYTHONUNBUFFERED=1

# piece NAME LIMIT_S COMMAND...: runs COMMAND with its stdout in NAME.out, its
# stderr in NAME.err and its exit status in NAME.rc (none: it never started);
# prints how it went, and the end of its stderr when it failed.
piece() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  if ((left < 15)); then
    echo "== $name: not started, ${left} s of the ${budget} s budget left" |
      tee "$work/$name.err"
    return
  fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit} s): $*"
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  echo "$rc" >"$work/$name.rc"
  echo "   exit $rc after $((SECONDS - t0)) s"
  if ((rc != 0)); then
    ((rc == 124 || rc == 137)) && echo "timed out after ${limit} s" >>"$work/$name.err"
    tail -n 20 "$work/$name.err" | sed 's/^/   | /'
  fi
}

if gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); then
  gpu=$(head -n 1 <<<"$gpu")
else
  gpu="unknown (nvidia-smi: $(tail -n 1 <<<"$gpu"))"
fi
torch_version=$(timeout 120 "${py[@]}" -c \
  'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1)
date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')
echo "GPU: $gpu; torch: $torch_version; $date_utc"

piece peak 60 "${py[@]}" "$root/bench/gpu/bf16_peak.py" --device "$device" --n "$peak_n"
peak=$("${py[@]}" -c 'import json, sys; print(json.loads(sys.stdin.readlines()[-1])["tflops"])' \
  <"$work/peak.out" 2>/dev/null) || peak=0

# shellcheck disable=SC2086 # gpt_shape is a list of flags
piece cohort_gpt 150 "$bench_gpt" $gpt_shape --steps "$steps" \
  --warmup "$warmup" --precision bf16 --device "$device" --peak-tflops "$peak" --threads "$threads"
# shellcheck disable=SC2086
piece torch_gpt_eager 120 "${py[@]}" "$root/bench/gpt/torch_gpt.py" $gpt_shape --steps "$steps" \
  --warmup "$warmup" --precision bf16 --device "$device" --peak-tflops "$peak" --threads "$threads"

net_steps=()
((net_max_steps > 0)) && net_steps=(--max-steps "$net_max_steps")
piece cohort_net 120 "$cohort" train --device "$device" --model net --epochs 1 \
  --batch-size 64 --data-dir "$data" --metrics "$work/cohort_net.metrics" "${net_steps[@]}"
piece torch_net 90 "${py[@]}" "$root/bench/peer/torch_train.py" --device "$device" --epochs 1 \
  --batch-size 64 --data-dir "$data" --threads "$threads" "${net_steps[@]}"

# shellcheck disable=SC2086
piece torch_gpt_compile 240 "${py[@]}" "$root/bench/gpt/torch_gpt.py" $gpt_shape --steps "$steps" \
  --warmup "$warmup" --precision bf16 --device "$device" --peak-tflops "$peak" \
  --threads "$threads" --compile

echo
"${py[@]}" "$root/bench/gpu/table.py" "$work" --gpu "$gpu" --date "$date_utc" \
  --torch "$torch_version" --steps "$steps" --warmup "$warmup" --gpt-shape "$gpt_label" \
  --device "$device" \
  >"$work/table.txt" 2>"$work/table.err" ||
  { echo "table.py failed:"; cat "$work/table.err"; }
cat "$work/table.txt"
# The last 200 kB of each piece's files (torch.compile's stderr can be long).
keep_pieces() {
  mkdir -p "$1"
  for f in "$work"/*; do
    [ -f "$f" ] || continue
    tail -c 200000 "$f" >"$1/$(basename "$f")"
  done
}
if [ -n "${GPU_BENCH_OUT:-}" ]; then
  mkdir -p "$GPU_BENCH_OUT"
  cp "$work/table.txt" "$GPU_BENCH_OUT/gpu_bench.txt"
  keep_pieces "$GPU_BENCH_OUT/gpu_bench"
elif [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$work/table.txt" "$OUT/gpu_bench.txt"
  keep_pieces "$work.pieces/gpu_bench"
  tar -C "$work.pieces" -cJf "$OUT/gpu_bench_pieces.tar.xz" gpu_bench
fi
exit 0
