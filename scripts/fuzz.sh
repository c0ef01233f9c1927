#!/usr/bin/env bash
# Builds the libFuzzer targets (CMake preset `fuzz`: Debian's clang, ASan+UBSan)
# and runs each for a bounded time, starting from its committed corpus in
# fuzz/corpus/<target>/. New inputs go to build-fuzz/corpus/<target>/, crashes
# to build-fuzz/crashes/<target>/ (add a crash to fuzz/corpus/<target>/ once it
# is fixed: the normal suite replays the corpus, fuzz/CMakeLists.txt).
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(idx_reader safetensors tcp_store transport_wire)
command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang (apt install clang)" >&2; exit 1; }
cmake --preset fuzz >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  log="build-fuzz/fuzz_$t.log"
  set +e
  "build-fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/$t/" "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  crashes=$(ls "build-fuzz/crashes/$t" | wc -l)
  echo "fuzz_$t: ${seconds} s, ${runs} executions, exit ${rc}, ${crashes} crash file(s) (log: $log)"
  [[ $rc -ne 0 || $crashes -ne 0 ]] && status=1
done
exit $status
