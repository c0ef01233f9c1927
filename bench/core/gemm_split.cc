// Measures how cohort calls BLAS: OpenBLAS single-threaded with the product
// split over cohort::parallel_for (what native::gemm does) against OpenBLAS's
// own threading, for Net's Linear shapes and a square one. Prints CPU and
// wall microseconds per call. Usage: bench_gemm_split [threads]
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/native/linalg.h"

using namespace cohort;

namespace {

struct Shape3 {
  const char* name;
  int m, n, k;
  bool tb;
};

template <typename F>
std::pair<double, double> time_us(F f, int reps) {
  f();
  auto w0 = std::chrono::steady_clock::now();
  std::clock_t c0 = std::clock();
  for (int i = 0; i < reps; ++i) f();
  double cpu = 1e6 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / reps;
  double wall =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count() /
      reps;
  return {wall, cpu};
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  std::vector<Shape3> shapes = {{"fc1 fwd 64x50x2000 (x w^T)", 64, 50, 2000, true},
                                {"fc1 dW 50x2000x64", 50, 2000, 64, false},
                                {"fc1 dX 64x2000x50", 64, 2000, 50, false},
                                {"square 512", 512, 512, 512, false}};
  for (const Shape3& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f),
        b(static_cast<size_t>(s.k) * s.n, 0.25f), c(static_cast<size_t>(s.m) * s.n);
    int ldb = s.tb ? s.k : s.n;
    int reps = s.m * s.n * s.k > 50'000'000 ? 20 : 500;
    set_num_threads(threads);
    auto ours = time_us(
        [&] {
          native::gemm(false, s.tb, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), ldb, 0.0f,
                       c.data(), s.n);
        },
        reps);
    openblas_set_num_threads(threads);
    auto theirs = time_us(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                      1.0f, a.data(), s.k, b.data(), ldb, 0.0f, c.data(), s.n);
        },
        reps);
    openblas_set_num_threads(1);
    std::printf(
        "%-30s threads=%d  split: wall %8.1f us cpu %8.1f us | openblas threads: wall %8.1f us cpu "
        "%8.1f us\n",
        s.name, threads, ours.first, ours.second, theirs.first, theirs.second);
  }
  return 0;
}
