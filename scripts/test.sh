#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
scripts/build.sh
(cd build && ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@")
# CI (CI=true) also reruns a slice of the suite with the caller's knobs
# (COHORT_*, OPENBLAS_*, MASTER_*, ...) set to odd values, which no test may
# depend on (docs/testing.md), and runs the layers that talk to other
# processes, and the thread pool, under AddressSanitizer + UBSan and under
# ThreadSanitizer (scripts/sanitize.sh; every threaded layer: tsan --layers;
# the whole suite: without a mode).
if [[ -n "${CI:-}" ]]; then
  scripts/test_caller_env.sh
  scripts/sanitize.sh asan --ci
  scripts/sanitize.sh tsan --ci
fi
