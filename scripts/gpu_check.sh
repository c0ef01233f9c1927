#!/usr/bin/env bash
# The GPU check of issue 35, in two halves:
#
#   scripts/gpu_check.sh pack   (here, on a machine with the toolkit and no GPU)
#     builds cohort for the device machine in build-gpu/ (the CUDA layer for
#     sm_90; no oneDNN, MPI or LibTorch, whose libraries the bare device
#     machine lacks), and packs into .gpu/ (ignored by git; carried by the
#     device tool) the cohort CLI, the cuda tests, bench_gpt, the Debian
#     shared libraries they need (not CUDA's: the device machine has its
#     own, and libstdc++ / libgcc_s, whose newer versions there serve
#     PyTorch too), Fashion-MNIST, xz-compressed. Prints the size that will
#     travel.
#
#   scripts/gpu_check.sh run    (there: device tool, `carry: [".gpu"]`)
#     in about 8 minutes on an H100, writing everything under $OUT:
#       probe.txt       driver, GPU, nvcc, the CUDA/cuDNN/NCCL libraries found,
#                       PyTorch's version and cmake_prefix_path
#       cuda_tests.xml  every `cuda` test (gtest XML), cuda_tests.txt its log
#       net.txt         Net, one epoch, on the GPU and on the CPU: test
#                       accuracy of each and the difference (bound 0.5 points)
#       gpt.txt         GPT (the reference size), 50 steps on the GPU and on the
#                       CPU: the largest difference of the per-step losses
#                       (bound: 2e-3 in fp32 with TF32 off)
#       gpu_bench.txt   bench/gpu/run.sh: GPT-2 124M bf16 ms/step against
#                       PyTorch eager and torch.compile, MFU, peak memory; Net
#                       one epoch against PyTorch
#       summary.txt     one line per check: PASS / FAIL / SKIP and why
#     Each part runs under its own time-out and a failure goes on to the next
#     part, so one broken kernel does not hide the rest.
#
# Usage: scripts/gpu_check.sh pack | run
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

pack() {
  set -e
  local build=build-gpu
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_CUDA=ON \
    -DCOHORT_WITH_ONEDNN=OFF -DCOHORT_WITH_MPI=OFF -DCOHORT_WITH_LIBTORCH=OFF \
    -DCOHORT_BUILD_BENCH=ON >/dev/null
  ninja -C "$build" cohort cohort_cuda_tests bench_gpt
  rm -rf .gpu && mkdir -p .gpu/stage/bin .gpu/stage/lib .gpu/stage/data/fashion-mnist
  cp "$build/tools/cohort/cohort" "$build/cohort/cuda/cohort_cuda_tests" \
    "$build/bench/gpt/bench_gpt" .gpu/stage/bin/
  # Shared libraries from Debian (CUDA's and glibc's come from the machine).
  for bin in .gpu/stage/bin/*; do
    ldd "$bin" | awk '/=> \//{print $3}'
  done | sort -u | grep -v -E 'libcu|libnv|libnccl|libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libstdc\+\+|libgcc_s' |
    while read -r lib; do cp -L "$lib" .gpu/stage/lib/; done
  cp /usr/share/datasets/fashion-mnist/*.gz .gpu/stage/data/fashion-mnist/
  strip .gpu/stage/bin/* .gpu/stage/lib/* 2>/dev/null || true
  tar -C .gpu/stage -cf - . | xz -T2 -6 >.gpu/bundle.tar.xz
  rm -rf .gpu/stage
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  du -h .gpu/bundle.tar.xz
  echo "carry .gpu; run: bash scripts/gpu_check.sh run"
}

# ---- the device side ----

out=${OUT:-/tmp/gpu_check_out}
summary() { echo "$1" | tee -a "$out/summary.txt"; }

probe() {
  {
    echo "date: $(date -u)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
    nvcc --version 2>&1 | tail -2 || true
    echo "-- ldconfig:"
    ldconfig -p | grep -E 'libcudart|libcublasLt|libcudnn\.so|libnccl' || echo "(none in ldconfig)"
    echo "-- python:"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version()); print("cmake_prefix_path", torch.utils.cmake_prefix_path)' 2>&1
    echo "-- pip CUDA libraries: $cuda_libs"
    echo "-- cohort info:"
    LD_LIBRARY_PATH=$cohort_libs "$bin/cohort" info 2>&1
  } >"$out/probe.txt" 2>&1
  cat "$out/probe.txt"
}

# The CUDA libraries cohort links (cudart, cuBLASLt, cuDNN): from the machine's
# toolkit, else from PyTorch's pip packages (nvidia-*-cu13).
find_cuda_libs() {
  local dirs="" d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && dirs="$dirs:$d"; done
  local site
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)/nvidia
  if [ -d "$site" ]; then
    for d in "$site"/*/lib; do dirs="$dirs:$d"; done
  fi
  echo "${dirs#:}"
}

