#!/usr/bin/env bash
# The GPU check (issues 35, 36, 44): built and packed here, run on the device machine in calls
# that fit the device tool (docs/gpu.md, "The check on a GPU").
#
# THE DEVICE TOOL'S LIMITS, and how this script keeps them
#   - a command runs 600 s at most: each call plans <= 540 s, the sum of its parts' time-outs
#     (printed first, in summary.txt); every part stops at its own time-out, and at the call's
#     (GPU_CHECK_CALL_S, default 540, lower it to fit what `status` says is left), whichever is
#     first; a part with no time left is reported "not started", the call goes on to the next;
#   - 15 minutes of device time a session, machine start (1-2 min) included: the CPU references
#     are made here by `pack` and carried, never run there; most valuable call first;
#   - 8 files come back from $OUT (16 MiB each, 64 MiB in all, 2 folders down): a call writes
#     summary.txt and one archive, CALL.tar.xz, of everything else;
#   - 64 MiB of tree travels: `pack` fails above 56 MiB for any call (tree + what it carries),
#     builds sm_90 code only (90-real, no compute_90 PTX) and each call carries only its parts.
#
# THE CALLS, in order (most valuable first), with their budgets in seconds and what they return
#   1. tests   setup 40, cuda_tests 190, nccl_tests 60, archive 15          = 305
#              every `cuda` test (cohort_cuda_tests, then cohort_nccl_tests: the nccl backend on
#              the real NCCL at world size 1); tests.tar.xz: probe.txt, cuda_tests.N.xml / .txt,
#              nccl_tests.N.xml / .txt (N: the run; a run that dies is followed by one past it)
#   2. train   setup 40, net 120, gpt 100, archive 15                         = 275
#              Net one epoch and GPT (the reference size) 50 steps on the GPU, against the CPU
#              runs pack made here (refs/): test accuracy within 0.5 points, per-step losses
#              within 2e-3 (fp32, TF32 off); train.tar.xz: probe.txt, net.txt, gpt.txt, metrics
#   `tests train` in one command: 540 (one machine start fewer); it returns summary.txt,
#   tests.tar.xz and train.tar.xz.
#   3. bench   setup 40, bench 460, archive 15                                = 515
#              bench/gpu/run.sh: the bf16 GEMM peak, GPT-2 124M bf16 ms/step, MFU and peak memory
#              against PyTorch eager and torch.compile, Net against PyTorch; bench.tar.xz:
#              probe.txt, gpu_bench.txt (the table), gpu_bench/ (each piece's output)
#   4. dist    setup 40, devtests 90, equal 150, multi 60, fault 80, overlap 100, archive 15
#                                                                             = 535
#              DeviceStrategies* on the GPU; DDP and ZeRO 1/2/3 at 2 ranks on one GPU against one
#              process through native (--backend auto must say why) and nccl (a NCCL_HOSTID per
#              rank: loopback sockets); with >= 2 GPUs (nvidia-smi) DDP and ZeRO 3 through real
#              NCCL, each rank its own GPU; a SIGKILLed rank ends the other within 2 s (native,
#              nccl); all_reduce overlap of GPT-2 124M at 2 ranks (>= 70 %) and DDP's cost at
#              world size 1 (<= 3 %); dist.tar.xz: probe.txt, dist_*.txt, dev_strategies.*
#   Every call's summary.txt: the budget, the probe (libraries, GPU), then one line per check,
#   PASS / FAIL / SKIP and why, and last the check of what returns.
#
# THE COMMANDS, in order
#   here:  scripts/gpu_check.sh pack   builds build-gpu/ (slow: a fresh build with nvcc on 2
#          cores), makes the CPU references, packs .gpu/, checks its sizes, and adds /.gpu/ to
#          the repository's info/exclude (shared by its worktrees). The device tool sends the
#          checkout the session was started in (not a helper's worktree): .gpu/ must be in
#          that checkout's root (copy it there), ignored (`git status` shows none of it).
#   there: the device tool's `run`, one at a time; each next call right after the reply (the
#          machine stays warm 30 s; a cold start costs 1-2 min of the 15):
#     run(command="bash scripts/gpu_check.sh run tests train", timeout_s=600,
#         carry=[".gpu/core", ".gpu/tests", ".gpu/data", ".gpu/refs"])
#     run(command="bash scripts/gpu_check.sh run bench", timeout_s=600,
#         carry=[".gpu/core", ".gpu/bench", ".gpu/data"])
#     run(command="bash scripts/gpu_check.sh run dist", timeout_s=600,
#         carry=[".gpu/core", ".gpu/dist", ".gpu/data"])
#     then give_back.
#   The time-outs are upper bounds: the three together could take 1,590 s, more than a
#   session's 900 (no call has run on a GPU yet, so how long each really takes is unknown).
#   Before each call read `status`'s budget_left_s and, where it is under the call's budget plus
#   about 90 s (start, transfers), prefix GPU_CHECK_CALL_S=<budget_left_s - 90>: the parts then
#   share that (the later ones "not started"). `pack` prints each command's carry and size;
#   where `tests train` does not fit, run `run tests` (carry core, tests) and `run train`
#   (core, data, refs) as two calls. GPU_CHECK_S_<part>=SECONDS changes a part's time-out
#   (`run` refuses a call over 540 s).
#
# LIBRARIES. Each CUDA library set comes whole from one place (scripts/gpu_check/probe_libs.py):
#   the toolkit's /usr/local/cuda/lib64 or lib, else the loader's cache, else PyTorch's pip
#   packages; cuDNN's eight libraries (libcudnn, _graph, _engines_precompiled,
#   _engines_runtime_compiled, _heuristic, _ops, _cnn, _adv) from one folder, first on cohort's
#   LD_LIBRARY_PATH: the toolkit's and pip's cuDNN are never mixed, PyTorch keeps its own. Each
#   is opened by name (cuBLASLt, NCCL and cuDNN's sub-libraries are opened at first use, so ldd
#   does not see them) and the file the loader took is printed in probe.txt.
#
# HERE, WITHOUT A GPU
#   scripts/gpu_check.sh dry-run [DIR]   every call's flow on the CPU with this tree's build/
#     (cohort, bench_gpt, cohort_cuda_tests, cohort_nccl_tests, cohort_parallel_tests: what is
#     built), tiny sizes and --device cpu, through the same bundle, unpack and archive; writes
#     what each call returns under DIR/<call>/ (default /tmp/gpu_check_dry) and checks it: at
#     most 8 files, their sizes, depth and names, each call's budget <= 540 s. Exit 1 when a
#     limit is broken. It prints its bundle's sizes but does not judge them (build/ links
#     oneDNN and MPI and is packed at xz -0: pack's bundle has neither, and pack judges it). GPU_CHECK_DRY_CALLS="dist ..." runs only those calls; GPU_CHECK_BUILD
#     another build. (tests/gpu_check runs it under ctest: GpuCheckScript.*)
#   scripts/gpu_check.sh pack --dry [BUILD]   the bundle of BUILD (default build/) into a
#     temporary folder, with its size check, without building
#   scripts/gpu_check.sh budget [CALL...]     the plan: each call's parts and time-outs
#   scripts/gpu_check.sh limits DIR           what the device tool would return from DIR
#   OUT=DIR scripts/gpu_check.sh gtest-run NAME PROGRAM [FILTER]   a gtest program run as the
#     calls run theirs (re-run past a test it died in), its verdict in DIR/summary.txt
#
# Usage: scripts/gpu_check.sh pack [--dry [BUILD]] | run CALL... | dry-run [DIR] | budget [CALL...]
#        | limits DIR
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
here=$repo/scripts/gpu_check
# shellcheck source=scripts/gpu_check/dist.sh
source "$here/dist.sh"

