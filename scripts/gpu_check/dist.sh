# shellcheck shell=bash disable=SC2154  # the variables are gpu_check.sh's (listed below)
# The distributed parts of scripts/gpu_check.sh's `dist` call (issues 36, 44); sourced by it.
# Uses what it sets: bin, data, work, stage (this call's files), dev (cuda, or cpu in the dry
# run), gpus, gpt2 (the overlap check's model flags), dry (1 in the dry run), and its helpers
# summary, logrun, part_begin, limit, result_line.

have_nccl() {
  LD_LIBRARY_PATH=$cohort_libs "$bin/cohort" info 2>/dev/null | grep -E '^backends:' | grep -cw nccl >/dev/null
}

# (A pipe into grep counts, -c, rather than -q: grep -q ends at the first match and the writer
# then dies of SIGPIPE, which pipefail reports as a failure.)

# wrap: what runs a worker's program under `cohort run` for a backend on ONE GPU: nccl gets a
# NCCL_HOSTID of its own per rank (LOCAL_RANK expanded in each worker's shell), so NCCL takes
# the ranks sharing the GPU for two hosts and talks over loopback sockets. On a machine of
# several GPUs CUDA_VISIBLE_DEVICES=0 keeps both ranks on one.
set_wrap() {
  wrap=(env)
  [ "$dev" = cuda ] && wrap+=(CUDA_VISIBLE_DEVICES=0)
  if [ "$1" = nccl ]; then
    # shellcheck disable=SC2016  # expanded by each worker's shell
    wrap+=(NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN bash -c
      'NCCL_HOSTID=cohort-gpu-check-$LOCAL_RANK exec "$0" "$@"')
  fi
}

# The backend a run asks for: in the dry run (CPU tensors, which nccl refuses) native stands in
# for nccl, so that the nccl command lines (the wrap) still run.
asked_backend() {
  if [ "$dry" = 1 ] && [ "$1" = nccl ]; then echo native; else echo "$1"; fi
}

# The strategies on the GPU in one process (DDP, ZeRO 1-3, pipeline, tensor parallel, DDP over
# ToyMpModel, two ranks on threads through native's host staging, against one CPU process; on
# the CPU the fake device stands in).
check_devtests() {
  part_begin devtests || return 0
  if [ ! -x "$bin/cohort_parallel_tests" ]; then
    summary "SKIP device strategies: cohort_parallel_tests is not in the bundle"
    return
  fi
  run_gtest "device strategies" "$bin/cohort_parallel_tests" dev_strategies 'DeviceStrategies*'
}

# A run of Net for the equality checks: 20 steps; the one-process reference takes the 128
# examples that two ranks of 64 take together.
equal_train() {
  echo train --model net --dataset fashion-mnist --data-dir "$data/fashion-mnist" --seed 1 --epochs 1 \
    --max-steps 20 --device "$dev" --threads 2
}

# compare_equal NAME DIR NOTE RC: the run in DIR (exit status RC; 125: never started) against
# the one-process reference.
compare_equal() {
  if [ "$4" = 125 ]; then
    summary "FAIL $1: not started, the part's time-out is spent"
    return
  fi
  python3 "$here/results.py" equal "$1" "$eroot/single.jsonl" "$2.jsonl" \
    "$eroot/single/step-00000020/model.safetensors" "$2/step-00000020/model.safetensors" \
    1e-3 2e-4 >>"$log" 2>&1
  local run_note=""
  [ "$4" != 0 ] && run_note="; the run's exit status: $4$( [ "$4" = 124 ] && echo ' (timed out)')"
  summary "$(grep "^RESULT .* $1:" "$log" | tail -1 | sed 's/^RESULT //')$3$run_note"
}

strategy_flags() {
  case $1 in
    ddp) flags=(--strategy ddp) ;;
    *) flags=(--strategy zero --zero-stage "${1#zero}") ;;
  esac
}

