// The GPT's hot GEMM shapes, fp32, row-major, on every backend cohort could
// use (issue 21): cohort::native::gemm as it is (the rule in linalg.cc), OpenBLAS
// called once with its own threads, OpenBLAS single-threaded split over
// cohort::parallel_for, oneDNN's dnnl_sgemm (when built with libdnnl-dev) and
// cohort's packed microkernel (native::gemm_packed). Every linear layer
// x[M,K] w[N,K]^T gives three products: forward C = X W^T (nt), dX = dY W
// (nn) and dW = dY^T X (tn). bf16_<path>: the same product on bf16 operands
// (native::gemm_bf16) on each bf16 path this CPU runs. Implementations are interleaved within
// rounds (bench/kernels/interleaved_timing.h); GFLOP/s = 2 M N K / median wall time. OpenBLAS's
// kernel depends on OPENBLAS_CORETYPE: run.sh-style callers run this once per setting (the corename
// is printed).
//
// Usage: bench_gemm_shapes [--threads N] [--model ref|gpt2|attn|all] [--m M]
//                          [--seconds S] [--repeats R] [--only BACKEND,...]
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#if COHORT_BENCH_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include "bench/kernels/core_peak.h"
#include "bench/kernels/interleaved_timing.h"
#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/random.h"

using namespace cohort;

namespace {

struct Product {
  std::string name;
  bool ta, tb;
  int64_t m, n, k;
};

// The three products of Linear(K -> N) on M rows.
void add_linear(std::vector<Product>& out, const char* layer, int64_t m, int64_t k, int64_t n) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s M%lld K%lld N%lld fwd", layer, (long long)m, (long long)k,
                (long long)n);
  out.push_back({buf, false, true, m, n, k});
  std::snprintf(buf, sizeof buf, "%s M%lld K%lld N%lld dX", layer, (long long)m, (long long)k,
                (long long)n);
  out.push_back({buf, false, false, m, k, n});
  std::snprintf(buf, sizeof buf, "%s M%lld K%lld N%lld dW", layer, (long long)m, (long long)k,
                (long long)n);
  out.push_back({buf, true, false, n, k, m});
}

// oneDNN runs its own OpenMP threads: held to the run's thread count.
void omp_threads(int n) {
#if COHORT_BENCH_DNNL
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

using GemmFn = void (*)(const Product&, const float*, int64_t, const float*, int64_t, float*,
                        int64_t, int);

void blas_one(const Product& p, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc) {
  cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
              p.m, p.n, p.k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  std::string model = "all", only;
  int64_t m_override = 0;
  double seconds = 0.6;
  int repeats = 7;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gemm_shapes: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--threads")
      threads = std::atoi(next().c_str());
    else if (a == "--model")
      model = next();
    else if (a == "--m")
      m_override = std::atoll(next().c_str());
    else if (a == "--seconds")
      seconds = std::atof(next().c_str());
    else if (a == "--repeats")
      repeats = std::atoi(next().c_str());
    else if (a == "--only")
      only = next();
    else {
      std::fprintf(stderr,
                   "usage: bench_gemm_shapes [--threads N] [--model ref|gpt2|attn|all] [--m M] "
                   "[--seconds S] [--repeats R] [--only a,b]\n");
      return 2;
    }
  }
  std::vector<Product> prods;
  if (model == "ref" || model == "all") {
    for (int64_t m : {int64_t(2048)}) {
      if (m_override) m = m_override;
      add_linear(prods, "ref.qkv", m, 256, 768);
      add_linear(prods, "ref.proj", m, 256, 256);
      add_linear(prods, "ref.fc", m, 256, 1024);
      add_linear(prods, "ref.fc2", m, 1024, 256);
    }
  }
  if (model == "gpt2" || model == "all") {
    const int64_t m = m_override ? m_override : 256;
    add_linear(prods, "gpt2.qkv", m, 768, 2304);
    add_linear(prods, "gpt2.proj", m, 768, 768);
    add_linear(prods, "gpt2.fc", m, 768, 3072);
    add_linear(prods, "gpt2.fc2", m, 3072, 768);
    add_linear(prods, "gpt2.head", m, 768, 50304);
  }
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  std::printf("# cpu %s; openblas core %s (OPENBLAS_CORETYPE=%s); threads %d; kernel path %s\n",
              cpu_features().model.c_str(), openblas_get_corename(), ct ? ct : "unset", threads,
              kernel_path_name(kernel_path()));
  const bench::FmaPeak peak = bench::measure_fma_peak(threads);
  std::printf("# fp32 peak (%s FMA loop): %.1f GFLOP/s per core, %.1f on %d cores; load %s\n",
              kernel_path_name(peak.path), peak.per_core * 1e-9, peak.all_cores * 1e-9,
              peak.threads, bench::loadavg().c_str());
  const bench::FmaPeak bf16_peak = bench::measure_bf16_peak(threads);
  if (bf16_peak.all_cores > 0)
    std::printf("# bf16 peak (vdpbf16ps loop): %.1f GFLOP/s per core, %.1f on %d cores\n",
                bf16_peak.per_core * 1e-9, bf16_peak.all_cores * 1e-9, bf16_peak.threads);
  set_num_threads(threads);
  auto want = [&](const char* name) {
    if (only.empty()) return true;
    std::string s = "," + only + ",";
    return s.find(std::string(",") + name + ",") != std::string::npos;
  };
  std::map<std::string, std::vector<double>> rates;  // GFLOP/s per backend, by product
  if (!prods.empty()) std::printf("%-52s", "product (M x N x K)");
  bool header = false;
  for (const Product& p : prods) {
    std::vector<float> a(p.m * p.k), b(p.k * p.n), c(p.m * p.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7919 % 1000) * 1e-3 - 0.5);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<float>((i * 104729 % 997) * 1e-3 - 0.5);
    const int64_t lda = p.ta ? p.m : p.k, ldb = p.tb ? p.k : p.n, ldc = p.n;
    std::vector<bench::Impl> impls;
    if (want("native"))
      impls.push_back({"native",
                       [&] {
                         native::gemm(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), lda, b.data(), ldb,
                                      0.0f, c.data(), ldc);
                       },
                       ""});
    if (want("blas_mt"))
      impls.push_back({"blas_mt",
                       [&] {
                         openblas_set_num_threads(threads);
                         blas_one(p, a.data(), lda, b.data(), ldb, c.data(), ldc);
                         openblas_set_num_threads(1);
                       },
                       ""});
