#!/usr/bin/env bash
# Runs cohort's conv/pool kernel benchmark and the PyTorch peer one after the
# other and prints, per kernel and thread count, both times and the ratio
# cohort_ms / torch_ms (below 1 means cohort is faster), then the same for
# the passes one Net training step runs (conv1 and conv2 forward_relu and
# backward_relu, pool forward and backward).
# Both programs run ROUNDS times (default 3), alternating, and each figure is
# the best of its rounds: the machines are shared, and the minimum is the
# least disturbed measurement of either side. cpu_ratio compares process CPU
# time per call instead (all threads summed), which a loaded machine disturbs
# less; at 1 thread it is the fairer ratio when the machine is busy.
# Then, when bench_onednn_conv was built (oneDNN found at configure time), the
# same kernels against oneDNN 2.6.3 (the library PyTorch runs for them), one
# process per ISA in ISAS (default: $COHORT_KERNELS when set, else baseline
# avx2 avx512; an ISA this CPU lacks prints a "skip" line): each process holds
# cohort and oneDNN to that ISA and prints its own table (medians of
# interleaved rounds, GFLOP/s, fraction of the core's peak, cohort/oneDNN; see
# bench_onednn_conv.cc and docs/onednn.md).
# COHORT_KERNELS=baseline|avx2|avx512 forces cohort's kernel path and holds
# PyTorch to the same ISA (bench/kernel_path.sh; the CPU and path are printed
# when the build has the cohort CLI).
# Usage: [ROUNDS=n] [ISAS="avx2 avx512"] bench/kernels/run.sh [build-dir] [args for all, e.g. --threads 1,2 --seconds 0.5]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift || true
bin=$build/bench/kernels/bench_conv_kernels
[[ -x $bin ]] || bin=$build/bench_conv_kernels
[[ -x $bin ]] || { echo "run.sh: $bin not built (cmake --build $build --target bench_conv_kernels)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$root/bench/kernel_path.sh"
if [[ -x $build/tools/cohort/cohort ]]; then
  bench_kernel_path "$build/tools/cohort/cohort"
else
  echo "run.sh: no $build/tools/cohort/cohort: CPU and kernel path not printed${COHORT_KERNELS:+, PyTorch not held to $COHORT_KERNELS}"
fi
for ((r = 1; r <= ${ROUNDS:-3}; r++)); do
  echo "== round $r"
  "$bin" "$@" | tee -a "$tmp/cohort.txt"
  /usr/bin/python3 "$root/bench/kernels/torch_conv.py" "$@" | tee -a "$tmp/torch.txt"
done
echo
printf '%-6s %-16s %-8s %10s %10s %8s %9s %9s %10s\n' layer pass threads cohort_ms torch_ms ratio \
  cohort_gf torch_gf cpu_ratio
awk '
  function field(s, k,   i, n, a) { n = split(s, a, " "); for (i = 1; i <= n; i++) if (index(a[i], k "=") == 1) return substr(a[i], length(k) + 2); return "-" }
  # Best of the rounds per (layer, pass, threads), in first-seen order.
  FNR == NR { key = $1 " " $2 " " $3; m = field($0, "ms") + 0; c = field($0, "cpu_ms") + 0
              if (!(key in ms)) { order[++n] = key }
              if (!(key in ms) || m < ms[key]) { ms[key] = m; gf[key] = field($0, "gflops") }
              if (!(key in mc) || c < mc[key]) mc[key] = c
              next }
  { key = $1 " " $2 " " $3; t = field($0, "ms") + 0; c = field($0, "cpu_ms") + 0
    if (!(key in tm) || t < tm[key]) { tm[key] = t; tg[key] = field($0, "gflops") }
    if (!(key in tc) || c < tc[key]) tc[key] = c }
  END {
    for (i = 1; i <= n; i++) {
      key = order[i]; if (!(key in tm)) continue
      split(key, f, " "); split(f[3], th, "=")
      printf "%-6s %-16s %-8s %10.3f %10.3f %8.2f %9s %9s %10.2f\n", f[1], f[2], th[2], ms[key], tm[key], ms[key] / tm[key], gf[key], tg[key], (tc[key] > 0 ? mc[key] / tc[key] : 0)
      if (f[2] == "forward_relu" || f[2] == "backward_relu" || f[1] == "pool") {
        cs[th[2]] += ms[key]; ts[th[2]] += tm[key]; ccs[th[2]] += mc[key]; tcs[th[2]] += tc[key] }
    }
    for (k in cs) printf "%-6s %-16s %-8s %10.3f %10.3f %8.2f %9s %9s %10.2f\n", "step", "net_conv_passes", k, cs[k], ts[k], cs[k] / ts[k], "", "", ccs[k] / tcs[k]
  }
' "$tmp/cohort.txt" "$tmp/torch.txt"

onednn=$build/bench/kernels/bench_onednn_conv
[[ -x $onednn ]] || onednn=$build/bench_onednn_conv
echo
if [[ -x $onednn ]]; then
  rev=$(git -C "$root" log -1 --format=%h 2>/dev/null || echo '?')
  git -C "$root" status --porcelain -- cohort/core cohort/base 2>/dev/null | grep -q . && rev="$rev + uncommitted changes in cohort/core or cohort/base"
  echo "== cohort vs oneDNN, one process per ISA (cohort at $rev)"
  for isa in ${ISAS:-${COHORT_KERNELS:-baseline avx2 avx512}}; do
    echo
    "$onednn" --isa "$isa" "$@"
  done
else
  echo "run.sh: no bench_onednn_conv in $build (needs libdnnl-dev at configure time): no cohort vs oneDNN tables"
fi
