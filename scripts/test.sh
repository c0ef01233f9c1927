#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --tests
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
