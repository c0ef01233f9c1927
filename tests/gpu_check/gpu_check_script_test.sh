#!/usr/bin/env bash
# GpuCheckScript.DryRunCallsFitDeviceLimits: scripts/gpu_check.sh checked without a GPU (see
# CMakeLists.txt beside this). Each check prints "ok: ..." or "FAIL: ..."; exit 1 on any FAIL,
# 77 (skipped) where the build has no cohort CLI or there is no python3.
# Usage: gpu_check_script_test.sh BUILD_DIR WORK_DIR
# shellcheck disable=SC2015  # ok() always succeeds
set -uo pipefail
build=$1
work=$2
script=$(cd "$(dirname "$0")/../.." && pwd)/scripts/gpu_check.sh
if ! command -v python3 >/dev/null; then
  echo "SKIP: no python3"
  exit 77
fi
if [ ! -x "$build/tools/cohort/cohort" ]; then
  echo "SKIP: $build/tools/cohort/cohort is not built (ninja -C $build cohort)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
failed=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAIL: $*"
  failed=1
}
# expect RC WHAT CMD...: CMD's exit status must be RC; its output goes to $work/last.txt.
expect() {
  local want=$1 what=$2
  shift 2
  "$@" >"$work/last.txt" 2>&1
  local rc=$?
  if [ "$rc" = "$want" ]; then ok "$what (exit $rc)"; else
    bad "$what: exit $rc, wanted $want"
    tail -20 "$work/last.txt"
  fi
}

# 1. The plan: every call and every planned command within 540 s; a part's time-out raised
# past it is caught, by `budget` and by `run` before it starts anything.
expect 0 "budget: every call within the plan" bash "$script" budget
GPU_CHECK_S_bench=600 expect 1 "budget: a bench time-out of 600 s breaks the plan" bash "$script" budget
GPU_CHECK_S_net=400 OUT=$work/over expect 2 "run: a train call over 540 s is refused" bash "$script" run train
grep -q '^FAIL plan' "$work/over/summary.txt" && ok "run: summary.txt says why" || bad "run: no 'FAIL plan' line in summary.txt"
expect 2 "run: an unknown call is refused" bash "$script" run everything

# 2. What the device tool returns: at most 8 files, 16 MiB each, 2 folders down, plain names.
d=$work/out
mkdir -p "$d/good/a/b" && echo x >"$d/good/summary.txt" && echo y >"$d/good/a/b/deep.txt"
expect 0 "limits: 2 files, 2 folders down" bash "$script" limits "$d/good"
mkdir -p "$d/nine" && for i in 1 2 3 4 5 6 7 8 9; do echo "$i" >"$d/nine/f$i"; done
expect 1 "limits: 9 files" bash "$script" limits "$d/nine"
mkdir -p "$d/deep/a/b/c" && echo z >"$d/deep/a/b/c/file"
expect 1 "limits: 3 folders down" bash "$script" limits "$d/deep"
mkdir -p "$d/big" && truncate -s 17M "$d/big/big.bin"
expect 1 "limits: a 17 MiB file" bash "$script" limits "$d/big"
mkdir -p "$d/name" && echo n >"$d/name/a b.txt"
expect 1 "limits: a name with a space" bash "$script" limits "$d/name"

# 3. A gtest program that dies in a test is run again past it, and the test is named.
fakeg=$work/fake_gtest.sh
cat >"$fakeg" <<'EOF'
#!/usr/bin/env bash
# The first run dies in A.two (SIGSEGV); a run that leaves out A.one and A.two passes A.three.
xml=${2#--gtest_output=xml:}
case $1 in
  *-*A.one*A.two*)
    printf '[ RUN      ] A.three\n[       OK ] A.three (1 ms)\n'
    printf '<testsuites><testsuite name="A"><testcase name="three" classname="A" status="run" result="completed"/></testsuite></testsuites>\n' >"$xml"
    ;;
  *)
    printf '[ RUN      ] A.one\n[       OK ] A.one (1 ms)\n[ RUN      ] A.two\n'
    kill -SEGV $$
    ;;
esac
EOF
chmod +x "$fakeg"
OUT=$work/gtest expect 0 "gtest-run: a program that dies" bash "$script" gtest-run fake "$fakeg"
grep -q '^FAIL fake: 2 passed, 1 failed, 0 skipped of 3.*failed: A.two' "$work/gtest/summary.txt" &&
  ok "gtest-run: A.one and A.three passed, A.two named as the test it died in" ||
  bad "gtest-run: summary.txt says: $(cat "$work/gtest/summary.txt")"

