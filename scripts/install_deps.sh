#!/usr/bin/env bash
# Installs the Debian packages cohort needs. Idempotent: does nothing when all
# are present. Uses sudo when not root.
#   scripts/install_deps.sh          build + run (main job)
#   scripts/install_deps.sh --tests  also the test peers (PyTorch, LibTorch, OpenMPI runtime)
# Data: dataset-fashion-mnist (the image workloads) and fortunes (2.6 MB of
# plain English text in /usr/share/games/fortunes: the default corpus of
# `cohort train --model gpt --dataset text`, cohort/data/default_corpus.h).
# libdnnl-dev: oneDNN, the onednn bf16 path (its AMX-BF16 kernels on CPUs with
# AMX; cohort/core/native/linalg_bf16_onednn.cc).
set -euo pipefail

pkgs=(build-essential cmake ninja-build ccache pkg-config
      libopenblas-dev zlib1g-dev libfmt-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libopenmpi-dev openmpi-bin dataset-fashion-mnist fortunes
      libdnnl-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # libtorch-dev, libgloo-dev: the LibTorch adapter (cohort/libtorch/) and its tests.
  pkgs+=(libtorch-dev libgloo-dev)
  # pybind11-dev, python3-dev: the torch.distributed backend (cohort/torch_backend/).
  pkgs+=(pybind11-dev python3-dev)
  pkgs+=(python3 python3-torch python3-numpy clang-format qemu-user librsvg2-bin slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
