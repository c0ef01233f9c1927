#!/usr/bin/env bash
# The main job: installs what it needs, builds, and trains Net on Fashion-MNIST.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
exec build/tools/cohort/cohort train --model net --dataset fashion-mnist --epochs 1 "$@"
