# Sourced by the benchmark scripts. bench_kernel_path COHORT_BIN prints the
# CPU and the kernel path cohort runs (`cohort info`), and when COHORT_KERNELS
# forces a path, holds the PyTorch peer to the same instruction set (like with
# like: oneDNN's and ATen's own dispatch, checked with ONEDNN_VERBOSE=1).
bench_kernel_path() {
  "$1" info | grep -E '^(cpu|kernel paths)' || return 1
  case ${COHORT_KERNELS:-} in
    baseline) export ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default ;;
    avx2) export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 ;;
    avx512) export ONEDNN_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 ;;
  esac
  if [[ -n ${ONEDNN_MAX_CPU_ISA:-} ]]; then
    echo "pytorch held to: ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY"
  fi
}