# 4. The CUDA libraries: each set whole from one place, cuDNN's from one folder put first,
# never mixed: here the toolkit's cuDNN lacks libcudnn_adv, so pip's whole set is taken.
libs=$work/libs
mkdir -p "$libs/tk" "$libs/pip/cudnn" "$libs/pip/nccl"
for f in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9; do : >"$libs/tk/$f"; done
for s in "" _graph _engines_precompiled _engines_runtime_compiled _heuristic _ops _cnn _adv; do
  : >"$libs/pip/cudnn/libcudnn$s.so.9"
done
: >"$libs/pip/nccl/libnccl.so.2"
probe=$(dirname "$script")/gpu_check/probe_libs.py
got=$(GPU_CHECK_LIB_SOURCES="toolkit:$libs/tk pip:$libs/pip/cudnn pip:$libs/pip/nccl" python3 "$probe" choose)
[ "$got" = "$libs/pip/cudnn:$libs/tk:$libs/pip/nccl" ] && ok "probe_libs: pip's whole cuDNN first, the toolkit's cudart and cuBLASLt, pip's NCCL" ||
  bad "probe_libs choose: '$got'"
: >"$libs/tk/libcudnn_adv.so.9"
for s in _engines_precompiled _engines_runtime_compiled _heuristic _cnn; do : >"$libs/tk/libcudnn$s.so.9"; done
got=$(GPU_CHECK_LIB_SOURCES="toolkit:$libs/tk pip:$libs/pip/cudnn pip:$libs/pip/nccl" python3 "$probe" choose)
[ "$got" = "$libs/tk:$libs/pip/nccl" ] && ok "probe_libs: the toolkit's whole cuDNN, pip's left out" ||
  bad "probe_libs choose (whole toolkit): '$got'"

# 5. pack's size check on a fake build tree (small programs where pack takes cohort's):
# within 56 MiB it passes, with the limit lowered under Fashion-MNIST's 30 MB it fails.
fake=$work/fake-build
for p in tools/cohort/cohort cohort/cuda/cohort_cuda_tests bench/gpt/bench_gpt; do
  mkdir -p "$fake/$(dirname "$p")" && cp "$(type -P true)" "$fake/$p"
done
expect 0 "pack --dry: the fake tree's bundle fits" bash "$script" pack --dry "$fake"
grep -q "^PASS size 'tests train'" "$work/last.txt" && ok "pack --dry: sizes the planned commands" ||
  bad "pack --dry: no size line for 'tests train'"
GPU_CHECK_PACK_LIMIT_MIB=20 expect 1 "pack --dry: over a 20 MiB limit fails" bash "$script" pack --dry "$fake"
grep -q "^FAIL size 'train'" "$work/last.txt" && ok "pack --dry: names the call over the limit" ||
  bad "pack --dry: no FAIL line for the train call"

# 6. The dry run: every call's flow on the CPU with this build, each call's files checked.
GPU_CHECK_BUILD=$build expect 0 "dry-run: every call fits" bash "$script" dry-run "$work/dry"
cp "$work/last.txt" "$work/dry.txt"
for c in tests train bench dist; do
  files=$(cd "$work/dry/$c" 2>/dev/null && find . -type f | LC_ALL=C sort | tr '\n' ' ')
  [ "$files" = "$(printf '%s\n' "./$c.tar.xz" ./summary.txt | LC_ALL=C sort | tr '\n' ' ')" ] && ok "dry-run $c: returns summary.txt and $c.tar.xz" ||
    bad "dry-run $c: returns '$files'"
  grep -q "^PASS returned files" "$work/dry/$c/summary.txt" 2>/dev/null && ok "dry-run $c: checked its files" ||
    bad "dry-run $c: no check of its returned files in summary.txt"
  # The list first: grep -q would end the pipe early (SIGPIPE, a failure under pipefail).
  list=$(tar -tJf "$work/dry/$c/$c.tar.xz" 2>/dev/null)
  grep -q probe.txt <<<"$list" && ok "dry-run $c: probe.txt archived" ||
    bad "dry-run $c: no probe.txt in $c.tar.xz"
done
for want in "train:^PASS net:" "train:^PASS gpt:" "tests:^(PASS|FAIL|SKIP) cuda tests:" \
  "bench:^(DONE|FAIL) bench:" "dist:^PASS ddp native:" "dist:^PASS zero3 nccl:" \
  "dist:^PASS fault native:" "tests:^PASS libraries:"; do
  grep -qE "${want#*:}" "$work/dry/${want%%:*}/summary.txt" 2>/dev/null && ok "dry-run ${want%%:*}: '${want#*:}'" ||
    bad "dry-run ${want%%:*}: no line '${want#*:}' in summary.txt"
done
if ((failed)); then
  echo "FAIL: gpu_check_script_test"
  exit 1
fi
echo "PASS: gpu_check_script_test"