# (a) DDP and ZeRO 1/2/3 at 2 ranks on one GPU against one process, through native and nccl.
check_equal() {
  part_begin equal || return 0
  log=$stage/dist_equal.txt
  : >"$log"
  eroot=$work/equal
  rm -rf "$eroot" && mkdir -p "$eroot"
  local train
  read -ra train <<<"$(equal_train)"
  if ! logrun "$log" 60 "$bin/cohort" "${train[@]}" --strategy single --batch-size 128 \
    --checkpoint-dir "$eroot/single" --metrics "$eroot/single.jsonl"; then
    summary "FAIL equal: the one-process reference run failed (dist_equal.txt)"
    return
  fi
  local backend s name asked from note
  for backend in native nccl; do
    if [ "$backend" = nccl ] && ! have_nccl; then
      summary "SKIP equal nccl: the bundle's cohort has no nccl backend (cohort info: backends)"
      continue
    fi
    for s in ddp zero1 zero2 zero3; do
      strategy_flags "$s"
      asked=$(asked_backend "$backend")
      # On one GPU, native is what --backend auto must pick (and say why).
      [ "$backend" = native ] && [ "$dev" = cuda ] && asked=auto
      name="$s $backend"
      set_wrap "$backend"
      from=$(($(wc -l <"$log") + 1))
      logrun "$log" 40 "$bin/cohort" run --nproc-per-node 2 --no-pin -- "${wrap[@]}" \
        "$bin/cohort" "${train[@]}" "${flags[@]}" --batch-size 64 --backend "$asked" \
        --checkpoint-dir "$eroot/$s-$backend" --metrics "$eroot/$s-$backend.jsonl"
      local rc=$?
      note=""
      [ "$asked" != "$backend" ] && [ "$asked" != auto ] && note="; dry run: native in nccl's place"
      if [ "$asked" = auto ]; then
        if tail -n +"$from" "$log" | grep -c 'backend native (2 local ranks share 1 GPU: NCCL refuses two ranks on one GPU' >/dev/null; then
          note="; --backend auto said why native"
        else
          note="; FAIL: --backend auto's start-up line is missing or says otherwise"
        fi
      fi
      compare_equal "$name" "$eroot/$s-$backend" "$note" "$rc"
    done
  done
}

# (a') Several GPUs: DDP and ZeRO 3 through real NCCL, each rank its own GPU (cuda:LOCAL_RANK,
# what --device cuda gives a worker), --backend auto, which must pick nccl and say so.
check_multi() {
  part_begin multi || return 0
  log=$stage/dist_multi.txt
  : >"$log"
  eroot=$work/equal
  if [ "$dev" = cuda ] && [ "$gpus" -lt 2 ]; then
    summary "SKIP multi-GPU nccl: nvidia-smi shows $gpus GPU (the one-GPU forms ran in equal)"
    return
  fi
  if [ "$dev" = cuda ] && ! have_nccl; then
    summary "SKIP multi-GPU nccl: the bundle's cohort has no nccl backend"
    return
  fi
  if [ ! -f "$eroot/single.jsonl" ]; then
    summary "FAIL multi-GPU nccl: no one-process reference (the equal part did not make it)"
    return
  fi
  local train s asked from note
  read -ra train <<<"$(equal_train)"
  asked=auto
  [ "$dry" = 1 ] && asked=native
  for s in ddp zero3; do
    strategy_flags "$s"
    from=$(($(wc -l <"$log") + 1))
    logrun "$log" 60 env NCCL_DEBUG=WARN "$bin/cohort" run --nproc-per-node 2 --no-pin -- \
      "$bin/cohort" "${train[@]}" "${flags[@]}" --batch-size 64 --backend "$asked" \
      --checkpoint-dir "$eroot/$s-multi" --metrics "$eroot/$s-multi.jsonl"
    local rc=$?
    note="; dry run: native on the CPU in NCCL's place"
    if [ "$dry" != 1 ]; then
      if tail -n +"$from" "$log" | grep -c 'backend nccl (CUDA tensors, and each of the 2 local ranks has its own GPU' >/dev/null; then
        note="; --backend auto chose nccl, each rank its own GPU"
      else
        note="; FAIL: --backend auto did not say nccl with each rank on its own GPU"
      fi
    fi
    compare_equal "$s nccl $gpus GPUs" "$eroot/$s-multi" "$note" "$rc"
  done
}

# Whether process $1 runs (exists and is not a zombie).
running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

