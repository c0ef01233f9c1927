#!/usr/bin/env bash
# The main job: installs what it needs, builds the CLI (only: tests and
# benchmarks are scripts/test.sh's), and trains Net on Fashion-MNIST for one
# epoch with DistributedDataParallel over 2 worker processes started by
# `cohort run` (extra arguments go to `cohort train`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh --target cohort
cohort=build/tools/cohort/cohort
exec "$cohort" run --nproc-per-node 2 "$cohort" train --model net --dataset fashion-mnist --epochs 1 "$@"
