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
#     travel. NCCL is not packed either (libnccl.so.2 is 218 MB, the carry
#     limit 64 MiB): a cohort built with the nccl backend finds the device
#     machine's (its toolkit's or PyTorch's nvidia-nccl package, see
#     find_cuda_libs); `run` fails a line naming any library the CLI lacks.
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
#   scripts/gpu_check.sh run dist   (there, as its own call: about 5 minutes)
#     the distributed checks of issue 36, every one at 2 ranks on the one GPU,
#     each command line first in its log:
#       dev_strategies.txt, nccl_tests.txt
#                       DDP, ZeRO 1-3, pipeline, tensor parallel and DDP over
#                       ToyMpModel, two ranks on threads on the GPU through
#                       native's staging, against one CPU process
#                       (cohort_parallel_tests DeviceStrategies*); the nccl
#                       backend's every op on the real NCCL at world size 1;
#       dist_equal.txt  DDP and ZeRO 1/2/3 at 2 ranks (64 examples each) against
#                       one process (128), Net on Fashion-MNIST, 20 steps, all
#                       on cuda: the epoch's train loss, the test loss and every
#                       weight of the step-20 checkpoint (bounds: 1e-3 on the
#                       losses, 2e-4 on the weights), through native (both
#                       ranks on cuda:0, host staging; --backend auto on one
#                       GPU, whose start-up line must say why native) and nccl
#                       (a distinct NCCL_HOSTID per rank: NCCL takes them for
#                       two hosts and talks over loopback sockets);
#       dist_fault.txt  workers started by hand (torchrun's env: RANK,
#                       WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...), rank 1
#                       SIGKILLed mid-training: rank 0 must end within 2 s
#                       naming rank 1 (native and nccl);
#       dist_overlap.txt
#                       GPT-2 124M at 2 ranks with --trace: `cohort trace-stats`
#                       overlap of the gradient all_reduce with backward
#                       (bound >= 70 %; host-side spans); DDP at world size 1
#                       against --strategy single, steps 10-30 (bound <= 3 %
#                       slower);
#       libtorch        SKIP: LibTorch is not built into the bundle.
#     nccl checks SKIP when the bundle's cohort has no nccl backend (`cohort
#     info`'s backends line). One device call runs at most 10 minutes: run
#     `run` (the single-GPU checks) and `run dist` as two calls; `run PART...`
#     runs only those parts (tests net gpt bench devtests equal fault overlap
#     libtorch; dist = the last five; default: the first four).
#
#   scripts/gpu_check.sh dry-dist   (here, no GPU: checks the script itself)
#     the distributed checks on the CPU with this tree's build/ (its cohort
#     CLI), a small GPT instead of GPT-2 124M, into /tmp/gpu_check_dry.
#
# Usage: scripts/gpu_check.sh pack | run [PART...] | dry-dist
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}

