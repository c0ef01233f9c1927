// The kOnednn bf16 path of linalg_bf16.h: oneDNN's matmul primitive with
// bfloat16 sources and a float32 destination (its AVX512-BF16 / AMX-BF16 JIT
// kernels). Only in builds with oneDNN (COHORT_HAVE_ONEDNN).
// Why oneDNN and not a microkernel of cohort's own: the host this was written
// on has AVX2 only, so a vdpbf16ps / AMX kernel could be neither run nor
// measured there; oneDNN's kernels are the ones PyTorch's bf16 autocast runs
// (the peer), so this path is at least the peer's GEMM. Replace it by a
// packed microkernel (gemm_kernels_isa.cc's scheme) where one measures faster.
// Primitives are created per call; oneDNN's own primitive cache (1024
// entries by default) makes a repeated shape a lookup. AMX needs the
// arch_prctl(ARCH_REQ_XCOMP_PERM) permission, which oneDNN 2.6 requests itself.
#include "cohort/base/config.h"

#if COHORT_HAVE_ONEDNN

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "cohort/base/error.h"
#include "cohort/core/dtype.h"

namespace cohort::native::detail {
namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::matmul::primitive_desc make_pd(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                                     int64_t ldb, int64_t ldc, float alpha, float beta) {
  memory::desc ad({m, k}, memory::data_type::bf16,
                  ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  memory::desc bd({k, n}, memory::data_type::bf16,
                  tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  memory::desc cd({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), attr, cpu_engine());
}

}  // namespace

std::string onednn_bf16_unsupported_reason() {
  try {
    make_pd(false, false, 8, 8, 8, 8, 8, 8, 1.0f, 0.0f);
    return "";
  } catch (const dnnl::error& e) {
    return std::string("oneDNN creates no bf16 matmul on this CPU (") + e.what() + ")";
  }
}

void onednn_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  try {
    auto pd = make_pd(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta);
    dnnl::stream stream(cpu_engine());
    memory am(pd.src_desc(), cpu_engine(), const_cast<BFloat16*>(a));
    memory bm(pd.weights_desc(), cpu_engine(), const_cast<BFloat16*>(b));
    memory cm(pd.dst_desc(), cpu_engine(), c);
    dnnl::matmul(pd).execute(stream,
                             {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("gemm_bf16 (onednn): [{}x{}] x [{}x{}]: {}", m, k, k, n, e.what()));
  }
}

}  // namespace cohort::native::detail

#endif  // COHORT_HAVE_ONEDNN
