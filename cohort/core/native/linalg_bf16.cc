#include "cohort/core/native/linalg_bf16.h"

#include <algorithm>
#include <cstring>

#include "cohort/base/config.h"
#include "cohort/base/cpu.h"
#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/bf16_kernels.h"
#include "cohort/core/native/gemm_blocked.h"
#include "cohort/core/native/gemm_operand.h"
#include "cohort/core/native/linalg.h"

namespace cohort::native {

COHORT_ISA_DECLARE_TABLE(Bf16Kernels, kBf16Kernels)

const Bf16Kernels* bf16_kernels() { return COHORT_ISA_TABLE(Bf16Kernels, nullptr, kBf16Kernels); }

namespace detail {
// linalg_bf16_onednn.cc (only in builds with oneDNN).
void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);
std::string onednn_bf16_unsupported_reason();
}  // namespace detail

// gemm_bf16_avx512.cc (x86-64 only).
namespace isa_avx512::bf16 {
// bias (or null): a row added to every row of C, fused into the kernel's
// write of C; done (or null): gemm_blocked.h's epilogue per finished block.
void avx512bf16_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb,
                          float beta, float* c, int64_t ldc, const float* bias,
                          const detail::BlockDone* done = nullptr);
// vcvtneps2bf16, bit for bit BFloat16's rounding.
void avx512bf16_to_bf16(const float* x, BFloat16* y, int64_t n);
}  // namespace isa_avx512::bf16

namespace {

constexpr int64_t kConvertGrain = 1 << 16;

std::string joined_features() {
  std::string s;
  for (const std::string& f : cpu_features().names()) s += (s.empty() ? "" : " ") + f;
  return s.empty() ? std::string("none detected") : s;
}

// Converts x elementwise into a tensor of dtype `to` with x's shape, keeping a
// transposed matrix transposed (no strided gather for the A^T / B^T operands
// of a backward).
template <typename From, typename To, typename Fn>
Tensor convert(const Tensor& x, DType to, Fn fn) {
  if (x.dim() >= 2 && !x.is_contiguous() && x.transpose(-1, -2).is_contiguous())
    return convert<From, To>(x.transpose(-1, -2), to, fn).transpose(-1, -2);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(xc.sizes(), to);
  const From* px = xc.data_ptr<From>();
  To* py = y.data_ptr<To>();
  parallel_for(0, xc.numel(), kConvertGrain,
               [&](int64_t b, int64_t e) { fn(px + b, py + b, e - b); });
  return y;
}

// x converted to `dtype` on its device by the device's copy_ (rounding to
// nearest even, as on the CPU), contiguous, not recorded by autograd.
Tensor converted_on_device(const Tensor& x, DType dtype) {
  Tensor y = Tensor::empty(x.sizes(), dtype, x.device());
  y.copy_(x.detach());
  return y;
}

void check_bf16_operand(const Tensor& t, const char* op, const char* what) {
  COHORT_CHECK(t.dtype() == kBFloat16, "{}: {} must be bfloat16, got {}", op, what,
               dtype_name(t.dtype()));
}

}  // namespace

const char* bf16_path_name(Bf16Path path) {
  switch (path) {
    case Bf16Path::kOnednn:
      return "onednn";
    case Bf16Path::kAvx512Bf16:
      return "avx512_bf16";
    case Bf16Path::kEmulated:
      break;
  }
  return "emulated";
}

Bf16Path parse_bf16_path(std::string_view name) {
  if (name == "emulated") return Bf16Path::kEmulated;
  if (name == "onednn") return Bf16Path::kOnednn;
  if (name == "avx512_bf16") return Bf16Path::kAvx512Bf16;
  throw InvalidArgument(
      fmt::format("bf16 path: unknown name \"{}\" (choices: emulated, onednn, avx512_bf16)", name));
}

