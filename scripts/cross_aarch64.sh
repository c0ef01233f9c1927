#!/usr/bin/env bash
# Cross-builds cohort for aarch64 (64-bit Arm Linux) on a Debian 12 amd64
# machine and runs the test suites under qemu-user: proof that the tree builds
# and passes on a CPU with no x86 kernels, through the run-time kernel dispatch
# (on aarch64 only the portable baseline path exists). See docs/aarch64.md.
#   scripts/cross_aarch64.sh                every layer's suite but parallel and train
#   scripts/cross_aarch64.sh all            those two as well (about 9 more minutes)
#   scripts/cross_aarch64.sh base core nn   the named suites (cohort_<name>_tests)
# Installs what it needs with apt (idempotent; sudo when not root), builds into
# build-aarch64/ (ccache; COHORT_JOBS build jobs, default nproc), exits non-zero when a
# build step or a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=build-aarch64
jobs=${COHORT_JOBS:-$(nproc)}
suites=("$@")
fast=(base core autograd nn optim data checkpoint transport rendezvous launch collectives distributed)
if [[ ${#suites[@]} -eq 0 ]]; then
  suites=("${fast[@]}")
elif [[ "${suites[*]}" == all ]]; then
  suites=("${fast[@]}" parallel train)
fi

# 1. Packages: the cross compiler, qemu-user, and the arm64 halves of the
# arch-specific dev packages (multiarch, installed beside the amd64 ones) with
# the runtime the tests load under qemu (libc6 and libstdc++6 :arm64, see the
# toolchain file); nlohmann-json3-dev and libcli11-dev are header-only and
# Architecture: all.
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
host_pkgs=(cmake ninja-build ccache g++-aarch64-linux-gnu qemu-user nlohmann-json3-dev libcli11-dev)
target_pkgs=(libc6 libstdc++6 libopenblas-dev libfmt-dev zlib1g-dev libgtest-dev libgmock-dev)
pkgs=("${host_pkgs[@]}")
for p in "${target_pkgs[@]}"; do pkgs+=("$p:arm64"); done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing: ${missing[*]}" >&2
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# 2. Configure and build everything but the benchmarks (MPI is optional and
# left out: its arm64 packages are large and it is tested on x86).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DCOHORT_BUILD_BENCH=OFF -DCOHORT_WITH_MPI=OFF >/dev/null
cmake --build "$build" -j "$jobs"

# 3. Run the suites under qemu-user, one executable at a time; ctest in
# build-aarch64 works as well (the toolchain's emulator runs each test) but
# starts one emulator per test.
qemu=(qemu-aarch64 -L /) # as the toolchain's emulator: see there
# Tests qemu-user cannot run, for qemu's sake, not cohort's. qemu 7.2 (Debian
# 12) asserts when the child of a multithreaded process creates a thread.
qemu_skips=ParallelFor.WorksInForkedChildAfterPoolStarted
start=$(date +%s)
failed=()
passed_tests=0
failed_tests=0
skipped_tests=0
for s in "${suites[@]}"; do
  exe="$build/cohort/$s/cohort_${s}_tests"
  if [[ ! -x "$exe" ]]; then
    echo "no test executable $exe" >&2
    failed+=("$s")
    continue
  fi
  t0=$(date +%s)
  log="$build/cohort_${s}_tests.log"
  rc=0
  timeout 1800 "${qemu[@]}" "$exe" --gtest_brief=1 --gtest_filter="-$qemu_skips" >"$log" 2>&1 || rc=$?
  # --gtest_brief prints each failed test once and no "listed below" summary.
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
  k=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)
  f=$(grep -c '^\[  FAILED  \] ' "$log" || true)
  passed_tests=$((passed_tests + ${p:-0}))
  skipped_tests=$((skipped_tests + ${k:-0}))
  failed_tests=$((failed_tests + f))
  echo "cohort_${s}_tests: ${p:-0} passed, ${k:-0} skipped, $f failed, $(($(date +%s) - t0)) s"
  if [[ $rc -ne 0 ]]; then
    failed+=("$s")
    grep -E '^\[  FAILED  \]|Failure$' "$log" | head -20 >&2 || true
    echo "  (exit status $rc; full output in $log)" >&2
  fi
done

# Smoke test of the CLI; `cohort info` names the CPU and the kernel path.
echo "--- cohort info (aarch64 under qemu-user)"
"${qemu[@]}" "$build/tools/cohort/cohort" info || failed+=("cohort info")

# Skipped: the tests of the x86 kernel paths, which this build does not have.
echo "aarch64: ${#suites[@]} suites, $passed_tests tests passed, $skipped_tests skipped," \
  "$failed_tests failed, $(($(date +%s) - start)) s under qemu-user"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "aarch64: FAILED: ${failed[*]}" >&2
  exit 1
fi
