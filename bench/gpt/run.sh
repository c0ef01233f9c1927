#!/usr/bin/env bash
# cohort's GPT training step against PyTorch 1.13 (issue 21), in one run:
#   ref   the reference size: 4 layers, 4 heads, width 256, T 128, vocab 256, batch 16
#   long  the same model with block 1024, batch 2
#   gpt2  GPT-2 124M's shape (12/12/768, vocab 50304) on B 4, T 64 (llm.c's CPU trainer)
# each as cohort fp32 and cohort bf16 (bench_gpt --precision bf16, the best bf16
# path this CPU runs: `cohort info`), PyTorch fp32 and PyTorch bf16 autocast
# (torch_gpt.py), 1 process x THREADS threads (default 2), alternating in
# ROUNDS rounds (default 3); each figure is the median over rounds of each
# run's median ms/step. PyTorch runs with OPENBLAS_NUM_THREADS=1, its fastest
# setting on these 2-core hosts (docs/kernels.md, "GPT").
# Prints ms/step, cohort/PyTorch ratios, model FLOPs utilisation against the
# measured fp32 peak of THREADS cores (bench_fma_peak) and, for bf16 rows on an
# AVX512-BF16 CPU, against the measured bf16 peak (its vdpbf16ps loop), peak
# RSS and its ratio, and the CPU model. With DDP on such a CPU the 2 x 1 runs
# repeat in bf16 (cohort --precision bf16, PyTorch autocast).
# FLOPs per step = (6 N + 12 L C T) x B x T, N the parameters without the
# position embedding (nanoGPT's estimate_mfu; PaLM appendix B).
# PyTorch bf16 runs only where the CPU has AVX512-BF16 or AMX-BF16 (elsewhere
# autocast emulates it: 14.6 s/step at the reference size on a Zen 3, against
# 0.6 s in fp32), unless BF16=1.
# DDP (DDP=1, the default, with the cohort CLI built): the reference size as
# 2 ranks x 1 thread, 16 sequences each (`cohort run --nproc-per-node 2
# bench_gpt --ddp --threads 1`) against PyTorch's DDP (gloo) of the same
# shape (`torch_gpt.py --ddp 2 --threads 1`, mp.spawn; peak RSS of rank 0 on
# both sides), and 1 rank x 1 thread for the scaling efficiency (1-rank
# ms/step / 2-rank ms/step, same sequences per rank).
# Usage: [ROUNDS=n] [THREADS=n] [CONFIGS="ref long gpt2"] [STEPS=n] [BF16=0|1] [DDP=0|1]
#        bench/gpt/run.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
bench=$build/bench/gpt/bench_gpt
peak=$build/bench/gpt/bench_fma_peak
for b in "$bench" "$peak"; do
  [[ -x $b ]] || { echo "run.sh: $b not built (cmake --build $build --target bench_gpt bench_fma_peak)" >&2; exit 1; }
done
cohort=$build/tools/cohort/cohort
ddp=${DDP:-1}
if [[ $ddp == 1 && ! -x $cohort ]]; then
  echo "run.sh: $cohort not built: no DDP runs (cmake --build $build --target cohort)" >&2
  ddp=0
fi
if [[ -z ${BF16:-} ]]; then
  BF16=0
  grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && BF16=1
fi
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
    "$bench" $a --steps "$s" --warmup 2 --threads "$threads" --precision bf16 \
      >"$tmp/$cfg.cohortbf16.$r.json"
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$root/bench/gpt/torch_gpt.py" $a --steps "$s" \
      --warmup 2 --threads "$threads" --precision fp32 >"$tmp/$cfg.torch.$r.json"
    if [[ $BF16 == 1 ]]; then
      # shellcheck disable=SC2086
      OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$root/bench/gpt/torch_gpt.py" $a --steps "$s" \
        --warmup 2 --threads "$threads" --precision bf16 >"$tmp/$cfg.torchbf16.$r.json"
    fi
    if [[ $ddp == 1 && $cfg == ref ]]; then
      # shellcheck disable=SC2086
      "$cohort" run --nproc-per-node 2 "$bench" --ddp $a --steps "$s" --warmup 2 --threads 1 \
        >"$tmp/$cfg.ddp2.$r.json"
      # shellcheck disable=SC2086
      "$bench" $a --steps "$s" --warmup 2 --threads 1 >"$tmp/$cfg.one1.$r.json"
      # shellcheck disable=SC2086
      OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$root/bench/gpt/torch_gpt.py" $a --steps "$s" \
        --warmup 2 --threads 1 --ddp 2 --precision fp32 >"$tmp/$cfg.torchddp2.$r.json"
      if [[ $BF16 == 1 ]]; then
        # shellcheck disable=SC2086
        "$cohort" run --nproc-per-node 2 "$bench" --ddp $a --steps "$s" --warmup 2 --threads 1 \
          --precision bf16 >"$tmp/$cfg.ddp2bf16.$r.json"
        # shellcheck disable=SC2086
        OPENBLAS_NUM_THREADS=1 /usr/bin/python3 "$root/bench/gpt/torch_gpt.py" $a --steps "$s" \
          --warmup 2 --threads 1 --ddp 2 --precision bf16 >"$tmp/$cfg.torchddp2bf16.$r.json"
      fi
    fi
  done
done
"$peak" "$threads" >"$tmp/peak2.json"

