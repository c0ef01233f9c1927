// SyntheticDataset: a seeded in-memory data set for tests, benchmarks and
// models with no real data here. Everything is a pure function of the options
// (the same seed gives the same bytes on every machine and thread count).
//
// Classification (num_classes > 0): each class c has a fixed random centre
// mu_c ~ N(0, 1) of input_shape; example i has label y_i uniform in
// [0, num_classes) and input mu_{y_i} + noise * N(0, 1), so models can learn
// it. Targets are int64 [B].
// Regression (num_classes == 0): inputs N(0, 1) and targets N(0, 1) of
// target_shape (float32 [B, ...target_shape]), like the ToyModel tutorial.
// Immutable; thread safe.
#pragma once

#include <cstdint>

#include "cohort/data/dataset.h"

namespace cohort::data {

class SyntheticDataset : public Dataset {
 public:
  struct Options {
    int64_t size = 1024;
    Shape input_shape = {1, 28, 28};
    int64_t num_classes = 10;  // 0: regression
    Shape target_shape = {};   // regression only, e.g. {5}
    double noise = 1.0;        // classification: std of the noise around the class centre
    uint64_t seed = 0;
  };

  explicit SyntheticDataset(const Options& options);

  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;

  const Options& options() const { return options_; }
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Options options_;
  Tensor inputs_;   // float32 [N, ...input_shape]
  Tensor targets_;  // int64 [N] or float32 [N, ...target_shape]
};

}  // namespace cohort::data
