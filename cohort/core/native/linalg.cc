#include "cohort/core/native/linalg.h"

#include <cblas.h>

#include <atomic>
#include <mutex>

#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"
#include "cohort/core/loops.h"
#include "cohort/core/native/gemm_operand.h"

namespace cohort::native {
namespace {

void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Below this many multiply-adds a split costs more than it saves.
constexpr int64_t kSplitMacs = 1 << 18;

template <typename T>
void blas_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
                static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
                static_cast<blasint>(ldc));
  }
}

// OpenBLAS, single-threaded, split over parallel_for.
template <typename T>
void blas_split(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  single_threaded_blas();
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  const int64_t threads = num_threads();
  if (threads <= 1 || m * n * k < kSplitMacs) {
    blas_call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split the larger output side into blocks (multiples of 16 for the kernels).
  if (m >= n) {
    int64_t blocks = std::min<int64_t>(threads, (m + 15) / 16);
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        int64_t r0 = m * blk / blocks, r1 = m * (blk + 1) / blocks;
        if (r1 <= r0) continue;
        const T* ap = ta ? a + r0 : a + r0 * lda;
        blas_call(ta, tb, r1 - r0, n, k, alpha, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
      }
    });
  } else {
    int64_t blocks = std::min<int64_t>(threads, (n + 15) / 16);
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        int64_t c0 = n * blk / blocks, c1 = n * (blk + 1) / blocks;
        if (c1 <= c0) continue;
        const T* bp = tb ? b + c0 * ldb : b + c0;
        blas_call(ta, tb, m, c1 - c0, k, alpha, a, lda, bp, ldb, beta, c + c0, ldc);
      }
    });
  }
}