#if COHORT_BENCH_DNNL
    if (want("dnnl"))
      impls.push_back({"dnnl",
                       [&] {
                         omp_set_num_threads(threads);
                         dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, 1.0f,
                                    a.data(), lda, b.data(), ldb, 0.0f, c.data(), ldc);
                       },
                       ""});
#endif
    // bf16 operands (the same values rounded), float32 C, on each bf16 path
    // this CPU runs: GFLOP/s against the bf16 peak printed above.
    std::vector<BFloat16> a16(a.size()), b16(b.size());
    native::to_bf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
    native::to_bf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
    for (native::Bf16Path path : native::supported_bf16_paths()) {
      if (path == native::Bf16Path::kEmulated) continue;
      const std::string name = std::string("bf16_") + native::bf16_path_name(path);
      if (!want(name.c_str())) continue;
      impls.push_back({name,
                       [&, path] {
                         omp_threads(threads);
                         native::gemm_bf16(path, p.ta, p.tb, p.m, p.n, p.k, 1.0f, a16.data(), lda,
                                           b16.data(), ldb, 0.0f, c.data(), ldc);
                       },
                       ""});
    }
#if COHORT_BENCH_PACKED
    if (want("packed"))
      impls.push_back({"packed",
                       [&] {
                         native::gemm_packed(p.ta, p.tb, p.m, p.n, p.k, 1.0f, a.data(), lda,
                                             b.data(), ldb, 0.0f, c.data(), ldc);
                       },
                       ""});
#endif
    if (!header) {
      for (auto& im : impls) std::printf(" %11s", im.name.c_str());
      std::printf("   (GFLOP/s by wall / by process CPU time x threads, medians of %d rounds)\n",
                  repeats);
      header = true;
    }
    bench::time_all(impls, seconds, repeats);
    char label[200];
    std::snprintf(label, sizeof label, "%s %s%s %lldx%lldx%lld", p.name.c_str(), p.ta ? "T" : "N",
                  p.tb ? "T" : "N", (long long)p.m, (long long)p.n, (long long)p.k);
    std::printf("%-52s", label);
    const double flop = 2.0 * p.m * p.n * p.k;
    for (auto& im : impls) {
      const double rate = flop / bench::median(im.samples);
      std::printf(" %5.1f/%-5.1f", rate * 1e-9,
                  flop / bench::median(im.cpu_samples) * threads * 1e-9);
      rates[im.name].push_back(rate);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  // Each backend's median over the products, as a share of the measured peak
  // of its kind (bf16 paths against the vdpbf16ps loop, the rest against FMA).
  for (auto& [name, r] : rates) {
    const bool is_bf16 = name.rfind("bf16_", 0) == 0;
    const double p = is_bf16 ? bf16_peak.all_cores : peak.all_cores;
    if (p <= 0) continue;
    std::printf("# %s: median %.1f GFLOP/s over the products, %.1f %% of the %s peak\n",
                name.c_str(), bench::median(r) * 1e-9, bench::median(r) / p * 100,
                is_bf16 ? "bf16" : "fp32");
  }
  if (model == "attn" || model == "all") {
    // The composed attention's batched products (native::matmul): q k^T and
    // att v per (batch x head), for the reference size (B 16, T 128), block
    // 1024 (B 2) and GPT-2 (B 4, T 64, 12 heads of 64).
    struct Attn {
      const char* name;
      int64_t bh, t, hs;
    };
    Generator gen(3);
    for (const Attn& at :
         {Attn{"ref.attn B16 H4 T128", 64, 128, 64}, Attn{"long.attn B2 H4 T1024", 8, 1024, 64},
          Attn{"gpt2.attn B4 H12 T64", 48, 64, 64}}) {
      Tensor q = randn({at.bh, at.t, at.hs}, gen), k = randn({at.bh, at.t, at.hs}, gen);
      Tensor att = randn({at.bh, at.t, at.t}, gen);
      std::vector<bench::Impl> impls;
      impls.push_back({"qk^T", [&] { (void)native::matmul(q, k.transpose(1, 2)); }, ""});
      impls.push_back({"att v", [&] { (void)native::matmul(att, q); }, ""});
      bench::time_all(impls, seconds, repeats);
      const double flop = 2.0 * at.bh * at.t * at.t * at.hs;
      std::printf("%-52s", at.name);
      for (auto& im : impls)
        std::printf(" %s %5.1f/%-5.1f", im.name.c_str(), flop / bench::median(im.samples) * 1e-9,
                    flop / bench::median(im.cpu_samples) * threads * 1e-9);
      std::printf("\n");
    }
  }
  return 0;
}
