#!/usr/bin/env bash
# Configures and builds cohort (Release) into build/.
#   scripts/build.sh [--target T]... [CMAKE_ARGS...]
# With --target, builds those targets only (the main job builds just the CLI);
# without, everything: libraries, CLI, tests, benchmarks. Other args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=() cmake_args=()
while [[ $# -gt 0 ]]; do
  if [[ $1 == --target ]]; then
    [[ $# -ge 2 ]] || { echo "scripts/build.sh: --target needs a target name" >&2; exit 2; }
    targets+=(--target "$2"); shift 2
  else
    cmake_args+=("$1"); shift
  fi
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
cmake --build build -j "$(nproc)" "${targets[@]}"