# (b) rank 1 SIGKILLed mid-training; rank 0 must end within 2 s naming it. The workers are
# started by hand with torchrun's environment, so what ends rank 0 is its own group noticing,
# not a launcher stopping it.
check_fault() {
  part_begin fault || return 0
  log=$stage/dist_fault.txt
  : >"$log"
  local backend
  for backend in native nccl; do
    if [ "$backend" = nccl ] && ! have_nccl; then
      summary "SKIP fault nccl: the bundle's cohort has no nccl backend"
      continue
    fi
    # Each backend's share of what is left: to step 5, then 30 s at most for rank 0's end.
    local left
    left=$(limit 60)
    [ "$backend" = native ] && left=$((left / 2))
    if ((left < 15)); then
      summary "FAIL fault $backend: not started, the part's time-out is spent"
      continue
    fi
    local dir=$work/fault-$backend port r asked
    asked=$(asked_backend "$backend")
    rm -rf "$dir" && mkdir -p "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    local pids=()
    for r in 0 1; do
      local cmd=(env "LD_LIBRARY_PATH=$cohort_libs" "RANK=$r" WORLD_SIZE=2 "LOCAL_RANK=$r" LOCAL_WORLD_SIZE=2
        MASTER_ADDR=127.0.0.1 "MASTER_PORT=$port" COHORT_NUM_THREADS=2)
      [ "$dev" = cuda ] && cmd+=(CUDA_VISIBLE_DEVICES=0)
      [ "$backend" = nccl ] && cmd+=("NCCL_HOSTID=cohort-gpu-check-$r" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
      cmd+=("$bin/cohort" train --model net --dataset fashion-mnist --data-dir "$data/fashion-mnist" --seed 1
        --epochs 20 --batch-size 64 --log-every 1 --strategy ddp --device "$dev" --backend "$asked")
      {
        printf '$ (rank %s, in the background)' "$r"
        printf ' %q' "${cmd[@]}"
        printf '\n'
      } >>"$log"
      "${cmd[@]}" >"$dir/rank$r.txt" 2>&1 &
      pids+=($!)
    done
    local waited=0 wait_ticks=$(((left - 10) * 10))
    until grep -q 'step 5/' "$dir/rank0.txt" 2>/dev/null || [ $waited -ge $wait_ticks ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if ! grep -q 'step 5/' "$dir/rank0.txt"; then
      kill -9 "${pids[@]}" 2>/dev/null
      { wait "${pids[@]}"; } 2>/dev/null
      cat "$dir/rank0.txt" "$dir/rank1.txt" >>"$log"
      summary "FAIL fault $backend: training did not reach step 5 in $((wait_ticks / 10)) s (dist_fault.txt)"
      continue
    fi
    local t0 t1 ms
    t0=$(date +%s%N)
    kill -9 "${pids[1]}"
    echo "kill -9 rank 1 (pid ${pids[1]}) at step 5+" >>"$log"
    # Rank 0's end, polled: it is our child, so once it exits it is a zombie (kill -0 still
    # succeeds) until `wait` reaps it; /proc says which.
    local deadline=$((t0 + 10000000000))
    while running "${pids[0]}" && [ "$(date +%s%N)" -lt "$deadline" ]; do sleep 0.02; done
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    local still=""
    if running "${pids[0]}"; then
      still=" (still running after 10 s: killed)"
      kill -9 "${pids[0]}"
    fi
    { wait "${pids[0]}"; } 2>/dev/null
    local rc0=$?
    { wait "${pids[1]}"; } 2>/dev/null
    echo "--- rank 0 (exit $rc0) ---" >>"$log"
    tail -20 "$dir/rank0.txt" >>"$log"
    local named=no verdict=FAIL
    grep -v '^epoch' "$dir/rank0.txt" | grep -ciE 'rank 1\b' >/dev/null && named=yes
    [ "$ms" -le 2000 ] && [ $named = yes ] && [ "$rc0" -ne 0 ] && [ -z "$still" ] && verdict=PASS
    local note=""
    [ "$asked" != "$backend" ] && note="; dry run: native in nccl's place"
    summary "$verdict fault $backend: rank 0 ended $ms ms after rank 1 was SIGKILLed (bound 2000), exit $rc0, rank 1 named: $named$still$note"
  done
}

# (c) overlap of the gradient all_reduce with backward at 2 ranks, and DDP's cost at world size 1.
check_overlap() {
  part_begin overlap || return 0
  log=$stage/dist_overlap.txt
  : >"$log"
  local oroot=$work/overlap backend=native
  rm -rf "$oroot" && mkdir -p "$oroot"
  have_nccl && [ "$dev" = cuda ] && backend=nccl
  local lm=(train "${gpt2[@]}" --dataset text --data-file "$data/corpus.txt" --epochs 1 --seed 1
    --eval-batches 1 --device "$dev" --log-every 1)
  set_wrap "$backend"
  logrun "$log" 50 "$bin/cohort" run --nproc-per-node 2 --no-pin -- "${wrap[@]}" \
    "$bin/cohort" "${lm[@]}" --strategy ddp --max-steps 12 --backend "$backend" \
    --trace "$oroot/trace.json"
  if logrun "$log" 15 "$bin/cohort" trace-stats "$oroot/trace.json"; then
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
  logrun "$log" 40 "$bin/cohort" "${lm[@]}" --strategy single --max-steps 30 \
    --metrics "$oroot/single.jsonl"
  logrun "$log" 40 "$bin/cohort" run --nproc-per-node 1 --no-pin -- "$bin/cohort" "${lm[@]}" \
    --strategy ddp --max-steps 30 --metrics "$oroot/ddp1.jsonl"
  python3 "$here/results.py" ddp1 "$oroot/single.jsonl" "$oroot/ddp1.jsonl" >>"$log" 2>&1
  summary "$(grep '^RESULT' "$log" | tail -1 | sed 's/^RESULT //')"
}

# (d) LibTorch's DDP on CUDA tensors: the bundle has no LibTorch (pack configures
# -DCOHORT_WITH_LIBTORCH=OFF: cohort_libtorch_cuda_tests needs cohort built against PyTorch
# 2.11's CUDA LibTorch, which only the device machine has, and that machine lacks the Debian
# headers and libraries to build cohort).
check_libtorch() {
  summary "SKIP libtorch cuda: needs cohort built against PyTorch 2.11's LibTorch; not in the bundle (built against Debian's CPU-only LibTorch 1.13)"
}
