#!/usr/bin/env bash
# Runs cohort's conv/pool kernel benchmark and the PyTorch peer one after the
# other and prints, per kernel and thread count, both times and the ratio
# cohort_ms / torch_ms (below 1 means cohort is faster), then the same for
# the passes one Net training step runs (conv1 and conv2 forward_relu and
# backward_relu, pool forward and backward).
# Usage: bench/kernels/run.sh [build-dir] [args for both, e.g. --threads 1,2 --seconds 0.5]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift || true
bin=$build/bench/kernels/bench_conv_kernels
[[ -x $bin ]] || bin=$build/bench_conv_kernels
[[ -x $bin ]] || { echo "run.sh: $bin not built (cmake --build $build --target bench_conv_kernels)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" "$@" | tee "$tmp/cohort.txt"
/usr/bin/python3 "$root/bench/kernels/torch_conv.py" "$@" | tee "$tmp/torch.txt"
echo
printf '%-6s %-16s %-8s %10s %10s %8s %9s %9s\n' layer pass threads cohort_ms torch_ms ratio \
  cohort_gf torch_gf
awk '
  function field(s, k,   i, n, a) { n = split(s, a, " "); for (i = 1; i <= n; i++) if (index(a[i], k "=") == 1) return substr(a[i], length(k) + 2); return "-" }
  FNR == NR { key = $1 " " $2 " " $3; ms[key] = field($0, "ms"); gf[key] = field($0, "gflops"); next }
  { key = $1 " " $2 " " $3; if (!(key in ms)) next
    t = field($0, "ms"); split($3, th, "=")
    printf "%-6s %-16s %-8s %10.3f %10.3f %8.2f %9s %9s\n", $1, $2, th[2], ms[key], t, ms[key] / t, gf[key], field($0, "gflops")
    if ($2 == "forward_relu" || $2 == "backward_relu" || $1 == "pool") { cs[th[2]] += ms[key]; ts[th[2]] += t }
  }
  END { for (k in cs) printf "%-6s %-16s %-8s %10.3f %10.3f %8.2f\n", "step", "net_conv_passes", k, cs[k], ts[k], cs[k] / ts[k] }
' "$tmp/cohort.txt" "$tmp/torch.txt"