# ---- the plan ----
PLANNED_S=540
declare -A PART_S=([setup]=40 [cuda_tests]=190 [nccl_tests]=60 [net]=120 [gpt]=100 [bench]=460
  [devtests]=90 [equal]=150 [multi]=60 [fault]=80 [overlap]=100 [libtorch]=0 [archive]=15)
declare -A CALL_PARTS=([tests]="cuda_tests nccl_tests" [train]="net gpt" [bench]="bench"
  [dist]="devtests equal multi fault overlap libtorch")
declare -A CALL_CARRY=([tests]="core tests" [train]="core data refs" [bench]="core bench data"
  [dist]="core dist data")
# GPU_CHECK_S_<part>=SECONDS changes a part's time-out (the budget checks still hold).
for p in "${!PART_S[@]}"; do
  v=GPU_CHECK_S_$p
  [ -n "${!v:-}" ] && PART_S[$p]=${!v}
done
CALLS=(tests train bench dist)
# The commands of the header, as carried together (checked by pack and the dry run).
PLANNED_RUNS=("tests train" "bench" "dist")
PACK_LIMIT_MIB=${GPU_CHECK_PACK_LIMIT_MIB:-56}

# budget_of CALL...: setup once, every part, an archive per call.
budget_of() {
  local s=${PART_S[setup]} c p
  for c in "$@"; do
    for p in ${CALL_PARTS[$c]}; do s=$((s + PART_S[$p])); done
    s=$((s + PART_S[archive]))
  done
  echo "$s"
}

budget_line() {
  local c p text="setup ${PART_S[setup]}"
  for c in "$@"; do
    for p in ${CALL_PARTS[$c]}; do text+=" + $p ${PART_S[$p]}"; done
    text+=" + archive ${PART_S[archive]}"
  done
  echo "budget of '$*': $text = $(budget_of "$@") s (planned <= $PLANNED_S, a command's limit 600)"
}

# carry_of CALL...: the bundle's folders these calls carry, each once.
carry_of() {
  local c x out=""
  for c in "$@"; do
    for x in ${CALL_CARRY[$c]}; do [[ " $out " == *" $x "* ]] || out+=" $x"; done
  done
  echo "${out# }"
}