std::string bf16_path_unsupported_reason(Bf16Path path) {
  if (path == Bf16Path::kEmulated) return "";
  if (path == Bf16Path::kAvx512Bf16) {
#if defined(__x86_64__)
    return cpu_features().avx512_bf16 ? "" : "the CPU has no avx512_bf16";
#else
    return "it is an x86-64 kernel and this is " + cpu_features().arch;
#endif
  }
#if COHORT_HAVE_ONEDNN
  const CpuFeatures& f = cpu_features();
  if (!f.avx512_bf16 && !f.amx_bf16) return "the CPU has neither avx512_bf16 nor amx_bf16";
  // Asked once: whether oneDNN creates a bf16 matmul does not change.
  static const std::string reason = detail::onednn_bf16_unsupported_reason();
  return reason;
#else
  return "this build has no oneDNN (COHORT_HAVE_ONEDNN is 0: libdnnl-dev was not found)";
#endif
}

bool bf16_path_supported(Bf16Path path) { return bf16_path_unsupported_reason(path).empty(); }

std::vector<Bf16Path> supported_bf16_paths() {
  std::vector<Bf16Path> paths{Bf16Path::kEmulated};
  for (Bf16Path p : {Bf16Path::kOnednn, Bf16Path::kAvx512Bf16})
    if (bf16_path_supported(p)) paths.push_back(p);
  return paths;
}

Bf16Path best_bf16_path() {
  const bool onednn = bf16_path_supported(Bf16Path::kOnednn);
  if (onednn && cpu_features().amx_bf16) return Bf16Path::kOnednn;
  if (bf16_path_supported(Bf16Path::kAvx512Bf16)) return Bf16Path::kAvx512Bf16;
  return onednn ? Bf16Path::kOnednn : Bf16Path::kEmulated;
}

void check_bf16_path(Bf16Path path, std::string_view op) {
  const std::string why = bf16_path_unsupported_reason(path);
  if (why.empty()) return;
  throw NotSupported(fmt::format("{}: bf16 path {} cannot run here: {}; this CPU ({}) has: {}", op,
                                 bf16_path_name(path), why, cpu_features().model,
                                 joined_features()));
}

