// The hot loops outside convolution on every kernel path this CPU runs
// (cohort/base/cpu.h): the optimizer updates and clip_grad_norm's sum of
// squares (cohort/optim/update_kernels.h), the collectives' reduce kernels
// (cohort/collectives/reduce_kernel_table.h) and the float32 elementwise ops
// and sums (cohort/core/native/vec_kernels.h). One thread; sizes are Net's
// (111,100 parameters; 64x50 activations of fc1) and one larger in-cache size.
// Prints the best ns per element of several rounds (alternating between the
// paths) and the speed-up over the baseline path.
// Usage: bench_hot_loops [rounds]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/collectives/reduce_kernels.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/reduce.h"
#include "cohort/optim/update_kernels.h"

using namespace cohort;

namespace {

constexpr int64_t kNetParams = 111100;

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// This thread's CPU time in ns: on a shared, loaded host, time spent
// descheduled does not count.
double thread_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// CPU ns per element of one round of at least 10 ms.
double round_ns(const std::function<void()>& f, int64_t elements) {
  int64_t reps = 0;
  const double t0 = thread_ns();
  double ns = 0;
  do {
    f();
    ++reps;
    ns = thread_ns() - t0;
  } while (ns < 10e6);
  return ns / static_cast<double>(reps * elements);
}

struct Case {
  std::string name;
  int64_t n;
  std::function<void()> run;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  set_num_threads(1);
  const std::vector<KernelPath> paths = supported_kernel_paths();

  // Optimizer state of a Net-sized model.
  std::vector<float> p = random_floats(kNetParams, 1), g = random_floats(kNetParams, 2),
                     buf = random_floats(kNetParams, 3), m = random_floats(kNetParams, 4),
                     v = random_floats(kNetParams, 5);
  for (float& x : v) x = x * x;
  const optim::SgdCoeffs<float> sgd{0.01f, 0.9f, 1.0f, 0.0f, 1.0f, false, true, false, false};
  const optim::SgdCoeffs<float> sgd_wd{0.01f, 0.9f, 1.0f, 1e-4f, 1.0f, true, true, false, false};
  optim::AdamCoeffs<float> adam{1, 0, 1, 0.9f, 0.999f, 0.1f, 0.001f, 0.05f, 1e-8f, -0.01f, 0};
  // Collective buffers: a Net gradient bucket.
  std::vector<float> dst = random_floats(kNetParams, 6), src = random_floats(kNetParams, 7);
  std::vector<double> dst64(dst.begin(), dst.end()), src64(src.begin(), src.end());
  std::vector<uint16_t> h_dst(kNetParams), h_src(kNetParams), b_dst(kNetParams), b_src(kNetParams);
  for (int64_t i = 0; i < kNetParams; ++i) {
    h_dst[i] = collectives::float_to_f16(dst[i]);
    h_src[i] = collectives::float_to_f16(src[i]);
    b_dst[i] = collectives::float_to_bf16(dst[i]);
    b_src[i] = collectives::float_to_bf16(src[i]);
  }
  // Core ops: fc1's activations (64x50) and a 64K-element in-cache tensor.
  const int64_t big = 1 << 16;
  const Tensor fc_a = Tensor::from_vector(random_floats(64 * 50, 8), {64, 50});
  const Tensor fc_b = Tensor::from_vector(random_floats(64 * 50, 9), {64, 50});
  const Tensor big_a = Tensor::from_vector(random_floats(big, 10), {256, 256});
  const Tensor big_b = Tensor::from_vector(random_floats(big, 11), {256, 256});
  const Tensor big_row = big_a.reshape({big});

