#!/usr/bin/env bash
# cohort's GPT training step against PyTorch 1.13 (issue 21), in one run:
#   ref   the reference size: 4 layers, 4 heads, width 256, T 128, vocab 256, batch 16
#   long  the same model with block 1024, batch 2
#   gpt2  GPT-2 124M's shape (12/12/768, vocab 50304) on B 4, T 64 (llm.c's CPU trainer)
# each as cohort fp32 (bench_gpt), PyTorch fp32 and PyTorch bf16 autocast
# (torch_gpt.py), 1 process x THREADS threads (default 2), alternating in
# ROUNDS rounds (default 3); each figure is the median over rounds of each
# run's median ms/step. PyTorch runs with OPENBLAS_NUM_THREADS=1, its fastest
# setting on these 2-core hosts (docs/kernels.md, "GPT").
# Prints ms/step, cohort/PyTorch ratios, model FLOPs utilisation against the
# measured fp32 peak of THREADS cores (bench_fma_peak), peak RSS and its
# ratio, and the CPU model.
# FLOPs per step = (6 N + 12 L C T) x B x T, N the parameters without the
# position embedding (nanoGPT's estimate_mfu; PaLM appendix B).
# Usage: [ROUNDS=n] [THREADS=n] [CONFIGS="ref long gpt2"] [STEPS=n]
#        bench/gpt/run.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
bench=$build/bench/gpt/bench_gpt
peak=$build/bench/gpt/bench_fma_peak
for b in "$bench" "$peak"; do
  [[ -x $b ]] || { echo "run.sh: $b not built (cmake --build $build --target bench_gpt bench_fma_peak)" >&2; exit 1; }
done
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

args_of() {  # config -> model/batch arguments shared by both sides
  case $1 in
    ref) echo "--n-layer 4 --n-head 4 --n-embd 256 --block-size 128 --vocab 256 --batch 16" ;;
    long) echo "--n-layer 4 --n-head 4 --n-embd 256 --block-size 1024 --vocab 256 --batch 2" ;;
    gpt2) echo "--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --vocab 50304 --batch 4 --seq 64" ;;
    *) echo "run.sh: unknown config $1 (ref, long, gpt2)" >&2; exit 2 ;;
  esac
}
steps_of() {
  case $1 in
    ref) echo "${STEPS:-10}" ;;
    *) echo "${STEPS:-5}" ;;
  esac
}

"$peak" "$threads" >"$tmp/peak.json"
for cfg in ${CONFIGS:-ref long gpt2}; do
  a=$(args_of "$cfg")
  s=$(steps_of "$cfg")
  for ((r = 1; r <= rounds; r++)); do
    echo "== $cfg round $r" >&2
    # shellcheck disable=SC2086
    "$bench" $a --steps "$s" --warmup 2 --threads "$threads" >"$tmp/$cfg.cohort.$r.json"
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$root/bench/gpt/torch_gpt.py" $a --steps "$s" \
      --warmup 2 --threads "$threads" --precision fp32 >"$tmp/$cfg.torch.$r.json"
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$root/bench/gpt/torch_gpt.py" $a --steps "$s" \
      --warmup 2 --threads "$threads" --precision bf16 >"$tmp/$cfg.torchbf16.$r.json"
  done
done
"$peak" "$threads" >"$tmp/peak2.json"

python3 - "$tmp" "$rounds" "${CONFIGS:-ref long gpt2}" <<'PY'
import json, statistics, sys
tmp, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
peaks = [json.load(open(f"{tmp}/{p}.json")) for p in ("peak", "peak2")]
peak = max(p["gflops_all"] for p in peaks)
print(f"cpu: {peaks[0]['cpu']}; fp32 peak ({peaks[0]['path']} FMA loop, measured before and after): "
      f"{max(p['gflops_per_core'] for p in peaks):.1f} GFLOP/s per core, {peak:.1f} on "
      f"{peaks[0]['threads']} cores; load before {peaks[0]['load']}, after {peaks[1]['load']}")
print("FLOPs/step = (6 N + 12 L C T) B T, N = parameters without wpe")
def load(cfg, impl):
    return [json.load(open(f"{tmp}/{cfg}.{impl}.{r}.json")) for r in range(1, rounds + 1)]
hdr = "{:<6} {:<14} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9}"
print(hdr.format("config", "impl", "ms/step", "min", "max", "GFLOP", "MFU", "RSS MiB"))
for cfg in configs:
    c = load(cfg, "cohort")
    flop = c[0]["gflop_step"]
    res = {}
    for impl, name in (("cohort", "cohort fp32"), ("torch", "torch fp32"), ("torchbf16", "torch bf16")):
        runs = load(cfg, impl)
        ms = statistics.median(r["ms_step"] for r in runs)
        rss = max(r["peak_rss_mib"] for r in runs)
        res[impl] = (ms, rss)
        print(hdr.format(cfg, name, f"{ms:.1f}", f"{min(r['ms_min'] for r in runs):.1f}",
                         f"{max(r['ms_max'] for r in runs):.1f}", f"{flop:.2f}",
                         f"{flop / (ms * 1e-3) / peak * 100:.1f}%", f"{rss:.0f}"))
    (cm, cr), (tm, tr), (bm, br) = res["cohort"], res["torch"], res["torchbf16"]
    print(f"{cfg}: cohort/torch fp32 time {cm / tm:.3f}, cohort/torch bf16 time {cm / bm:.3f}, "
          f"peak RSS cohort/torch fp32 {cr / tr:.3f}")
print(f"median of {rounds} alternating round(s) of each run's median ms/step; "
      f"{c[0]['threads']} thread(s), 1 process")
PY
