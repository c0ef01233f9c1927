// BatchNorm's BatchNormSync seam with a test double: training forwards go to
// the sync (a bad input handed over with its message instead of thrown, the
// cumulative momentum computed as for a local forward), eval forwards never
// do, and copies share the sync.
#include <gtest/gtest.h>

#include "cohort/nn/batch_norm.h"

namespace cohort::nn {
namespace {

// Records what it was given and normalises locally (when it can).
class RecordingSync final : public BatchNormSync {
 public:
  Tensor forward(const BatchNormBase& bn, const Tensor& x, const std::string& input_error,
                 double momentum) override {
    ++calls;
    last_error = input_error;
    last_momentum = momentum;
    if (!input_error.empty()) throw InvalidArgument(input_error);
    if (x.numel() <= x.size(1)) return x;  // too few values here alone: not this double's case
    return batch_norm(x, bn.running_mean(), bn.running_var(), bn.weight(), bn.bias(), true,
                      momentum, bn.options().eps);
  }
  int calls = 0;
  std::string last_error;
  double last_momentum = -1;
};

TEST(BatchNormSync, TrainingForwardsGoToTheSyncEvalForwardsDoNot) {
  Generator gen(1);
  BatchNorm2d bn(3, {.momentum = std::nullopt});
  auto sync = std::make_shared<RecordingSync>();
  bn.set_sync(sync);
  Tensor x = randn({4, 3, 2, 2}, gen);
  BatchNorm2d plain(3, {.momentum = std::nullopt});
  EXPECT_TRUE(allclose(bn(x), plain(x)));
  bn(x);
  EXPECT_EQ(sync->calls, 2);
  EXPECT_DOUBLE_EQ(sync->last_momentum, 0.5);  // the cumulative average's 1 / 2
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 2);

  // One value per channel is the sync's to judge (other processes may hold more).
  EXPECT_NO_THROW(bn(randn({1, 3, 1, 1}, gen)));
  EXPECT_EQ(sync->last_error, "");
  // A bad input reaches the sync with the layer's own message.
  EXPECT_THROW(bn(randn({2, 4, 2, 2}, gen)), InvalidArgument);
  EXPECT_NE(sync->last_error.find("[N, 3, H, W]"), std::string::npos) << sync->last_error;

  bn.eval();
  const int before = sync->calls;
  bn(x);
  EXPECT_EQ(sync->calls, before);

  auto copy = bn.clone_as<BatchNorm2d>();
  EXPECT_EQ(copy->sync(), bn.sync());
}

}  // namespace
}  // namespace cohort::nn
