#!/usr/bin/env bash
# Checks that a binary is portable across x86-64 CPUs: no AVX/AVX2/AVX-512
# instruction (any VEX/EVEX encoding, or a ymm/zmm/mask register) in any
# function outside the per-ISA kernel copies (namespaces isa_avx2, isa_avx512;
# cohort/base/isa.h), so the code that runs before and around the dispatch is
# plain x86-64-v2. Also checks that those copies are there and do use AVX, so
# the check cannot pass on a binary without them.
# Usage: check_isa_confinement.sh BINARY
set -euo pipefail
bin=$1
command -v objdump >/dev/null || { echo "objdump (binutils) is needed" >&2; exit 2; }
objdump -d --no-show-raw-insn -C "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; next }
  /^ +[0-9a-f]+:\t/ {
    split($0, parts, "\t"); ins = parts[2]; split(ins, w, " ");
    avx = w[1] ~ /^v/ || ins ~ /%[yz]mm|%k[0-7]/;
    if (!avx) next;
    if (fn ~ /isa_avx2::/) isa2++;
    else if (fn ~ /isa_avx512::/) isa512++;
    else bad[fn]++;
  }
  END {
    n = 0;
    for (f in bad) { print "AVX outside the ISA copies: " bad[f] " instructions in " f; n++ }
    printf "AVX instructions: %d in isa_avx2 copies, %d in isa_avx512 copies, %d functions elsewhere\n", isa2, isa512, n;
    if (n > 0 || isa2 == 0 || isa512 == 0) exit 1;
  }'