pack() {
  set -e
  local build=build-gpu
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_CUDA=ON \
    -DCOHORT_WITH_NCCL=ON -DCOHORT_WITH_ONEDNN=OFF -DCOHORT_WITH_MPI=OFF \
    -DCOHORT_WITH_LIBTORCH=OFF -DCOHORT_BUILD_BENCH=ON >/dev/null
  ninja -C "$build" cohort cohort_cuda_tests bench_gpt cohort_parallel_tests
  # The real-NCCL tests exist when the toolkit has NCCL (COHORT_HAVE_NCCL).
  if grep -q 'define COHORT_HAVE_NCCL 1' "$build/include/cohort/base/config.h"; then
    ninja -C "$build" cohort_nccl_tests
  else
    echo "pack: this toolkit has no NCCL: the bundle's cohort has no nccl backend"
  fi
  rm -rf .gpu && mkdir -p .gpu/stage/bin .gpu/stage/lib .gpu/stage/data/fashion-mnist
  cp "$build/tools/cohort/cohort" "$build/cohort/cuda/cohort_cuda_tests" \
    "$build/bench/gpt/bench_gpt" "$build/cohort/parallel/cohort_parallel_tests" .gpu/stage/bin/
  if [ -f "$build/cohort/distributed/cohort_nccl_tests" ]; then
    cp "$build/cohort/distributed/cohort_nccl_tests" .gpu/stage/bin/
  fi
  # Shared libraries from Debian (CUDA's and glibc's come from the machine).
  for b in .gpu/stage/bin/*; do
    ldd "$b" | awk '/=> \//{print $3}'
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

# Whether part $1 was asked for (the parts given to `run`, see the header).
want() {
  local p
  for p in $parts; do
    [ "$p" = "$1" ] && return 0
    [ "$p" = dist ] && case $1 in devtests | equal | fault | overlap | libtorch) return 0 ;; esac
  done
  return 1
}

run() {
  parts=${*:-tests net gpt bench}
  mkdir -p "$out"
  : >"$out/summary.txt"
  work=/tmp/cohort_gpu
  rm -rf "$work" && mkdir -p "$work"
  tar -C "$work" -xJf .gpu/bundle.tar.xz || { summary "FAIL unpack: .gpu/bundle.tar.xz missing (carry .gpu)"; return 1; }
  bin=$work/bin
  cuda_libs=$(find_cuda_libs)
  # Only cohort's programs see the bundle's libraries (PyTorch keeps its own).
  cohort_libs="$work/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  data=$work/data/fashion-mnist
  dev=cuda
  probe
  if ! nvidia-smi >/dev/null 2>&1; then summary "FAIL probe: no GPU visible"; fi
  local missing
  missing=$(LD_LIBRARY_PATH=$cohort_libs ldd "$bin/cohort" | grep 'not found' | tr -s ' \t\n' ' ')
  [ -z "$missing" ] || summary "FAIL libraries: the cohort CLI lacks: $missing"
  want tests && check_tests
  want net && check_net
  want gpt && check_gpt
  want bench && check_bench
  run_dist
  cat "$out/summary.txt"
}

# 1. The cuda tests.
check_tests() {
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
}

# 2. Net, one epoch, GPU against CPU: test accuracy within 0.5 points.
check_net() {
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
}

# 3. GPT, 50 steps, GPU against CPU, fp32 (TF32 off): per-step losses.
check_gpt() {
  cat README.md docs/*.md >"$work/corpus.txt"
  local g c
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
}

# 4. The benchmark against PyTorch (bench/gpu/run.sh writes $OUT/gpu_bench.txt).
check_bench() {
  if [ -x bench/gpu/run.sh ]; then
    local verdict=DONE
    LD_LIBRARY_PATH=$cohort_libs COHORT_BIN_DIR=$bin timeout 300 bench/gpu/run.sh "$work" "$data" >"$out/gpu_bench_log.txt" 2>&1 || verdict=FAIL
    summary "$verdict bench: see gpu_bench.txt / gpu_bench_log.txt"
  else
    summary "SKIP bench: bench/gpu/run.sh is not in this tree"
  fi
}

# ---- the distributed checks (issue 36) ----
# Set by run (the bundle, on cuda) or dry_dist (this tree's build, on the cpu):
# bin, cohort_libs, data, work, dev, and gpt2 (the overlap check's model flags).

# logrun LOG TIMEOUT CMD...: appends CMD's exact command line, then its output,
# to LOG; returns its exit status (124: past TIMEOUT seconds).
logrun() {
  local log=$1 t=$2
  shift 2
  {
    printf '$'
    printf ' %q' "$@"
    printf '\n'
  } >>"$log"
  LD_LIBRARY_PATH=$cohort_libs timeout "$t" "$@" >>"$log" 2>&1
  local rc=$?
  echo "(exit $rc)" >>"$log"
  return $rc
}

have_nccl() {
  LD_LIBRARY_PATH=$cohort_libs "$bin/cohort" info 2>/dev/null | grep -E '^backends:' | grep -qw nccl
}

# wrap: what runs the workers' program under `cohort run` for a backend: nccl gets a
# NCCL_HOSTID of its own per rank (cohort run gives every worker the same
# environment; LOCAL_RANK is expanded in each worker's shell), so NCCL takes
# the ranks sharing one GPU for two hosts and talks over loopback sockets.
set_wrap() {
  wrap=()
  if [ "$1" = nccl ]; then
    # shellcheck disable=SC2016  # expanded by each worker's shell
    wrap=(env NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN bash -c
      'NCCL_HOSTID=cohort-gpu-check-$LOCAL_RANK exec "$0" "$@"')
  fi
}

# Compares two runs: the last epoch record's train and test loss of each
# metrics file and every tensor of two checkpoints (safetensors, F32 read
# with the standard library only).
write_compare() {
  cat >"$work/compare.py" <<'EOF'
import array, json, struct, sys
def epoch(p):
    recs = [json.loads(l) for l in open(p)]
    return [r for r in recs if r.get("type") == "epoch"][-1]
def tensors(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        out[name] = array.array("f", body[b:e])
    return out
name, m1, m2, c1, c2, loss_bound, weight_bound = sys.argv[1:8]
try:
    e1, e2 = epoch(m1), epoch(m2)
    t1, t2 = tensors(c1), tensors(c2)
except Exception as ex:
    print(f"RESULT FAIL {name}: no result to compare ({type(ex).__name__}: {ex})")
    sys.exit(0)
dl = max(abs(e1["train_loss"] - e2["train_loss"]), abs(e1["test_loss"] - e2["test_loss"]))
if sorted(t1) != sorted(t2):
    print(f"RESULT FAIL {name}: the checkpoints hold different tensors: {sorted(t1)} vs {sorted(t2)}")
    sys.exit(0)
dw, worst = 0.0, ""
for k in t1:
    d = max((abs(a - b) for a, b in zip(t1[k], t2[k])), default=0.0)
    if d > dw:
        dw, worst = d, k
ok = dl <= float(loss_bound) and dw <= float(weight_bound) and e1["step"] == e2["step"]
print(f"RESULT {'PASS' if ok else 'FAIL'} {name}: {e2['step']} steps, train loss "
      f"{e1['train_loss']:.5f} vs {e2['train_loss']:.5f}, test loss {e1['test_loss']:.5f} vs "
      f"{e2['test_loss']:.5f}, max |loss diff| {dl:.2e} (bound {loss_bound}), max |weight diff| "
      f"{dw:.2e} in {worst or '-'} (bound {weight_bound})")
EOF
}

# (a) DDP and ZeRO 1/2/3 at 2 ranks against one process, through native and nccl.
check_equal() {
  local log=$out/dist_equal.txt
  : >"$log"
  write_compare
  local root=$work/equal
  rm -rf "$root" && mkdir -p "$root"
  local train=(train --model net --dataset fashion-mnist --data-dir "$data" --seed 1 --epochs 1
    --max-steps 20 --device "$dev" --threads 2)
  # One process takes the 128 examples two ranks of 64 take together.
  if ! logrun "$log" 180 "$bin/cohort" "${train[@]}" --strategy single --batch-size 128 \
    --checkpoint-dir "$root/single" --metrics "$root/single.jsonl"; then
    summary "FAIL equal: the one-process reference run failed (dist_equal.txt)"
    return
  fi
  local gpus=1 backend s flags name auto_line
  [ "$dev" = cuda ] && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  for backend in native nccl; do
    if [ "$backend" = nccl ] && ! have_nccl; then
      summary "SKIP equal nccl: the bundle's cohort has no nccl backend (cohort info: backends)"
      continue
    fi
    for s in ddp zero1 zero2 zero3; do
      case $s in
        ddp) flags=(--strategy ddp) ;;
        *) flags=(--strategy zero --zero-stage "${s#zero}") ;;
      esac
      # On one GPU, native is what --backend auto must pick (and say why).
      local asked=$backend
      [ "$backend" = native ] && [ "$gpus" = 1 ] && [ "$dev" = cuda ] && asked=auto
      name="$s $backend"
      set_wrap "$backend"
      local from
      from=$(($(wc -l <"$log") + 1))
      logrun "$log" 180 "$bin/cohort" run --nproc-per-node 2 --no-pin -- "${wrap[@]}" \
        "$bin/cohort" "${train[@]}" "${flags[@]}" --batch-size 64 --backend "$asked" \
        --checkpoint-dir "$root/$s-$backend" --metrics "$root/$s-$backend.jsonl"
      python3 "$work/compare.py" "$name" "$root/single.jsonl" "$root/$s-$backend.jsonl" \
        "$root/single/step-00000020/model.safetensors" \
        "$root/$s-$backend/step-00000020/model.safetensors" 1e-3 2e-4 >>"$log" 2>&1
      auto_line=""
      if [ "$asked" = auto ]; then
        if tail -n +"$from" "$log" | grep -q 'backend native (2 local ranks share 1 GPU: NCCL refuses two ranks on one GPU'; then
          auto_line="; --backend auto said why native"
        else
          auto_line="; FAIL: --backend auto's start-up line is missing or says otherwise"
        fi
      fi
      summary "$(grep "^RESULT .* $name:" "$log" | tail -1 | sed 's/^RESULT //')$auto_line"
    done
  done
}

# Whether process $1 runs (exists and is not a zombie).
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

# (b) rank 1 SIGKILLed mid-training; rank 0 must end within 2 s naming it.
# The workers are started by hand with torchrun's environment, so what ends
# rank 0 is its own group noticing, not a launcher stopping it.
check_fault() {
  local log=$out/dist_fault.txt
  : >"$log"
  local backend
  for backend in native nccl; do
    if [ "$backend" = nccl ] && ! have_nccl; then
      summary "SKIP fault nccl: the bundle's cohort has no nccl backend"
      continue
    fi
    local dir=$work/fault-$backend port r
    rm -rf "$dir" && mkdir -p "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    local pids=()
    for r in 0 1; do
      local cmd=(env "LD_LIBRARY_PATH=$cohort_libs" "RANK=$r" WORLD_SIZE=2 "LOCAL_RANK=$r" LOCAL_WORLD_SIZE=2
        MASTER_ADDR=127.0.0.1 "MASTER_PORT=$port" COHORT_NUM_THREADS=2)
      [ "$backend" = nccl ] && cmd+=("NCCL_HOSTID=cohort-gpu-check-$r" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
      cmd+=("$bin/cohort" train --model net --dataset fashion-mnist --data-dir "$data" --seed 1
        --epochs 20 --batch-size 64 --log-every 1 --strategy ddp --device "$dev" --backend "$backend")
      {
        printf '$ (rank %s, in the background)' "$r"
        printf ' %q' "${cmd[@]}"
        printf '\n'
      } >>"$log"
      "${cmd[@]}" >"$dir/rank$r.txt" 2>&1 &
      pids+=($!)
    done
    local waited=0
    until grep -q 'step 5/' "$dir/rank0.txt" 2>/dev/null || [ $waited -ge 900 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if ! grep -q 'step 5/' "$dir/rank0.txt"; then
      kill -9 "${pids[@]}" 2>/dev/null
      wait "${pids[@]}" 2>/dev/null
      cat "$dir/rank0.txt" "$dir/rank1.txt" >>"$log"
      summary "FAIL fault $backend: training did not reach step 5 in 90 s (dist_fault.txt)"
      continue
    fi
    local t0 t1 ms
    t0=$(date +%s%N)
    kill -9 "${pids[1]}"
    echo "kill -9 rank 1 (pid ${pids[1]}) at step 5+" >>"$log"
    # Rank 0's end, polled: it is our child, so once it exits it is a zombie
    # (kill -0 still succeeds) until `wait` reaps it; /proc says which.
    local deadline=$((t0 + 30000000000))
    while running "${pids[0]}" && [ "$(date +%s%N)" -lt "$deadline" ]; do sleep 0.02; done
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    local still=""
    if running "${pids[0]}"; then
      still=" (still running after 30 s: killed)"
      kill -9 "${pids[0]}"
    fi
    wait "${pids[0]}"
    local rc0=$?
    wait "${pids[1]}" 2>/dev/null
    echo "--- rank 0 (exit $rc0) ---" >>"$log"
    tail -20 "$dir/rank0.txt" >>"$log"
    local named=no
    grep -v '^epoch' "$dir/rank0.txt" | grep -qiE 'rank 1\b' && named=yes
    local verdict=FAIL
    [ "$ms" -le 2000 ] && [ $named = yes ] && [ "$rc0" -ne 0 ] && [ -z "$still" ] && verdict=PASS
    summary "$verdict fault $backend: rank 0 ended $ms ms after rank 1 was SIGKILLed (bound 2000), exit $rc0, rank 1 named: $named$still"
  done
}

# (c) overlap of the gradient all_reduce with backward at 2 ranks, and DDP's
# cost at world size 1.
check_overlap() {
  local log=$out/dist_overlap.txt
  : >"$log"
  local root=$work/overlap backend=native
  rm -rf "$root" && mkdir -p "$root"
  [ -f "$work/corpus.txt" ] || cat README.md docs/*.md >"$work/corpus.txt"
  have_nccl && [ "$dev" = cuda ] && backend=nccl
  local lm=(train "${gpt2[@]}" --dataset text --data-file "$work/corpus.txt" --epochs 1 --seed 1
    --eval-batches 1 --device "$dev" --log-every 1)
  set_wrap "$backend"
  logrun "$log" 240 "$bin/cohort" run --nproc-per-node 2 --no-pin -- "${wrap[@]}" \
    "$bin/cohort" "${lm[@]}" --strategy ddp --max-steps 12 --backend "$backend" \
    --trace "$root/trace.json"
  if logrun "$log" 60 "$bin/cohort" trace-stats "$root/trace.json"; then
    local overlap
    overlap=$(grep -oE 'overlap [0-9.]+%' "$log" | grep -oE '[0-9.]+' | sort -n | head -1)
    if [ -z "$overlap" ]; then
      summary "SKIP overlap: trace-stats reports no all_reduce overlap for this run: $(grep '^rank' "$log" | tr '\n' ' ')"
    else
      local v=FAIL
      python3 -c "import sys; sys.exit(0 if float('$overlap') >= 70 else 1)" && v=PASS
      summary "$v overlap $backend: ${gpt2[*]} at 2 ranks, the lower rank's all_reduce overlapped with backward: $overlap % (bound >= 70; host-side spans, see dist_overlap.txt)"
    fi
  else
    summary "FAIL overlap: no trace to read (dist_overlap.txt)"
  fi
  # DDP at world size 1 against one plain process: steps 10 to 30.
  logrun "$log" 240 "$bin/cohort" "${lm[@]}" --strategy single --max-steps 30 \
    --metrics "$root/single.jsonl"
  logrun "$log" 240 "$bin/cohort" run --nproc-per-node 1 --no-pin -- "$bin/cohort" "${lm[@]}" \
    --strategy ddp --max-steps 30 --metrics "$root/ddp1.jsonl"
  python3 - "$root/single.jsonl" "$root/ddp1.jsonl" >>"$log" 2>&1 <<'EOF'
import json, sys
def span(p):
    try:
        s = {r["step"]: r["seconds"] for r in map(json.loads, open(p)) if r.get("type") == "step"}
        return s[30] - s[10]
    except Exception:
        return None
single, ddp = span(sys.argv[1]), span(sys.argv[2])
if single is None or ddp is None:
    print(f"RESULT FAIL ddp world 1: no step times (single {single}, ddp {ddp})")
else:
    over = (ddp / single - 1) * 100
    print(f"RESULT {'PASS' if over <= 3 else 'FAIL'} ddp world 1: steps 10-30 took {ddp:.3f} s "
          f"under DDP, {single:.3f} s plain: {over:+.1f} % (bound <= 3 %)")
EOF
  summary "$(grep '^RESULT' "$log" | tail -1 | sed 's/^RESULT //')"
}

# (d) LibTorch's DDP on CUDA tensors: the bundle has no LibTorch (pack
# configures -DCOHORT_WITH_LIBTORCH=OFF: the bare device machine lacks it).
check_libtorch() {
  # cohort_libtorch_cuda_tests needs cohort built against a CUDA LibTorch
  # (PyTorch 2.11's, on the device machine only); the bundle is built here,
  # against Debian's CPU-only LibTorch 1.13, and the device machine lacks the
  # Debian headers and libraries (fmt, GoogleTest, OpenBLAS) to build cohort.
  summary "SKIP libtorch cuda: needs cohort built against PyTorch 2.11's LibTorch; not in the bundle (built against Debian's CPU-only LibTorch 1.13)"
}

# The strategies on the GPU in one process (two ranks on threads through
# native's host staging, real kernels: DDP, ZeRO 1-3, pipeline, tensor
# parallel, DDP over ToyMpModel against one CPU process) and the nccl
# backend on the real NCCL at world size 1.
check_devtests() {
  LD_LIBRARY_PATH=$cohort_libs timeout 120 "$bin/cohort_parallel_tests" \
    --gtest_filter='DeviceStrategies*' >"$out/dev_strategies.txt" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    summary "PASS device strategies: $(grep -E '^\[  PASSED  \]' "$out/dev_strategies.txt")"
  else
    summary "FAIL device strategies (rc $rc): see dev_strategies.txt"
    grep -E '^\[  FAILED  \]' "$out/dev_strategies.txt" | head -10 >>"$out/summary.txt"
  fi
  if [ ! -x "$bin/cohort_nccl_tests" ]; then
    summary "SKIP nccl tests: the bundle was built without NCCL"
    return 0
  fi
  LD_LIBRARY_PATH=$cohort_libs timeout 120 "$bin/cohort_nccl_tests" >"$out/nccl_tests.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    summary "FAIL nccl tests (rc $rc): see nccl_tests.txt"
  elif grep -qE '^\[ +SKIPPED +\] .*\([0-9]+ ms\)$' "$out/nccl_tests.txt"; then
    summary "SKIP nccl tests: skipped, the GPU was not usable"
  else
    summary "PASS nccl tests: $(grep -E '^\[  PASSED  \]' "$out/nccl_tests.txt")"
  fi
}

run_dist() {
  [ -n "${gpt2+x}" ] || gpt2=(--model gpt2 --batch-size 4)
  want devtests && [ "$dev" = cuda ] && check_devtests
  want equal && check_equal
  want fault && check_fault
  want overlap && check_overlap
  want libtorch && check_libtorch
  return 0
}

# The distributed checks on this machine's CPU with build/'s cohort: checks
# the script (commands, parsing, bounds), not the GPU.
dry_dist() {
  out=/tmp/gpu_check_dry
  work=/tmp/gpu_check_dry/work
  rm -rf "$out" && mkdir -p "$work"
  : >"$out/summary.txt"
  bin=$PWD/build/tools/cohort
  cohort_libs=${LD_LIBRARY_PATH:-}
  data=/usr/share/datasets/fashion-mnist
  dev=cpu
  gpt2=(--model gpt --n-layer 2 --n-embd 64 --n-head 2 --block-size 64 --batch-size 4)
  parts=dist
  run_dist
  cat "$out/summary.txt"
}

case "$mode" in
  pack) pack ;;
  run)
    shift
    run "$@"
    ;;
  dry-dist) dry_dist ;;
  *)
    echo "usage: scripts/gpu_check.sh pack | run [PART...] | dry-dist" >&2
    exit 2
    ;;
esac
