// The update loops of every kernel path against the reference loops
// (update_kernels.h), on odd lengths and on NaN / inf inputs. Each test runs
// once per path (Paths/UpdateKernels.*/baseline|avx2|avx512); paths this CPU
// cannot run are reported as skipped.
#include "cohort/optim/update_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "cohort/autograd/ops.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/core/random.h"
#include "cohort/optim/optim.h"

namespace cohort::optim {
namespace {

class UpdateKernels : public cohort::testing::KernelPathTest {};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const int64_t kLengths[] = {0, 1, 7, 15, 17, 31, 33, 1000, 1537};

// Random values with a NaN, an inf and a -inf among them (when n allows).
std::vector<float> values(int64_t n, uint64_t seed, float lo, float hi, bool special) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  if (special && n > 3) {
    v[n / 2] = kNaN;
    v[n - 1] = kInf;
    v[1] = -kInf;
  }
  return v;
}

// The ISA loops contract a*b+c into FMA: a last-bit difference is allowed,
// but NaN, inf and their signs must match exactly.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                  KernelPath path, int64_t n) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i]) || path == KernelPath::kBaseline) {
      if (std::isnan(want[i]))
        ASSERT_TRUE(std::isnan(got[i])) << what << " [" << i << "] n=" << n;
      else
        ASSERT_EQ(got[i], want[i]) << what << " [" << i << "] n=" << n;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], 4e-7f * std::max(1.0f, std::abs(want[i])))
        << what << " [" << i << "] n=" << n << " on " << kernel_path_name(path);
  }
}

TEST_P(UpdateKernels, SgdMatchesReference) {
  const KernelPath path = GetParam();
  for (int64_t n : kLengths) {
    for (int variant = 0; variant < 32; ++variant) {
      SgdCoeffs<float> c{0.01f, 0.9f, 0.75f, 0.001f, 1.0f, false, false, false, false};
      c.has_weight_decay = variant & 1;
      c.has_momentum = variant & 2;
      c.first = variant & 4;
      c.nesterov = (variant & 8) && c.has_momentum;
      c.sign = (variant & 16) ? -1.0f : 1.0f;
      const std::vector<float> p0 = values(n, 1, -3, 3, false);
      const std::vector<float> g = values(n, 2, -1, 1, true);
      const std::vector<float> b0 = values(n, 3, -1, 1, false);
      std::vector<float> p = p0, buf = b0, p_ref = p0, buf_ref = b0;
      update_kernels().sgd(p.data(), g.data(), c.has_momentum ? buf.data() : nullptr, n, c);
      sgd_reference(p_ref.data(), g.data(), c.has_momentum ? buf_ref.data() : nullptr, n, c);
      SCOPED_TRACE(::testing::Message() << kernel_path_name(path) << " variant " << variant);
      expect_close(p, p_ref, "param", path, n);
      expect_close(buf, buf_ref, "momentum_buffer", path, n);
    }
  }
}

TEST_P(UpdateKernels, AdamMatchesReference) {
  const KernelPath path = GetParam();
  for (int64_t n : kLengths) {
    for (int variant = 0; variant < 12; ++variant) {
      AdamCoeffs<float> c{};
      c.sign = (variant & 1) ? -1.0f : 1.0f;
      c.weight_decay = 0.01f;
      c.decay_factor = 0.9999f;
      c.beta1 = 0.9f;
      c.beta2 = 0.999f;
      c.one_beta1 = 0.1f;
      c.one_beta2 = 0.001f;
      c.bc2_sqrt = 0.0447f;
      c.eps = 1e-8f;
      c.neg_step_size = -0.0526f;
      c.decay = (variant >> 1) % 3;
      const bool amsgrad = variant >= 6;
      const std::vector<float> p0 = values(n, 4, -3, 3, false);
      const std::vector<float> g = values(n, 5, -1, 1, true);
      const std::vector<float> m0 = values(n, 6, -0.1f, 0.1f, false);
      const std::vector<float> v0 = values(n, 7, 0, 0.01f, false);
      const std::vector<float> x0 = values(n, 8, 0, 0.01f, false);
      std::vector<float> p = p0, m = m0, v = v0, x = x0;
      std::vector<float> p_ref = p0, m_ref = m0, v_ref = v0, x_ref = x0;
      update_kernels().adam(p.data(), g.data(), m.data(), v.data(), amsgrad ? x.data() : nullptr, n,
                            c);
      adam_reference(p_ref.data(), g.data(), m_ref.data(), v_ref.data(),
                     amsgrad ? x_ref.data() : nullptr, n, c);
      SCOPED_TRACE(::testing::Message() << kernel_path_name(path) << " variant " << variant);
      expect_close(p, p_ref, "param", path, n);
      expect_close(m, m_ref, "exp_avg", path, n);
      expect_close(v, v_ref, "exp_avg_sq", path, n);
      expect_close(x, x_ref, "max_exp_avg_sq", path, n);
    }
  }
}

TEST_P(UpdateKernels, SumSquaresMatchesReference) {
  const KernelPath path = GetParam();
  for (int64_t n : kLengths) {
    const std::vector<float> x = values(n, 9, -2, 2, false);
    const double want = sum_squares_reference(x.data(), n);
    // Summed in another order: equal up to double rounding.
    EXPECT_NEAR(update_kernels().sum_squares(x.data(), n), want, 1e-12 * std::max(1.0, want))
        << kernel_path_name(path) << " n=" << n;
    if (n == 0) continue;
    std::vector<float> y = x;
    y[n - 1] = kInf;
    EXPECT_EQ(update_kernels().sum_squares(y.data(), n), HUGE_VAL) << kernel_path_name(path);
    y[n / 2] = kNaN;
    EXPECT_TRUE(std::isnan(update_kernels().sum_squares(y.data(), n))) << kernel_path_name(path);
  }
}

// End to end through the optimizers: a few steps of SGD with momentum and
// weight decay, and of Adam, each after clip_grad_norm, give the baseline's
// parameters.
TEST_P(UpdateKernels, OptimizerStepsMatchBaseline) {
  auto run = [](bool adam) {
    Generator gen(3);
    Tensor p = randn({1003}, gen);
    p.set_requires_grad(true);
    std::unique_ptr<Optimizer> opt;
    if (adam)
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, AdamOptions{.lr = 0.01});
    else
      opt = std::make_unique<SGD>(std::vector<Tensor>{p},
                                  SGDOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-3});
    for (int step = 0; step < 3; ++step) {
      p.set_grad(randn({1003}, gen) * 10.0);
      clip_grad_norm({p}, 10.0);
      opt->step();
    }
    return p.detach().to_vector<float>();
  };
  for (bool adam : {false, true}) {
    std::vector<float> want;
    {
      KernelPathGuard baseline(KernelPath::kBaseline);
      want = run(adam);
    }
    const std::vector<float> got = run(adam);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f) << (adam ? "adam" : "sgd") << " [" << i << "]";
  }
}

COHORT_INSTANTIATE_KERNEL_PATHS(UpdateKernels);

}  // namespace
}  // namespace cohort::optim