valid_calls() {
  local c
  [ $# -gt 0 ] || return 1
  for c in "$@"; do [ -n "${CALL_PARTS[$c]+x}" ] || return 1; done
}

budget() {
  local rc=0 c
  [ $# -gt 0 ] || set -- "${CALLS[@]}"
  for c in "$@"; do
    valid_calls "$c" || { echo "budget: no call '$c' (calls: ${CALLS[*]})" >&2; return 2; }
  done
  for c in "$@"; do
    budget_line "$c"
    (($(budget_of "$c") <= PLANNED_S)) || { echo "FAIL budget: '$c' over $PLANNED_S s"; rc=1; }
  done
  for c in "${PLANNED_RUNS[@]}"; do
    [[ $c == *" "* ]] || continue # a single call: above
    # shellcheck disable=SC2086  # a list of calls
    budget_line $c
    # shellcheck disable=SC2086
    (($(budget_of $c) <= PLANNED_S)) || { echo "FAIL budget: '$c' over $PLANNED_S s"; rc=1; }
  done
  return $rc
}

# ---- packing ----

# bundle BUILD DEST XZ_LEVEL: DEST/<folder>/ for each folder a call carries: core (the cohort
# CLI, the Debian libraries every packed program needs, manifest.txt), tests, bench, dist (their
# programs), data (Fashion-MNIST and the GPT's corpus, as they are). The refs folder is
# make_refs's. A program not built is left out (its part then says so).
bundle() {
  local build=$1 dest=$2 level=$3 stage
  stage=$(mktemp -d)
  rm -rf "$dest"/{core,tests,bench,dist,data} && mkdir -p "$dest"
  local -A prog=([cohort]=core:tools/cohort/cohort [cohort_cuda_tests]=tests:cohort/cuda/cohort_cuda_tests
    [cohort_nccl_tests]=tests:cohort/distributed/cohort_nccl_tests [bench_gpt]=bench:bench/gpt/bench_gpt
    [cohort_parallel_tests]=dist:cohort/parallel/cohort_parallel_tests)
  local name comp path
  for name in "${!prog[@]}"; do
    comp=${prog[$name]%%:*}
    path=$build/${prog[$name]#*:}
    [ -x "$path" ] || { echo "bundle: $name is not built in $build (left out)"; continue; }
    mkdir -p "$stage/$comp/bin"
    cp "$path" "$stage/$comp/bin/"
  done
  [ -x "$stage/core/bin/cohort" ] || { echo "bundle: no cohort CLI in $build" >&2; rm -rf "$stage"; return 1; }
  # Shared libraries from Debian (CUDA's come from the device machine; glibc, libstdc++ and
  # libgcc_s too: theirs are newer and serve PyTorch as well).
  mkdir -p "$stage/core/lib"
  for path in "$stage"/*/bin/*; do ldd "$path" | awk '/=> \//{print $3}'; done | sort -u |
    grep -v -E 'libcu|libnv|libnccl|libc\.so|libm\.so|libdl|libpthread|librt|ld-linux|libstdc\+\+|libgcc_s' |
    while read -r path; do cp -L "$path" "$stage/core/lib/"; done
  strip "$stage"/*/bin/* "$stage"/core/lib/* 2>/dev/null
  {
    echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') from $build ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null))"
    grep -E '^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' /usr/local/cuda/include/cudnn_version.h 2>/dev/null | awk '{printf "%s=%s ", $2, $3}'
    grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' /usr/local/cuda/include/nccl.h 2>/dev/null | awk '{printf "%s=%s ", $2, $3}'
    echo
    grep -E '^COHORT_CUDA_ARCHITECTURES' "$build/CMakeCache.txt" 2>/dev/null
  } >"$stage/core/manifest.txt"
  for comp in core tests bench dist; do
    [ -d "$stage/$comp" ] || continue
    mkdir -p "$dest/$comp"
    tar -C "$stage/$comp" -cf - . | xz -T2 "-$level" >"$dest/$comp/$comp.tar.xz" || return 1
  done
  rm -rf "$stage"
  mkdir -p "$dest/data/fashion-mnist"
  cp /usr/share/datasets/fashion-mnist/*.gz "$dest/data/fashion-mnist/"
  cat "$repo"/README.md "$repo"/docs/*.md >"$dest/data/corpus.txt"
}

# The training runs of the train call, the same for the CPU reference (pack, here) and the
# device run: `net_args SIZE` and `gpt_args SIZE`, SIZE full or tiny (the dry run).
net_args() {
  if [ "$1" = full ]; then
    echo train --model net --epochs 1 --batch-size 64 --seed 1 --strategy single
  else
    echo train --model net --epochs 1 --batch-size 64 --seed 1 --strategy single --max-steps 30
  fi
}
gpt_steps() { if [ "$1" = full ]; then echo 50; else echo 10; fi; }
gpt_args() {
  local a
  a="train --model gpt --dataset text --max-steps $(gpt_steps "$1") --epochs 1 --seed 1 --strategy single --batch-size 16 --eval-batches 1"
  [ "$1" = full ] || a+=" --n-layer 1 --n-head 2 --n-embd 32 --block-size 32"
  echo "$a"
}

# make_refs BIN DEST SIZE: the CPU references of the train call, into DEST/refs, with the
# command lines that made them (the device run refuses references of other flags).
make_refs() {
  local cli=$1 dest=$2 size=$3 a
  rm -rf "$dest/refs" && mkdir -p "$dest/refs"
  read -ra a <<<"$(net_args "$size")"
  echo "${a[*]}" >"$dest/refs/net.args"
  echo "making the CPU reference: ${a[*]} --device cpu"
  timeout 1800 "$cli" "${a[@]}" --data-dir "$dest/data/fashion-mnist" --device cpu \
    --metrics "$dest/refs/net_cpu.jsonl" >"$dest/refs/net_cpu.txt" 2>&1 || { tail -5 "$dest/refs/net_cpu.txt"; return 1; }
  read -ra a <<<"$(gpt_args "$size")"
  echo "${a[*]}" >"$dest/refs/gpt.args"
  echo "making the CPU reference: ${a[*]} --device cpu"
  timeout 1800 "$cli" "${a[@]}" --data-file "$dest/data/corpus.txt" --device cpu \
    --metrics "$dest/refs/gpt_cpu.jsonl" >"$dest/refs/gpt_cpu.txt" 2>&1 || { tail -5 "$dest/refs/gpt_cpu.txt"; return 1; }
}

# check_bundle DEST: what each call and each planned command carries, with the tree that
# travels anyway (tracked and untracked-not-ignored files), against PACK_LIMIT_MIB.
check_bundle() {
  local dest=$1 tree rc=0 c x bytes
  tree=$(git -C "$repo" ls-files -co --exclude-standard -z | (cd "$repo" && xargs -0 stat -c %s 2>/dev/null) |
    awk '{s += $1} END {print s + 0}')
  # A shared/ folder inside the checkout travels whole, ignored or not.
  [ -d "$repo/shared" ] && tree=$((tree + $(du -sb "$repo/shared" | cut -f1)))
  echo "the tree that travels anyway: $((tree / 1024)) KiB"
  local runs=("${CALLS[@]}") r
  for r in "${PLANNED_RUNS[@]}"; do [[ $r == *" "* ]] && runs+=("$r"); done
  for c in "${runs[@]}"; do
    bytes=$tree
    local carry=()
    # shellcheck disable=SC2086  # a list of calls
    for x in $(carry_of $c); do
      [ -d "$dest/$x" ] && bytes=$((bytes + $(du -sb "$dest/$x" | cut -f1)))
      carry+=("\".gpu/$x\"")
    done
    local mib
    mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
    local verdict=PASS
    ((bytes > PACK_LIMIT_MIB * 1048576)) && { verdict=FAIL; rc=1; }
    echo "$verdict size '$c': $mib MiB with carry=[$(
      IFS=,
      echo "${carry[*]}"
    )] (limit $PACK_LIMIT_MIB MiB; the tool's 64)"
  done
  return $rc
}

exclude_bundle() {
  local ex
  ex=$(git -C "$repo" rev-parse --git-path info/exclude) || return 0
  [[ $ex = /* ]] || ex=$repo/$ex
  mkdir -p "$(dirname "$ex")"
  grep -qx '/.gpu/' "$ex" 2>/dev/null || echo '/.gpu/' >>"$ex"
}

pack() {
  if [ "${1:-}" = --dry ]; then
    local build=${2:-build} dest
    dest=$(mktemp -d)
    echo "pack --dry: the bundle of $build in $dest (xz -1; pack uses -9; no CPU references: a few KiB)"
    bundle "$build" "$dest" 1 || return 1
    check_bundle "$dest"
    local rc=$?
    rm -rf "$dest"
    return $rc
  fi
  set -e
  local build=build-gpu
  # sm_90 machine code only (no compute_90 PTX for the driver to compile); no oneDNN, MPI or LibTorch,
  # whose libraries the bare device machine lacks; no RUNPATH, so LD_LIBRARY_PATH alone says
  # which CUDA libraries the programs load.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_CUDA=ON \
    -DCOHORT_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DCOHORT_WITH_NCCL=ON -DCOHORT_WITH_ONEDNN=OFF -DCOHORT_WITH_MPI=OFF \
    -DCOHORT_WITH_LIBTORCH=OFF -DCOHORT_WITH_TORCH_BACKEND=OFF -DCOHORT_BUILD_BENCH=ON \
    -DCMAKE_SKIP_RPATH=ON >/dev/null
  local targets=(cohort cohort_cuda_tests bench_gpt cohort_parallel_tests)
  # The real-NCCL tests exist when the toolkit has NCCL (COHORT_HAVE_NCCL).
  grep -q 'define COHORT_HAVE_NCCL 1' "$build/include/cohort/base/config.h" && targets+=(cohort_nccl_tests)
  nice -n 19 ninja -C "$build" -j"${GPU_CHECK_JOBS:-1}" "${targets[@]}"
  set +e
  bundle "$build" .gpu 9 || return 1
  local need
  for need in core/core.tar.xz tests/tests.tar.xz bench/bench.tar.xz dist/dist.tar.xz; do
    [ -f ".gpu/$need" ] || { echo "pack: FAIL: .gpu/$need was not made (a program is missing in $build)"; return 1; }
  done
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 make_refs "$build/tools/cohort/cohort" .gpu full || return 1
  exclude_bundle
  du -sh .gpu/*
  check_bundle .gpu || { echo "pack: FAIL: a call would carry more than $PACK_LIMIT_MIB MiB"; return 1; }
  echo "pack: done; the device tool's commands are in this script's header"
}

# ---- the device side ----
# Set by run: out (the tool's $OUT), work, bin, data, refs, dev, size, dry, gpus, cohort_libs,
# gpt2; per call: stage (its files, archived at its end).

summary() { echo "$1" | tee -a "$out/summary.txt"; }
# result_line TEXT: results.py's verdict (RESULT ...) into the summary, its detail lines too.
result_line() {
  local first=1 line
  while IFS= read -r line; do
    if ((first)); then summary "${line#RESULT }"; else echo "$line" >>"$out/summary.txt"; fi
    first=0
  done <<<"$1"
}

now() { date +%s; }
# part_begin NAME: the part's deadline: its time-out, or the call's end if sooner.
# Returns 1, saying so, when less than 3 s are left for it (the call's time is spent).
part_begin() {
  part=$1
  part_deadline=$(($(now) + PART_S[$1]))
  ((part_deadline > call_deadline)) && part_deadline=$call_deadline
  local granted=$((part_deadline - $(now)))
  echo "-- part $1: time-out ${PART_S[$1]} s, $granted s granted ($(date -u +%T))" >>"$out/summary.txt"
  if ((granted < 3 && PART_S[$1] > 0)); then
    summary "FAIL $1: not started, the call's time is spent (GPU_CHECK_CALL_S ${GPU_CHECK_CALL_S:-$PLANNED_S})"
    return 1
  fi
}
# limit T: T seconds, or what is left of the part if less (0 or less: nothing is left).
limit() {
  local left=$((part_deadline - $(now)))
  ((left < $1)) && echo "$left" || echo "$1"
}

# tl T: limit T for timeout(1), at least 1 (timeout 0 would never stop it).
tl() {
  local t
  t=$(limit "$1")
  ((t < 1)) && t=1
  echo "$t"
}

# logrun LOG T CMD...: appends CMD's command line, then its output, to LOG; runs it for at most
# T seconds within the part's time-out; returns its exit status (124: timed out; 125: not
# started, the part's time was spent).
logrun() {
  local log=$1 t
  t=$(limit "$2")
  shift 2
  {
    printf '$'
    printf ' %q' "$@"
    printf '\n'
  } >>"$log"
  if ((t < 3)); then
    echo "(not started: the part $part's ${PART_S[$part]} s are spent)" >>"$log"
    return 125
  fi
  LD_LIBRARY_PATH=$cohort_libs timeout --kill-after=5 "$t" "$@" >>"$log" 2>&1
  local rc=$?
  echo "(exit $rc$( ((rc == 124 || rc == 137)) && echo ", timed out after $t s"))" >>"$log"
  return $rc
}

# The archives through tar and xz, or Python's tarfile where the machine has no xz.
untar_xz() {
  if command -v xz >/dev/null; then
    tar -C "$2" -xJf "$1"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$1" "$2"
  fi
}
tar_xz() {
  if command -v xz >/dev/null; then
    tar -C "$1" -cf - . | xz -T0 -6 >"$2"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[2], "w:xz").add(sys.argv[1], arcname=".")' "$1" "$2"
  fi
}
list_xz() {
  python3 -c 'import sys, tarfile; print(" ".join(m.name[2:] for m in tarfile.open(sys.argv[1]) if m.isfile()))' "$1"
}

# unpack FOLDER...: the bundle's folders into $work (data and refs are used where they are).
unpack() {
  local x missing=""
  for x in "$@"; do
    case $x in
      data | refs) [ -d "$gpu_dir/$x" ] || missing+=" .gpu/$x" ;;
      *)
        if [ -f "$gpu_dir/$x/$x.tar.xz" ]; then
          timeout "$(tl 15)" bash -c "$(declare -f untar_xz); untar_xz \"\$0\" \"\$1\"" "$gpu_dir/$x/$x.tar.xz" "$work" ||
            missing+=" .gpu/$x(broken)"
        else
          missing+=" .gpu/$x"
        fi
        ;;
    esac
  done
  echo "${missing# }"
}

probe() {
  local f=$1
  {
    echo "date: $(date -u)"
    echo "-- GPUs:"
    timeout "$(tl 5)" nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "no nvidia-smi"
    echo "-- bundle: $(tr '\n' ' ' <"$work/manifest.txt" 2>/dev/null)"
    # cohort's LD_LIBRARY_PATH less the bundle's lib/ (Debian libraries, no CUDA one), which
    # could displace python's own.
    echo "-- libraries (cohort's LD_LIBRARY_PATH, less the bundle's lib/):"
    local built
    built=$(grep -oE 'CUDNN_MAJOR=[0-9]+ CUDNN_MINOR=[0-9]+ CUDNN_PATCHLEVEL=[0-9]+' "$work/manifest.txt" 2>/dev/null |
      awk -F'[= ]' '{print $2 * 10000 + $4 * 100 + $6}')
    COHORT_BUILT_CUDNN=$built LD_LIBRARY_PATH=${cohort_libs#"$work/lib:"} timeout "$(tl 10)" python3 "$here/probe_libs.py" probe 2>&1
    echo "-- cohort info:"
    LD_LIBRARY_PATH=$cohort_libs timeout "$(tl 5)" "$bin/cohort" info 2>&1
    echo "-- PyTorch (its own libraries; the path above is cohort's alone):"
    timeout "$(tl 15)" python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpus", torch.cuda.device_count())' 2>&1 | tail -1
  } >"$f" 2>&1
}

# One call's parts.

# run_gtest NAME PROGRAM STEM [FILTER]: a gtest program within the part's time-out, its XML and
# log as STEM.N.xml / STEM.N.txt in the call's files. A run that dies (a crash, an abort) is
# followed by one of the tests it had not reached, up to 4 runs, so that one broken kernel
# does not hide the rest; a hung device wait throws after 30 s (not 300), failing one test.
run_gtest() {
  local name=$1 program=$2 stem=$3 filter=${4:-*} skip="" n t rc runs=()
  for n in 1 2 3 4; do
    t=$(limit "${PART_S[$part]}")
    ((t < 3)) && break
    COHORT_DEVICE_TIMEOUT_S=30 LD_LIBRARY_PATH=$cohort_libs timeout --kill-after=5 "$t" \
      "$program" --gtest_filter="$filter${skip:+-$skip}" --gtest_output=xml:"$stage/$stem.$n.xml" \
      >"$stage/$stem.$n.txt" 2>&1
    rc=$?
    runs+=("$stage/$stem.$n.xml:$stage/$stem.$n.txt:$rc")
    [ -f "$stage/$stem.$n.xml" ] && break
    ((rc == 124 || rc == 137)) && break
    local done_now
    done_now=$(python3 "$here/results.py" done-tests "$stage/$stem.$n.txt")
    [ -n "$done_now" ] || break
    skip=${skip:+$skip:}$done_now
    ((n < 4)) && echo "$name: run $n ended (exit $rc) without its XML; run $((n + 1)) leaves out what it reached" >>"$out/summary.txt"
  done
  if [ ${#runs[@]} -eq 0 ]; then
    summary "FAIL $name: not started, the part's time-out is spent"
    return
  fi
  result_line "$(python3 "$here/results.py" gtest "$name" "$t" "${runs[@]}")"
}

check_cuda_tests() {
  part_begin cuda_tests || return 0
  [ -x "$bin/cohort_cuda_tests" ] || { summary "FAIL cuda tests: cohort_cuda_tests is not in the bundle"; return; }
  run_gtest "cuda tests" "$bin/cohort_cuda_tests" cuda_tests
}

check_nccl_tests() {
  part_begin nccl_tests || return 0
  [ -x "$bin/cohort_nccl_tests" ] || { summary "SKIP nccl tests: the bundle was built without NCCL (no cohort_nccl_tests)"; return; }
  run_gtest "nccl tests" "$bin/cohort_nccl_tests" nccl_tests
}

# train_vs_ref NAME ARGS_FN DATA_FLAGS...: one run on $dev against the carried CPU reference.
train_vs_ref() {
  local name=$1 a
  part_begin "$name" || return 0
  read -ra a <<<"$("${name}_args" "$size")"
  if [ ! -f "$refs/$name.args" ]; then
    summary "FAIL $name: no CPU reference ($refs/$name.args: pack makes it; carry .gpu/refs)"
    return
  fi
  if [ "$(cat "$refs/$name.args")" != "${a[*]}" ]; then
    summary "FAIL $name: the carried reference ($refs/$name.args: $(cat "$refs/$name.args" 2>/dev/null)) was made with other flags than '${a[*]}': run pack again"
    return
  fi
  shift
  logrun "$stage/$name.txt" "${PART_S[$name]}" "$bin/cohort" "${a[@]}" "$@" --device "$dev" \
    --metrics "$stage/${name}_device.jsonl"
  local rc=$?
  cp "$refs/${name}_cpu.jsonl" "$stage/"
  if [ "$name" = net ]; then
    result_line "$(python3 "$here/results.py" net net "$stage/net_device.jsonl" "$refs/net_cpu.jsonl" $rc)"
  else
    result_line "$(python3 "$here/results.py" gpt gpt "$stage/gpt_device.jsonl" "$refs/gpt_cpu.jsonl" $rc "$(gpt_steps "$size")")"
  fi
}

check_net() { train_vs_ref net --data-dir "$data/fashion-mnist"; }
check_gpt() { train_vs_ref gpt --data-file "$data/corpus.txt"; }

check_bench() {
  part_begin bench || return 0
  [ -x "$bin/bench_gpt" ] || { summary "FAIL bench: bench_gpt is not in the bundle"; return; }
  local t verdict=DONE
  t=$(limit "${PART_S[bench]}")
  if ((t < 60)); then
    summary "FAIL bench: not started, $t s left of its time-out (it needs 60 at least)"
    return
  fi
  # PyTorch's pieces get the caller's LD_LIBRARY_PATH, not cohort's (its own cuDNN, not ours).
  local envs=(COHORT_BIN_DIR="$bin" GPU_BENCH_OUT="$stage" GPU_BENCH_BUDGET_S=$((t - 30))
    GPU_BENCH_PY_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}")
  [ "$dry" = 1 ] && envs+=(GPU_BENCH_DEVICE=cpu GPU_BENCH_PEAK_N=128 GPU_BENCH_NET_MAX_STEPS=20
    GPU_BENCH_STEPS=2 GPU_BENCH_WARMUP=1
    GPU_BENCH_GPT="--n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --vocab 256 --batch 2 --seq 32")
  env LD_LIBRARY_PATH="$cohort_libs" "${envs[@]}" timeout --kill-after=5 "$t" \
    "$repo/bench/gpu/run.sh" "$work" "$data/fashion-mnist" >"$stage/gpu_bench_log.txt" 2>&1 || verdict=FAIL
  [ -f "$stage/gpu_bench.txt" ] || verdict=FAIL
  summary "$verdict bench: $(grep -E 'piece\(s\) without a result' "$stage/gpu_bench.txt" 2>/dev/null || echo 'every piece has a result') (gpu_bench.txt in bench.tar.xz)"
  grep -E '^  GPT|^  Net' "$stage/gpu_bench.txt" 2>/dev/null >>"$out/summary.txt"
}

check_part() {
  case $1 in
    cuda_tests) check_cuda_tests ;;
    nccl_tests) check_nccl_tests ;;
    net) check_net ;;
    gpt) check_gpt ;;
    bench) check_bench ;;
    devtests) check_devtests ;;
    equal) check_equal ;;
    multi) check_multi ;;
    fault) check_fault ;;
    overlap) check_overlap ;;
    libtorch) check_libtorch ;;
  esac
}

# archive CALL: the call's files into $out/CALL.tar.xz, each file cut to its last 4 MiB first
# (an archive over 16 MiB would not come back).
archive() {
  local c=$1 f
  find "$stage" -type f -size +4M | while read -r f; do
    tail -c 4194304 "$f" >"$f.tail" && mv "$f.tail" "$f" && echo "archive: $f cut to its last 4 MiB" >>"$out/summary.txt"
  done
  tar_xz "$stage" "$out/$c.tar.xz"
  echo "-- $c.tar.xz: $(du -k "$out/$c.tar.xz" | cut -f1) KiB: $(list_xz "$out/$c.tar.xz")" >>"$out/summary.txt"
}

# run_calls CALL...: the calls in order, within one command. In the dry run: gpu_dir, dev=cpu,
# size=tiny and dry=1 are set by the caller.
run_calls() {
  valid_calls "$@" || { echo "run: calls are ${CALLS[*]}; got '$*'" >&2; return 2; }
  local budget start
  budget=$(budget_of "$@")
  start=$(now)
  out=${OUT:-/tmp/gpu_check_out}
  mkdir -p "$out"
  : >"$out/summary.txt"
  summary "gpu_check run $* ($(date -u '+%Y-%m-%d %H:%M:%S UTC')$([ "$dry" = 1 ] && echo ', DRY RUN on the CPU'))"
  summary "$(budget_line "$@")"
  if ((budget > PLANNED_S)); then
    summary "FAIL plan: over $PLANNED_S s; run these calls as separate commands"
    return 2
  fi
  local cap=${GPU_CHECK_CALL_S:-$PLANNED_S}
  ((cap > budget)) && cap=$budget
  # The archives' time is kept back from the parts.
  call_deadline=$((start + cap - $# * PART_S[archive]))
  part_begin setup || true
  work=$(mktemp -d /tmp/cohort_gpu.XXXXXX)
  bin=$work/bin
  data=$gpu_dir/data
  refs=$gpu_dir/refs
  local missing
  # shellcheck disable=SC2046  # a list of folders
  missing=$(unpack $(carry_of "$@"))
  if [ -n "$missing" ]; then
    summary "FAIL unpack: $missing missing (carry: $(carry_of "$@" | sed 's|\([a-z]*\)|.gpu/\1|g'))"
  fi
  cuda_path=$(timeout "$(tl 5)" python3 "$here/probe_libs.py" choose 2>/dev/null)
  # Only cohort's programs see the bundle's libraries and this path (PyTorch keeps its own).
  cohort_libs="$work/lib${cuda_path:+:$cuda_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  gpus=$(timeout "$(tl 5)" nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$dry" = 1 ] && gpus=2
  [ -n "${gpt2+x}" ] || gpt2=(--model gpt2 --batch-size 4)
  local c p first=1
  for c in "$@"; do
    stage=$work/out/$c
    mkdir -p "$stage"
    if ((first)); then
      probe "$stage/probe.txt"
      result_line "$(grep -E '^(PASS|FAIL) libraries' "$stage/probe.txt" || echo 'FAIL libraries: the probe printed no verdict (probe.txt)')"
      local names
      names=$(timeout "$(tl 5)" nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | tr -s ' \n' ' ')
      [ "$dry" = 1 ] && names="dry run: 2 pretended, so that the multi-GPU flow runs on the CPU"
      summary "GPUs: $gpus (${names:-none}); cuda path: ${cuda_path:-none}"
      first=0
    else
      cp "$work/out/$1/probe.txt" "$stage/"
    fi
    for p in ${CALL_PARTS[$c]}; do check_part "$p"; done
    archive "$c"
  done
  rm -rf "$work"
  summary "done in $(($(now) - start)) s of the $budget s planned"
  local lim
  lim=$(python3 "$here/results.py" limits "$out")
  local rc=$?
  result_line "$lim"
  return $rc
}

run() {
  gpu_dir=$repo/.gpu dev=cuda size=full dry=0
  run_calls "$@"
}

# ---- the dry run ----
dry_run() {
  local dry_root=${1:-/tmp/gpu_check_dry} build=${GPU_CHECK_BUILD:-build} rc=0 c
  [[ $build = /* ]] || build=$repo/$build
  [ -x "$build/tools/cohort/cohort" ] || { echo "dry-run: no cohort CLI in $build (ninja -C $build cohort)" >&2; return 2; }
  rm -rf "$dry_root" && mkdir -p "$dry_root"
  echo "== the plan"
  budget | tee "$dry_root/budget.txt" || rc=1
  echo "== the bundle of $build (xz -0), the CPU references (tiny)"
  gpu_dir=$dry_root/bundle
  bundle "$build" "$gpu_dir" 0 || return 1
  make_refs "$build/tools/cohort/cohort" "$gpu_dir" tiny || { echo "FAIL: the CPU references"; return 1; }
  # Reported, not a verdict: build/ links oneDNN and MPI and is compressed at xz -0; pack's
  # bundle has neither and xz -9, and pack fails on its own sizes.
  check_bundle "$gpu_dir" | sed 's/^\(PASS\|FAIL\) size/(dry bundle) size/'
  dev=cpu size=tiny dry=1
  gpt2=(--model gpt --n-layer 2 --n-embd 64 --n-head 2 --block-size 64 --batch-size 4)
  local calls
  read -ra calls <<<"${GPU_CHECK_DRY_CALLS:-${CALLS[*]}}"
  for c in "${calls[@]}"; do
    echo "== call $c"
    OUT=$dry_root/$c run_calls "$c" || rc=1
  done
  echo "== the returned files of each call"
  for c in "${calls[@]}"; do python3 "$here/results.py" limits "$dry_root/$c" || rc=1; done
  rm -rf "$gpu_dir"
  if ((rc)); then
    echo "FAIL: dry-run: a limit of the device tool is broken (above)"
  else
    echo "PASS: dry-run: every call fits the device tool's limits"
  fi
  return $rc
}

mode=${1:-}
shift 2>/dev/null
case "$mode" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  dry-run) dry_run "$@" ;;
  budget) budget "$@" ;;
  limits) python3 "$here/results.py" limits "$1" ;;
  gtest-run)
    # A gtest program run as the calls run theirs (the check of run_gtest): files in $OUT.
    out=${OUT:?gtest-run writes to \$OUT} stage=$OUT cohort_libs=${LD_LIBRARY_PATH:-}
    mkdir -p "$out" && : >"$out/summary.txt"
    call_deadline=$(($(now) + PART_S[cuda_tests]))
    part_begin cuda_tests && run_gtest "$1" "$2" gtest "${3:-*}"
    ;;
  *)
    echo "usage: scripts/gpu_check.sh pack [--dry [BUILD]] | run CALL... | dry-run [DIR] | budget [CALL...] | limits DIR" >&2
    exit 2
    ;;
esac