run() {
  mkdir -p "$out"
  : >"$out/summary.txt"
  local work=/tmp/cohort_gpu
  rm -rf "$work" && mkdir -p "$work"
  tar -C "$work" -xJf .gpu/bundle.tar.xz || { summary "FAIL unpack: .gpu/bundle.tar.xz missing (carry .gpu)"; return 1; }
  bin=$work/bin
  cuda_libs=$(find_cuda_libs)
  # Only cohort's programs see the bundle's libraries (PyTorch keeps its own).
  cohort_libs="$work/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local data=$work/data/fashion-mnist
  probe
  if ! nvidia-smi >/dev/null 2>&1; then summary "FAIL probe: no GPU visible"; fi

  # 1. The cuda tests.
  LD_LIBRARY_PATH=$cohort_libs timeout 240 "$bin/cohort_cuda_tests" --gtest_output=xml:"$out/cuda_tests.xml" \
    >"$out/cuda_tests.txt" 2>&1
  local rc=$?
  local counts skipped
  counts=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/cuda_tests.txt" | tr -s ' \n' ' ')
  skipped=$(grep -cE '^\[ +SKIPPED +\] .*\([0-9]+ ms\)$' "$out/cuda_tests.txt")
  if [ $rc -ne 0 ]; then
    summary "FAIL cuda tests (rc $rc): $counts"
  elif [ "$skipped" -gt 0 ]; then
    summary "SKIP cuda tests: $skipped skipped, the GPU was not usable: $counts"
  else
    summary "PASS cuda tests: $counts"
  fi
  grep -E '^\[  FAILED  \]' "$out/cuda_tests.txt" | head -40 >>"$out/summary.txt"

  # 2. Net, one epoch, GPU against CPU: test accuracy within 0.5 points.
  local net=(train --model net --epochs 1 --batch-size 64 --data-dir "$data" --seed 1 --strategy single)
  LD_LIBRARY_PATH=$cohort_libs timeout 120 "$bin/cohort" "${net[@]}" --device cuda --metrics "$work/net_gpu.jsonl" >"$out/net.txt" 2>&1
  local g=$?
  LD_LIBRARY_PATH=$cohort_libs timeout 150 "$bin/cohort" "${net[@]}" --device cpu --metrics "$work/net_cpu.jsonl" >>"$out/net.txt" 2>&1
  local c=$?
  python3 - "$work/net_gpu.jsonl" "$work/net_cpu.jsonl" "$g" "$c" >>"$out/net.txt" 2>&1 <<'EOF'
import json, sys
def acc(p):
    try:
        recs = [json.loads(l) for l in open(p)]
        return [r for r in recs if r.get("type") == "epoch"][-1]["test_accuracy"]
    except Exception as e:
        return None
gpu, cpu = acc(sys.argv[1]), acc(sys.argv[2])
if gpu is None or cpu is None:
    print(f"RESULT FAIL net: no accuracy (gpu run rc {sys.argv[3]}: {gpu}, cpu run rc {sys.argv[4]}: {cpu})")
else:
    d = abs(gpu - cpu) * 100
    print(f"RESULT {'PASS' if d <= 0.5 else 'FAIL'} net: accuracy gpu {gpu*100:.2f} % cpu {cpu*100:.2f} %, |diff| {d:.2f} points (bound 0.5)")
EOF
  summary "$(grep '^RESULT' "$out/net.txt" | sed 's/^RESULT //')"

  # 3. GPT, 50 steps, GPU against CPU, fp32 (TF32 off): per-step losses.
  cat README.md docs/*.md >"$work/corpus.txt"
  local gpt=(train --model gpt --dataset text --data-file "$work/corpus.txt" --max-steps 50 --epochs 1 --seed 1 --strategy single --batch-size 16)
  LD_LIBRARY_PATH=$cohort_libs timeout 120 "$bin/cohort" "${gpt[@]}" --device cuda --metrics "$work/gpt_gpu.jsonl" >"$out/gpt.txt" 2>&1
  g=$?
  LD_LIBRARY_PATH=$cohort_libs timeout 180 "$bin/cohort" "${gpt[@]}" --device cpu --metrics "$work/gpt_cpu.jsonl" >>"$out/gpt.txt" 2>&1
  c=$?
  python3 - "$work/gpt_gpu.jsonl" "$work/gpt_cpu.jsonl" "$g" "$c" >>"$out/gpt.txt" 2>&1 <<'EOF'
import json, sys
def losses(p):
    try:
        return [r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "step"]
    except Exception:
        return []
gpu, cpu = losses(sys.argv[1]), losses(sys.argv[2])
n = min(len(gpu), len(cpu))
if n < 50:
    print(f"RESULT FAIL gpt: {len(gpu)} gpu steps (rc {sys.argv[3]}), {len(cpu)} cpu steps (rc {sys.argv[4]})")
else:
    worst = max(abs(a - b) for a, b in zip(gpu[:n], cpu[:n]))
    print(f"RESULT {'PASS' if worst <= 2e-3 else 'FAIL'} gpt: 50 steps, loss {gpu[0]:.4f} -> gpu {gpu[n-1]:.4f} / cpu {cpu[n-1]:.4f}, max |diff| {worst:.2e} (bound 2e-3)")
EOF
  summary "$(grep '^RESULT' "$out/gpt.txt" | sed 's/^RESULT //')"

  # 4. The benchmark against PyTorch (bench/gpu/run.sh writes $OUT/gpu_bench.txt).
  if [ -x bench/gpu/run.sh ]; then
    LD_LIBRARY_PATH=$cohort_libs COHORT_BIN_DIR=$bin timeout 300 bench/gpu/run.sh "$work" "$data" >"$out/gpu_bench_log.txt" 2>&1
    summary "$([ $? -eq 0 ] && echo DONE || echo FAIL) bench: see gpu_bench.txt / gpu_bench_log.txt"
  else
    summary "SKIP bench: bench/gpu/run.sh is not in this tree"
  fi
  cat "$out/summary.txt"
}

case "$mode" in
  pack) pack ;;
  run) run ;;
  *)
    echo "usage: scripts/gpu_check.sh pack | run" >&2
    exit 2
    ;;
esac
