#!/usr/bin/env bash
# Fails, naming them, if variables of the families a test must not inherit
# from its caller reach a test (see cmake/CohortTestEnvironment.cmake.in).
# The families are listed here again on purpose: this is the check of that list.
set -euo pipefail
leaked=$(env | grep -E '^((COHORT|OPENBLAS|GOTO|OMP|DNNL|ONEDNN|TORCHELASTIC|SLURM|OMPI|PMI|PMIX)_[A-Za-z0-9_]*|MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|GROUP_WORLD_SIZE|ROLE_RANK|ROLE_WORLD_SIZE|NODE_RANK)=' | cut -d= -f1 || true)
if [[ -n $leaked ]]; then
  echo "the caller's environment reached a test: $(tr '\n' ' ' <<<"$leaked")" >&2
  echo "(ctest should have dropped them: is CohortTestEnvironment.cmake in the top-level TEST_INCLUDE_FILES?)" >&2
  exit 1
fi
echo "no caller knobs in the test environment"
