#!/usr/bin/env bash
# DDP's communication hooks (issue 42) on a GPT at 2 ranks on two simulated
# hosts: two network namespaces joined by a veth pair whose both ends are
# shaped to RATE (default 1gbit) by a token bucket (tc tbf; this kernel has no
# netem), one rank per host under `cohort run --nnodes 2`. Per hook
# (HOOKS, default "allreduce fp16 bf16 powersgd:2"): bytes on the wire per
# step (rank 0's tx counter on its end of the link), the bytes the hook hands
# to the collectives, the median step time, and the loss after WARMUP + STEPS
# steps, with their ratios to plain all_reduce's; then the CPU model and the
# load before and after. PowerSGD starts after the WARMUP untimed steps
# (start_powerSGD_iter = WARMUP).
# Targets: PowerSGD rank 2 >= 10x fewer bytes and step time <= 0.5x
# all_reduce's; fp16 and bf16 half the bytes.
# Needs root, ip and tc (iproute2).
# Usage: [RATE=1gbit] [STEPS=15] [WARMUP=5] [HOOKS="..."] [MODEL="--n-layer 4 ..."]
#        bench/ddp_hooks/run.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cohort=$build/tools/cohort/cohort
bench=$build/bench/ddp_hooks/bench_ddp_hooks
for b in "$cohort" "$bench"; do
  [[ -x $b ]] || { echo "run.sh: $b not built (ninja -C $build cohort bench_ddp_hooks)" >&2; exit 1; }
done
rate=${RATE:-1gbit}
steps=${STEPS:-15}
warmup=${WARMUP:-5}
hooks=${HOOKS:-allreduce fp16 bf16 powersgd:2}
# GPT-2 small's width and heads, 4 layers, byte vocabulary: 28 M parameters,
# 114 MB of float32 gradients a step; one 64-token sequence per rank keeps
# the step's compute under the link's time for those bytes.
model=${MODEL:---n-layer 4 --n-head 12 --n-embd 768 --block-size 64 --vocab 256 --batch 1}

tmp=$(mktemp -d)
# The job's shared secret (cohort run refuses a multi-node job without one).
export COHORT_TOKEN=${COHORT_TOKEN:-ddp-hooks-$$-$RANDOM}
ns=(cohhk$$a cohhk$$b)
link=(chk$$a chk$$b)
subnet=10.232.$(($$ % 250 + 1))
ip_of=("$subnet.1" "$subnet.2")
cleanup() {
  ip netns del "${ns[0]}" 2>/dev/null || true
  ip netns del "${ns[1]}" 2>/dev/null || true
  ip link del "${link[0]}" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "${ns[0]}"
ip netns add "${ns[1]}"
ip link add "${link[0]}" type veth peer name "${link[1]}"
for h in 0 1; do
  ip link set "${link[$h]}" netns "${ns[$h]}"
  ip -n "${ns[$h]}" addr add "${ip_of[$h]}/24" dev "${link[$h]}"
  ip -n "${ns[$h]}" link set lo up
  ip -n "${ns[$h]}" link set "${link[$h]}" up
  # burst above the largest (GSO) packet, far below a bucket's bytes.
  ip netns exec "${ns[$h]}" tc qdisc add dev "${link[$h]}" root tbf rate "$rate" burst 512kb \
    latency 100ms
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
i=0
for hook in $hooks; do
  i=$((i + 1))
  port=$((29700 + ($$ + i) % 200))
  echo "== $hook" >&2
  out=()
  for h in 1 0; do
    # shellcheck disable=SC2086
    ip netns exec "${ns[$h]}" "$cohort" run --nnodes 2 --node-rank "$h" --nproc-per-node 1 \
      --master-addr "${ip_of[0]}" --master-port "$port" "$bench" --comm-hook "$hook" \
      --iface "${link[$h]}" --steps "$steps" --warmup "$warmup" --threads 1 $model \
      >"$tmp/$i.$h.out" 2>&1 &
    out+=($!)
  done
  for p in "${out[@]}"; do
    wait "$p" || { cat "$tmp/$i.0.out" "$tmp/$i.1.out" >&2; exit 1; }
  done
  grep -h '{"hook"' "$tmp/$i.0.out" | sed 's/^[^{]*//' >>"$tmp/results.jsonl"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp/results.jsonl" "$rate" "$load_before" "$load_after" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = next((r for r in rows if r["hook"] == "allreduce"), rows[0])
print(f"GPT ({base['config']}, {base['params'] / 1e6:.1f} M parameters, batch {base['batch']}), "
      f"{base['ranks']} ranks on 2 hosts (network namespaces), link {sys.argv[2]} (tc tbf); "
      f"{base['warmup']} untimed + {base['steps']} timed steps")
hdr = "{:<12} {:>12} {:>12} {:>9} {:>8} {:>10} {:>9} {:>9}"
print(hdr.format("hook", "wire MB/step", "hook MB/step", "ms/step", "loss", "bytes 1/x",
                 "time x", "loss x"))
for r in rows:
    print("{:<12} {:>12.2f} {:>12.2f} {:>9.1f} {:>8.4f} {:>10.2f} {:>9.3f} {:>9.3f}".format(
        r["hook"], r["wire_bytes_step"] / 1e6, r["hook_bytes_step"] / 1e6, r["ms_step"], r["loss"],
        base["wire_bytes_step"] / r["wire_bytes_step"], r["ms_step"] / base["ms_step"],
        r["loss"] / base["loss"]))
for r in rows:
    if r["hook"].startswith("powersgd"):
        ok_b = base["wire_bytes_step"] / r["wire_bytes_step"] >= 10
        ok_t = r["ms_step"] / base["ms_step"] <= 0.5
        print(f"{r['hook']}: wire bytes {base['wire_bytes_step'] / r['wire_bytes_step']:.1f}x fewer "
              f"(target >= 10: {'met' if ok_b else 'MISSED'}), step time "
              f"{r['ms_step'] / base['ms_step']:.3f}x (target <= 0.5: {'met' if ok_t else 'MISSED'})")
    if r["hook"] in ("fp16", "bf16"):
        print(f"{r['hook']}: hook bytes {base['hook_bytes_step'] / r['hook_bytes_step']:.2f}x fewer, "
              f"wire bytes {base['wire_bytes_step'] / r['wire_bytes_step']:.2f}x fewer (target 2)")
print(f"cpu: {base['cpu']}; load (1/5/15 min) before {sys.argv[3]}, after {sys.argv[4]}")
PY