  using collectives::DataType;
  using collectives::ReduceOp;
  const std::vector<Case> cases = {
      {"sgd momentum (Net params)", kNetParams,
       [&] { optim::update_kernels().sgd(p.data(), g.data(), buf.data(), kNetParams, sgd); }},
      {"sgd momentum+wd (Net params)", kNetParams,
       [&] { optim::update_kernels().sgd(p.data(), g.data(), buf.data(), kNetParams, sgd_wd); }},
      {"adam (Net params)", kNetParams,
       [&] {
         optim::update_kernels().adam(p.data(), g.data(), m.data(), v.data(), nullptr, kNetParams,
                                      adam);
       }},
      {"clip sum of squares (Net)", kNetParams,
       [&] {
         volatile double s = optim::update_kernels().sum_squares(g.data(), kNetParams);
         (void)s;
       }},
      {"reduce_into f32 sum (Net)", kNetParams,
       [&] {
         collectives::reduce_into(dst.data(), src.data(), kNetParams, DataType::kFloat32,
                                  ReduceOp::kSum);
       }},
      {"reduce_into f32 max (Net)", kNetParams,
       [&] {
         collectives::reduce_into(dst.data(), src.data(), kNetParams, DataType::kFloat32,
                                  ReduceOp::kMax);
       }},
      {"reduce_into f64 sum (Net)", kNetParams,
       [&] {
         collectives::reduce_into(dst64.data(), src64.data(), kNetParams, DataType::kFloat64,
                                  ReduceOp::kSum);
       }},
      {"reduce_into f16 sum (Net)", kNetParams,
       [&] {
         collectives::reduce_into(h_dst.data(), h_src.data(), kNetParams, DataType::kFloat16,
                                  ReduceOp::kSum);
       }},
      {"reduce_into bf16 sum (Net)", kNetParams,
       [&] {
         collectives::reduce_into(b_dst.data(), b_src.data(), kNetParams, DataType::kBFloat16,
                                  ReduceOp::kSum);
       }},
      {"add 64x50 (fc1)", 64 * 50, [&] { native::binary(native::BinaryOp::kAdd, fc_a, fc_b); }},
      {"relu 64x50 (fc1 fwd)", 64 * 50, [&] { native::unary(native::UnaryOp::kRelu, fc_a); }},
      {"relu_backward 64x50 (fc1)", 64 * 50, [&] { native::relu_backward(fc_a, fc_b); }},
      {"column sum 64x50 (fc1 bias grad)", 64 * 50, [&] { native::sum(fc_a, {0}); }},
      {"add 64K", big, [&] { native::binary(native::BinaryOp::kAdd, big_a, big_b); }},
      {"mul by scalar 64K", big,
       [&] { native::binary_scalar(native::BinaryOp::kMul, big_a, 0.5); }},
      {"maximum 64K", big, [&] { native::binary(native::BinaryOp::kMaximum, big_a, big_b); }},
      {"relu_backward 64K", big, [&] { native::relu_backward(big_a, big_b); }},
      {"row sums 256x256", big, [&] { native::sum(big_a, {1}); }},
      {"sum of 64K", big, [&] { native::sum(big_row); }},
      {"column sums 256x256", big, [&] { native::sum(big_a, {0}); }},
  };

  std::printf("cpu: %s; one thread; best of %d rounds; thread CPU ns per element\n",
              cpu_features().model.c_str(), rounds);
  std::printf("%-34s", "loop");
  for (KernelPath path : paths) std::printf(" %10s", kernel_path_name(path));
  for (size_t k = 1; k < paths.size(); ++k)
    std::printf(" %9s", (std::string("x") + kernel_path_name(paths[k])).c_str());
  std::printf("\n");
  for (const Case& c : cases) {
    // Rounds alternate between the paths, so that load from other processes
    // on a shared host hits them alike; the best round of each counts.
    std::vector<double> ns(paths.size(), 1e30);
    for (KernelPath path : paths) {
      KernelPathGuard guard(path);
      c.run();  // warm up (pages, caches)
    }
    for (int r = 0; r < rounds; ++r)
      for (size_t k = 0; k < paths.size(); ++k) {
        KernelPathGuard guard(paths[k]);
        ns[k] = std::min(ns[k], round_ns(c.run, c.n));
      }
    std::printf("%-34s", c.name.c_str());
    for (double t : ns) std::printf(" %10.3f", t);
    for (size_t k = 1; k < ns.size(); ++k) std::printf(" %9.2f", ns[0] / ns[k]);
    std::printf("\n");
  }
  return 0;
}
