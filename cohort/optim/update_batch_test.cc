// UpdateBatch (update_util.h): one step's update loops run as one range over
// the thread budget; every element once, and the bits of one-at-a-time updates.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cohort/base/parallel.h"
#include "cohort/core/random.h"
#include "cohort/optim/optim.h"
#include "cohort/optim/update_util.h"

namespace cohort::optim {
namespace {

TEST(UpdateBatch, VisitsEveryElementOnceWhereverTheRangeIsCut) {
  const std::vector<int64_t> sizes = {1, 0, 5, kUpdateGrain + 3, 7, 2 * kUpdateGrain - 1, 1};
  for (int threads : {1, 2, 3, 5}) {
    ThreadBudgetGuard budget(threads);
    std::vector<std::vector<int>> seen;
    for (int64_t n : sizes) seen.emplace_back(static_cast<size_t>(n), 0);
    UpdateBatch batch;
    for (auto& s : seen)
      batch.add(static_cast<int64_t>(s.size()), [&s](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, static_cast<int64_t>(s.size()));
        for (int64_t i = b; i < e; ++i) ++s[static_cast<size_t>(i)];
      });
    batch.run();
    for (size_t t = 0; t < seen.size(); ++t)
      for (size_t i = 0; i < seen[t].size(); ++i)
        ASSERT_EQ(seen[t][i], 1) << "tensor " << t << " element " << i << " on " << threads
                                 << " threads";
    batch.run();  // forgotten after a run: nothing is updated twice
    for (const auto& s : seen)
      for (int c : s) ASSERT_EQ(c, 1);
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()) == 0;
}

// Parameters of mixed sizes and dtypes, one without a gradient, one stepped
// more often than the others: each optimizer's step over all of them at once
// gives the bits of an optimizer per parameter.
template <typename Opt, typename Options>
void expect_bits_of_one_at_a_time(const Options& options) {
  ThreadBudgetGuard budget(2);
  Generator gen(7);
  const std::vector<Shape> shapes = {{3}, {kUpdateGrain + 5}, {17, 9}, {1}, {40000}};
  std::vector<Tensor> together, alone, grads;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor v = randn(shapes[i], gen);
    if (i == 3) v = v.to(kFloat64);
    together.push_back(v.clone());
    alone.push_back(v.clone());
    grads.push_back(randn(shapes[i], gen).to(v.dtype()));
  }
  for (Tensor& t : together) t.set_requires_grad(true);
  for (Tensor& t : alone) t.set_requires_grad(true);
  Opt all(together, options);
  std::vector<std::unique_ptr<Opt>> each;
  for (const Tensor& t : alone)
    each.push_back(std::make_unique<Opt>(std::vector<Tensor>{t}, options));
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const bool has_grad = i != 2 || step == 1;  // the [17, 9] one only in step 1
      together[i].set_grad(has_grad ? grads[i].mul(step + 1.0) : Tensor());
      alone[i].set_grad(has_grad ? grads[i].mul(step + 1.0) : Tensor());
    }
    all.step();
    for (auto& o : each) o->step();
    for (size_t i = 0; i < shapes.size(); ++i)
      ASSERT_TRUE(same_bits(together[i].detach(), alone[i].detach()))
          << "parameter " << i << " after step " << step;
  }
}

TEST(UpdateBatch, AdamWOverManyParametersGivesTheBitsOfOneAtATime) {
  expect_bits_of_one_at_a_time<AdamW>(AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
  expect_bits_of_one_at_a_time<Adam>(AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
}

TEST(UpdateBatch, SgdOverManyParametersGivesTheBitsOfOneAtATime) {
  expect_bits_of_one_at_a_time<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
}

}  // namespace
}  // namespace cohort::optim
