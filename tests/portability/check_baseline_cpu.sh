#!/usr/bin/env bash
# Runs cohort on an emulated CPU without AVX (qemu-user, -cpu Nehalem: SSE4.2,
# the x86-64-v2 baseline): `cohort info` must pick the baseline kernel path,
# and the kernel tests must pass there (their avx2/avx512 instances report
# themselves skipped). An AVX instruction reached on that path would kill the
# process with SIGILL.
# The emulated process gets an environment that matches the emulated CPU,
# whatever the caller's: OpenBLAS told OPENBLAS_CORETYPE=Haswell would run its
# AVX2 kernels there (SIGILL), so it is told Nehalem; cohort's own kernel choice
# (COHORT_KERNELS) is left to the CPU except where the check sets it.
# Usage: check_baseline_cpu.sh COHORT_BIN CORE_TESTS_BIN
set -euo pipefail
cohort=$1 tests=$2
qemu=$(command -v qemu-x86_64 || true)
[[ -n $qemu ]] || { echo "qemu-x86_64 not found: apt-get install qemu-user (scripts/install_deps.sh --tests)" >&2; exit 2; }
unset COHORT_KERNELS
export OPENBLAS_CORETYPE=NEHALEM
info=$("$qemu" -cpu Nehalem "$cohort" info 2>&1)
echo "$info"
grep -q 'in use: baseline$' <<<"$info" || { echo "expected the baseline path on a Nehalem CPU" >&2; exit 1; }
if COHORT_KERNELS=avx2 "$qemu" -cpu Nehalem "$cohort" info >/dev/null 2>&1; then
  echo "COHORT_KERNELS=avx2 was accepted on a CPU without AVX2" >&2; exit 1
fi
"$qemu" -cpu Nehalem "$tests" --gtest_filter='Paths/*' --gtest_brief=1