template <typename T>
void gemm_impl(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_backend(ta, tb, m, n, k, num_threads()) == GemmBackend::kPacked) {
      gemm_packed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
  blas_split<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

const char* gemm_backend_name(GemmBackend backend) {
  return backend == GemmBackend::kPacked ? "packed" : "openblas";
}

GemmBackend gemm_backend(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int threads) {
  // docs/kernels.md, "GEMM backends": on the avx2 path the packed GEMM is
  // 1-5 % ahead of OpenBLAS on the products with A as stored (forward x w^T
  // and dX = dY w) of the reference GPT (M = 2048 rows, K and N 256..1024),
  // on 1 and on 2 threads, and 2-9 % behind on A transposed (dW = dY^T x);
  // elsewhere the two are level within the noise or OpenBLAS is ahead, so
  // the packed GEMM takes exactly the measured region. On avx512 (a Zen 5)
  // it is level with OpenBLAS's own AVX-512 kernels on the GPT's shapes and
  // twice as fast as OpenBLAS held to AVX2 by OPENBLAS_CORETYPE=Haswell
  // (which that host's environment sets, as OpenBLAS 0.3.21 predates the
  // CPU): packed for every product past the small ones.
  (void)tb;
  (void)threads;
  if (kernel_path() == KernelPath::kAvx512) {
    return m * n * k >= (int64_t(1) << 21) ? GemmBackend::kPacked : GemmBackend::kOpenBlas;
  }
  if (kernel_path() != KernelPath::kAvx2 || ta) return GemmBackend::kOpenBlas;
  const bool measured_win = m >= 2048 && k >= 256 && k <= 1024 && n >= 256 && n <= 1024;
  return measured_win ? GemmBackend::kPacked : GemmBackend::kOpenBlas;
}

void gemm_with(GemmBackend backend, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  if (backend == GemmBackend::kPacked)
    gemm_packed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    blas_split<float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl<float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl<double>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

DeviceOp<Tensor(const Tensor&, const Tensor&)> mm_device("mm");
DeviceOp<Tensor(const Tensor&, const Tensor&)> matmul_device("matmul");
DeviceOp<Tensor(const Tensor&, const Tensor&, const Tensor&)> linear_device("linear");

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

Tensor mm(const Tensor& a, const Tensor& b) {
  COHORT_CHECK(a.dim() == 2 && b.dim() == 2, "mm: needs 2-D operands, got {} and {}",
               shape_str(a.sizes()), shape_str(b.sizes()));
  COHORT_CHECK(a.sizes()[1] == b.sizes()[0], "mm: shapes {} and {} cannot be multiplied",
               shape_str(a.sizes()), shape_str(b.sizes()));
  COHORT_CHECK(a.dtype() == b.dtype(), "mm: dtypes {} and {} differ", dtype_name(a.dtype()),
               dtype_name(b.dtype()));
  if (Device d = op_device("mm", {&a, &b}); !d.is_cpu()) return mm_device(d, a, b);
  const int64_t m = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[1];
  Tensor out = Tensor::empty({m, n}, a.dtype());
  GemmOperand oa = as_gemm_operand(a), ob = as_gemm_operand(b);
  dispatch_floating(a.dtype(), "mm", [&](auto tag) {
    using T = decltype(tag);
    gemm_impl<T>(oa.trans, ob.trans, m, n, k, T(1), oa.keep.template data_ptr<T>(), oa.ld,
                 ob.keep.template data_ptr<T>(), ob.ld, T(0), out.data_ptr<T>(),
                 std::max<int64_t>(n, 1));
  });
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  COHORT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: operands must be at least 1-D, got {} and {}",
               shape_str(a.sizes()), shape_str(b.sizes()));
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (a.dim() == 1 && b.dim() == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  COHORT_CHECK(b.size(-2) == k, "matmul: shapes {} and {} cannot be multiplied",
               shape_str(a.sizes()), shape_str(b.sizes()));
  COHORT_CHECK(a.dtype() == b.dtype(), "matmul: dtypes {} and {} differ", dtype_name(a.dtype()),
               dtype_name(b.dtype()));
  if (Device d = op_device("matmul", {&a, &b}); !d.is_cpu()) return matmul_device(d, a, b);
  Shape ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  const int64_t nb = shape_numel(batch);
  Shape ea = batch, eb = batch;
  ea.insert(ea.end(), {m, k});
  eb.insert(eb.end(), {k, n});
  // [nb, m, k] views (copies only when expand/layout prevents a view).
  Tensor a3 = a.expand(ea).reshape({nb, m, k});
  Tensor b3 = b.expand(eb).reshape({nb, k, n});
  Shape os = batch;
  os.insert(os.end(), {m, n});
  Tensor out = Tensor::empty(os, a.dtype());
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data_ptr<T>();
    // One product on this thread alone (float32 through the backend rule for
    // one thread).
    auto one = [&](int64_t i) {
      GemmOperand oa = as_gemm_operand(a3.select(0, i)), ob = as_gemm_operand(b3.select(0, i));
      const T* pa = oa.keep.template data_ptr<T>();
      const T* pb = ob.keep.template data_ptr<T>();
      T* pc = po + i * m * n;
      const int64_t ldc = std::max<int64_t>(n, 1);
      if constexpr (std::is_same_v<T, float>) {
        if (gemm_backend(oa.trans, ob.trans, m, n, k, 1) == GemmBackend::kPacked) {
          ThreadBudgetGuard alone(1);
          gemm_packed(oa.trans, ob.trans, m, n, k, 1.0f, pa, oa.ld, pb, ob.ld, 0.0f, pc, ldc);
          return;
        }
      }
      single_threaded_blas();
      blas_call<T>(oa.trans, ob.trans, m, n, k, T(1), pa, oa.ld, pb, ob.ld, T(0), pc, ldc);
    };
    // Products of equal size: with at least as many as threads, each thread
    // takes whole products (no split, no synchronisation inside one);
    // fewer, large ones are split one after the other.
    const int64_t threads = num_threads();
    if (nb == 1 || (nb < threads && m * n * k >= kSplitMacs * 4)) {
      for (int64_t i = 0; i < nb; ++i) {
        GemmOperand oa = as_gemm_operand(a3.select(0, i)), ob = as_gemm_operand(b3.select(0, i));
        gemm_impl<T>(oa.trans, ob.trans, m, n, k, T(1), oa.keep.template data_ptr<T>(), oa.ld,
                     ob.keep.template data_ptr<T>(), ob.ld, T(0), po + i * m * n,
                     std::max<int64_t>(n, 1));
      }
    } else {
      parallel_for(0, nb, std::max<int64_t>(1, kSplitMacs / std::max<int64_t>(m * n * k, 1)),
                   [&](int64_t b0, int64_t b1) {
                     for (int64_t i = b0; i < b1; ++i) one(i);
                   });
    }
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  COHORT_CHECK(w.dim() == 2, "linear: weight must be 2-D [out, in], got {}", shape_str(w.sizes()));
  COHORT_CHECK(x.dim() >= 1 && x.size(-1) == w.sizes()[1],
               "linear: input {} does not match weight {} (last dim must be {})",
               shape_str(x.sizes()), shape_str(w.sizes()), w.sizes()[1]);
  COHORT_CHECK(x.dtype() == w.dtype(), "linear: input dtype {} differs from weight dtype {}",
               dtype_name(x.dtype()), dtype_name(w.dtype()));
  const int64_t in = w.sizes()[1], outf = w.sizes()[0];
  if (b.defined())
    COHORT_CHECK(b.dim() == 1 && b.sizes()[0] == outf, "linear: bias must be [{}], got {}", outf,
                 shape_str(b.sizes()));
  if (Device d = op_device("linear", {&x, &w, &b}); !d.is_cpu()) return linear_device(d, x, w, b);
  Tensor x2 = x.reshape({-1, in});
  const int64_t rows = x2.sizes()[0];
  Shape os(x.sizes().begin(), x.sizes().end() - 1);
  os.push_back(outf);
  Tensor out = Tensor::empty(os, x.dtype());
  GemmOperand ox = as_gemm_operand(x2), ow = as_gemm_operand(w);
  dispatch_floating(x.dtype(), "linear", [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data_ptr<T>();
    T beta = T(0);
    if (b.defined()) {
      Tensor bc = b.to(x.dtype()).contiguous();
      const T* pb = bc.data_ptr<T>();
      for (int64_t r = 0; r < rows; ++r) std::memcpy(po + r * outf, pb, outf * sizeof(T));
      beta = T(1);
    }
    gemm_impl<T>(ox.trans, !ow.trans, rows, outf, in, T(1), ox.keep.template data_ptr<T>(), ox.ld,
                 ow.keep.template data_ptr<T>(), ow.ld, beta, po, std::max<int64_t>(outf, 1));
  });
  return out;
}

Tensor mm_reference(const Tensor& a, const Tensor& b) {
  const int64_t m = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[1];
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>(), vc(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += va[i * k + p] * vb[p * n + j];
      vc[i * n + j] = s;
    }
  return Tensor::from_vector(vc, {m, n}).to(a.dtype());
}

}  // namespace cohort::native