void to_bf16(const float* x, BFloat16* y, int64_t n) {
#if defined(__x86_64__)
  // One instruction per 16 floats where the avx512 path runs on a CPU with
  // AVX512-BF16, instead of the integer rounding of bf16_kernels_isa.cc.
  static const bool native = cpu_features().avx512_bf16;
  if (native && kernel_path() == KernelPath::kAvx512) {
    isa_avx512::bf16::avx512bf16_to_bf16(x, y, n);
    return;
  }
#endif
  if (const Bf16Kernels* k = bf16_kernels()) {
    k->to_bf16(x, reinterpret_cast<uint16_t*>(y), n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = BFloat16(x[i]);
}

void bf16_to_float(const BFloat16* x, float* y, int64_t n) {
  if (const Bf16Kernels* k = bf16_kernels()) {
    k->to_float(reinterpret_cast<const uint16_t*>(x), y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

void set_bf16_twin(const Tensor& x, const Tensor& x16) {
  COHORT_CHECK(x.dtype() == kFloat32 && x16.dtype() == kBFloat16 && x.sizes() == x16.sizes() &&
                   x16.is_contiguous(),
               "set_bf16_twin: needs float32 x and contiguous bfloat16 x16 of x's shape, got {} {} "
               "and {} {}",
               dtype_name(x.dtype()), shape_str(x.sizes()), dtype_name(x16.dtype()),
               shape_str(x16.sizes()));
  TensorImpl* t = x.unsafe_impl();
  t->bf16_twin = std::make_shared<TensorImpl>(*x16.detach().unsafe_impl());
  t->bf16_twin_version = x.storage()->version();
}

Tensor to_bf16(const Tensor& x) {
  COHORT_CHECK(x.dtype() == kFloat32, "to_bf16: needs float32, got {}", dtype_name(x.dtype()));
  if (const TensorImpl* t = x.unsafe_impl();
      t->bf16_twin && t->bf16_twin_version == x.storage()->version())
    return Tensor(std::make_shared<TensorImpl>(*t->bf16_twin));
  if (!x.is_cpu()) return converted_on_device(x, kBFloat16);
  return convert<float, BFloat16>(x, kBFloat16,
                                  [](const float* a, BFloat16* b, int64_t n) { to_bf16(a, b, n); });
}

Tensor bf16_to_float(const Tensor& x) {
  check_bf16_operand(x, "bf16_to_float", "input");
  if (!x.is_cpu()) return converted_on_device(x, kFloat32);
  return convert<BFloat16, float>(
      x, kFloat32, [](const BFloat16* a, float* b, int64_t n) { bf16_to_float(a, b, n); });
}

void gemm_bf16(Bf16Path path, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  check_bf16_path(path, "gemm_bf16");
  if (path == Bf16Path::kAvx512Bf16) {
#if defined(__x86_64__)
    isa_avx512::bf16::avx512bf16_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                           nullptr);
#endif
    return;
  }
  if (path == Bf16Path::kOnednn) {
#if COHORT_HAVE_ONEDNN
    detail::onednn_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
    return;
  }
  // Emulated: each operand as stored (rows x cols with its leading
  // dimension) converted into a dense float32 copy, then the float32 GEMM.
  auto widen = [](const BFloat16* p, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    parallel_for(0, rows, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(cols, 1)),
                 [&](int64_t r0, int64_t r1) {
                   for (int64_t r = r0; r < r1; ++r)
                     bf16_to_float(p + r * ld, out.data() + r * cols, cols);
                 });
    return out;
  };
  const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  std::vector<float> fa = widen(a, ar, ac, lda), fb = widen(b, br, bc, ldb);
  gemm(ta, tb, m, n, k, alpha, fa.data(), std::max<int64_t>(ac, 1), fb.data(),
       std::max<int64_t>(bc, 1), beta, c, ldc);
}

DeviceOp<Tensor(const Tensor&, const Tensor&)> mm_bf16_device("mm_bf16");
DeviceOp<Tensor(const Tensor&, const Tensor&)> matmul_bf16_device("matmul_bf16");
DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&)> linear_bf16_device("linear_bf16");

Tensor mm_bf16(const Tensor& a, const Tensor& b, Bf16Path path) {
  check_bf16_operand(a, "mm_bf16", "a");
  check_bf16_operand(b, "mm_bf16", "b");
  COHORT_CHECK(a.dim() == 2 && b.dim() == 2 && a.sizes()[1] == b.sizes()[0],
               "mm_bf16: shapes {} and {} cannot be multiplied", shape_str(a.sizes()),
               shape_str(b.sizes()));
  if (Device d = op_device("mm_bf16", {&a, &b}); !d.is_cpu()) return mm_bf16_device(d, a, b);
  check_bf16_path(path, "mm_bf16");
  if (path == Bf16Path::kEmulated) return mm(bf16_to_float(a), bf16_to_float(b));
  const int64_t m = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[1];
  Tensor out = Tensor::empty({m, n}, kFloat32);
  GemmOperand oa = as_gemm_operand(a), ob = as_gemm_operand(b);
  gemm_bf16(path, oa.trans, ob.trans, m, n, k, 1.0f, oa.keep.data_ptr<BFloat16>(), oa.ld,
            ob.keep.data_ptr<BFloat16>(), ob.ld, 0.0f, out.data_ptr<float>(),
            std::max<int64_t>(n, 1));
  return out;
}

Tensor matmul_bf16(const Tensor& a, const Tensor& b, Bf16Path path) {
  check_bf16_operand(a, "matmul_bf16", "a");
  check_bf16_operand(b, "matmul_bf16", "b");
  if (Device d = op_device("matmul_bf16", {&a, &b}); !d.is_cpu())
    return matmul_bf16_device(d, a, b);
  check_bf16_path(path, "matmul_bf16");
  if (path == Bf16Path::kEmulated || a.dim() < 2 || b.dim() < 2)
    return matmul(bf16_to_float(a), bf16_to_float(b));
  if (a.dim() == 2 && b.dim() == 2) return mm_bf16(a, b, path);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  COHORT_CHECK(b.size(-2) == k, "matmul_bf16: shapes {} and {} cannot be multiplied",
               shape_str(a.sizes()), shape_str(b.sizes()));
  Shape ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul_bf16");
  const int64_t nb = shape_numel(batch);
  Shape ea = batch, eb = batch, os = batch;
  ea.insert(ea.end(), {m, k});
  eb.insert(eb.end(), {k, n});
  os.insert(os.end(), {m, n});
  Tensor a3 = a.expand(ea).reshape({nb, m, k}), b3 = b.expand(eb).reshape({nb, k, n});
  Tensor out = Tensor::empty(os, kFloat32);
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < nb; ++i) {
    GemmOperand oa = as_gemm_operand(a3.select(0, i)), ob = as_gemm_operand(b3.select(0, i));
    gemm_bf16(path, oa.trans, ob.trans, m, n, k, 1.0f, oa.keep.data_ptr<BFloat16>(), oa.ld,
              ob.keep.data_ptr<BFloat16>(), ob.ld, 0.0f, po + i * m * n, std::max<int64_t>(n, 1));
  }
  return out;
}

Tensor linear_bf16(const Tensor& x, const Tensor& w, const Tensor& b, Bf16Path path,
                   const Bf16RowsDone& rows_done) {
  check_bf16_operand(x, "linear_bf16", "input");
  check_bf16_operand(w, "linear_bf16", "weight");
  COHORT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.sizes()[1],
               "linear_bf16: input {} does not match weight {} (want [..., in] and [out, in])",
               shape_str(x.sizes()), shape_str(w.sizes()));
  if (b.defined())
    COHORT_CHECK(b.dtype() == kFloat32 && b.dim() == 1 && b.sizes()[0] == w.sizes()[0],
                 "linear_bf16: bias must be float32 [{}], got {} {}", w.sizes()[0],
                 dtype_name(b.dtype()), shape_str(b.sizes()));
  if (Device d = op_device("linear_bf16", {&x, &w, &b}); !d.is_cpu()) {
    COHORT_CHECK(!rows_done,
                 "linear_bf16: a rows_done epilogue runs on the CPU only, got {} tensors", d.str());
    return linear_bf16_device(d, x, w, b);
  }
  check_bf16_path(path, "linear_bf16");
  const int64_t in = w.sizes()[1], outf = w.sizes()[0];
  Tensor x2 = x.reshape({-1, in});
  const int64_t rows = x2.sizes()[0];
  // The epilogue after the GEMM, for the paths that cannot run it inside.
  auto finish = [&](Tensor out) {
    if (rows_done && rows > 0 && outf > 0)
      parallel_for(
          0, rows, std::max<int64_t>(1, kConvertGrain / outf),
          [&](int64_t r0, int64_t r1) { rows_done(out.data_ptr<float>(), r0, r1, 0, outf); });
    return out;
  };
  if (path == Bf16Path::kEmulated) return finish(linear(bf16_to_float(x), bf16_to_float(w), b));
  Shape os(x.sizes().begin(), x.sizes().end() - 1);
  os.push_back(outf);
  Tensor out = Tensor::empty(os, kFloat32);
  float* po = out.data_ptr<float>();
  GemmOperand ox = as_gemm_operand(x2), ow = as_gemm_operand(w);
  Tensor bc = b.defined() ? b.contiguous() : Tensor();
  if (path == Bf16Path::kAvx512Bf16) {
#if defined(__x86_64__)
    const detail::BlockDone done = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      rows_done(po, r0, r1, c0, c1);
    };
    isa_avx512::bf16::avx512bf16_gemm_bf16(
        ox.trans, !ow.trans, rows, outf, in, 1.0f, ox.keep.data_ptr<BFloat16>(), ox.ld,
        ow.keep.data_ptr<BFloat16>(), ow.ld, 0.0f, po, std::max<int64_t>(outf, 1),
        bc.defined() ? bc.data_ptr<float>() : nullptr, rows_done ? &done : nullptr);
#endif
    return out;
  }
  float beta = 0.0f;
  if (bc.defined()) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(po + r * outf, bc.data_ptr<float>(), outf * sizeof(float));
    beta = 1.0f;
  }
  gemm_bf16(path, ox.trans, !ow.trans, rows, outf, in, 1.0f, ox.keep.data_ptr<BFloat16>(), ox.ld,
            ow.keep.data_ptr<BFloat16>(), ow.ld, beta, po, std::max<int64_t>(outf, 1));
  return finish(out);
}

}  // namespace cohort::native