python3 - "$tmp" "$rounds" "${CONFIGS:-ref long gpt2}" "$BF16" "$ddp" <<'PY'
import json, os, statistics, sys
tmp, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
bf16, ddp = sys.argv[4] == "1", sys.argv[5] == "1"
peaks = [json.load(open(f"{tmp}/{p}.json")) for p in ("peak", "peak2")]
peak = max(p["gflops_all"] for p in peaks)
print(f"cpu: {peaks[0]['cpu']}; fp32 peak ({peaks[0]['path']} FMA loop, measured before and after): "
      f"{max(p['gflops_per_core'] for p in peaks):.1f} GFLOP/s per core, {peak:.1f} on "
      f"{peaks[0]['threads']} cores; load before {peaks[0]['load']}, after {peaks[1]['load']}")
bf16_peak = max(p.get("bf16_gflops_all", 0) for p in peaks)
if bf16_peak:
    print(f"bf16 peak (vdpbf16ps loop, measured before and after): "
          f"{max(p['bf16_gflops_per_core'] for p in peaks):.1f} GFLOP/s per core, {bf16_peak:.1f} on "
          f"{peaks[0]['threads']} cores")
print("FLOPs/step = (6 N + 12 L C T) B T, N = parameters without wpe; MFU against the fp32 peak, "
      "bf16 rows also against the bf16 peak")
def load(cfg, impl):
    runs = []
    for r in range(1, rounds + 1):
        # cohort run prefixes a worker's lines with "[rank 0] ".
        lines = [l[l.index("{"):] for l in open(f"{tmp}/{cfg}.{impl}.{r}.json") if '{"impl"' in l]
        runs.append(json.loads(lines[-1]))
    return runs
hdr = "{:<6} {:<19} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9}"
print(hdr.format("config", "impl", "ms/step", "min", "max", "GFLOP", "MFU", "bf16 MFU", "RSS MiB",
                 "graph MiB"))
for cfg in configs:
    c = load(cfg, "cohort")
    flop = c[0]["gflop_step"]
    res = {}
    impls = [("cohort", "cohort fp32"), ("cohortbf16", "cohort bf16"), ("torch", "torch fp32")]
    if bf16:
        impls.append(("torchbf16", "torch bf16"))
    if ddp and cfg == "ref":
        impls += [("ddp2", "cohort ddp 2x1"), ("torchddp2", "torch ddp 2x1"),
                  ("one1", "cohort 1x1")]
        if bf16:
            impls += [("ddp2bf16", "cohort ddp 2x1 bf16"), ("torchddp2bf16", "torch ddp 2x1 bf16")]
    for impl, name in impls:
        runs = load(cfg, impl)
        ms = statistics.median(r["ms_step"] for r in runs)
        rss = max(r["peak_rss_mib"] for r in runs)
        gflop = runs[0].get("gflop_step", flop * runs[0].get("ranks", 1))
        threads = runs[0].get("threads", 1) * runs[0].get("ranks", 1)
        res[impl] = (ms, rss)
        share = lambda p: gflop / (ms * 1e-3) / (p * threads / peaks[0]["threads"]) * 100
        print(hdr.format(cfg, name, f"{ms:.1f}", f"{min(r['ms_min'] for r in runs):.1f}",
                         f"{max(r['ms_max'] for r in runs):.1f}", f"{gflop:.2f}",
                         f"{share(peak):.1f}%",
                         f"{share(bf16_peak):.1f}%" if bf16_peak and "bf16" in name else "-",
                         f"{rss:.0f}", f"{runs[0]['graph_mib']:.0f}" if "graph_mib" in runs[0] else "-"))
    (cm, cr), (tm, tr) = res["cohort"], res["torch"]
    line = f"{cfg}: cohort/torch fp32 time {cm / tm:.3f}, peak RSS {cr / tr:.3f}"
    b16 = load(cfg, "cohortbf16")[0]
    line += (f"; cohort bf16 ({b16['bf16_path']})/fp32 time {res['cohortbf16'][0] / cm:.3f} "
             f"(throughput {cm / res['cohortbf16'][0]:.2f}x), "
             f"graph memory {b16['graph_mib'] / load(cfg, 'cohort')[0]['graph_mib']:.3f}")
    if bf16:
        line += f"; cohort bf16/torch bf16 time {res['cohortbf16'][0] / res['torchbf16'][0]:.3f}"
    if "ddp2" in res:
        line += (f"; DDP 2x1 (16 sequences per rank): cohort/torch (gloo) time "
                 f"{res['ddp2'][0] / res['torchddp2'][0]:.3f}, peak RSS "
                 f"{res['ddp2'][1] / res['torchddp2'][1]:.3f}, DDP scaling (1x1 ms / 2x1 ms, 16 sequences per "
                 f"rank) {res['one1'][0] / res['ddp2'][0]:.3f}")
    if "ddp2bf16" in res:
        line += (f"; DDP 2x1 bf16: cohort bf16/fp32 throughput {res['ddp2'][0] / res['ddp2bf16'][0]:.3f}, "
                 f"cohort/torch bf16 time {res['ddp2bf16'][0] / res['torchddp2bf16'][0]:.3f}")
    print(line)
if not bf16:
    print("torch bf16 not run: this CPU has no AVX512-BF16 / AMX-BF16 (BF16=1 forces it)")
print(f"median of {rounds} alternating round(s) of each run's median ms/step; "
      f"{c[0]['threads']} thread(s), 1 process")
PY
