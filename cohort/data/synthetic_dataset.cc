#include "cohort/data/synthetic_dataset.h"

#include "cohort/core/random.h"

namespace cohort::data {

SyntheticDataset::SyntheticDataset(const Options& options) : options_(options) {
  COHORT_CHECK(options.size > 0, "SyntheticDataset: size must be > 0, got {}", options.size);
  COHORT_CHECK(options.num_classes >= 0, "SyntheticDataset: num_classes must be >= 0, got {}",
               options.num_classes);
  for (int64_t d : options.input_shape)
    COHORT_CHECK(d > 0, "SyntheticDataset: input_shape {} has a non-positive size",
                 shape_str(options.input_shape));
  Generator gen(options.seed);
  Shape in_sizes = options.input_shape;
  in_sizes.insert(in_sizes.begin(), options.size);
  if (options.num_classes > 0) {
    Shape centre_sizes = options.input_shape;
    centre_sizes.insert(centre_sizes.begin(), options.num_classes);
    Tensor centres = randn(centre_sizes, gen);
    targets_ = randint(0, options.num_classes, {options.size}, gen);
    inputs_ = randn(in_sizes, gen);
    inputs_.mul_(options.noise);
    const int64_t row = shape_numel(options.input_shape);
    const float* c = centres.data_ptr<float>();
    const int64_t* y = targets_.data_ptr<int64_t>();
    float* x = inputs_.data_ptr<float>();
    for (int64_t i = 0; i < options.size; ++i) {
      const float* ci = c + y[i] * row;
      float* xi = x + i * row;
      for (int64_t j = 0; j < row; ++j) xi[j] += ci[j];
    }
  } else {
    Shape t_sizes = options.target_shape;
    t_sizes.insert(t_sizes.begin(), options.size);
    inputs_ = randn(in_sizes, gen);
    targets_ = randn(t_sizes, gen);
  }
}

Example SyntheticDataset::get(int64_t index) const {
  check_index("SyntheticDataset::get", index, size());
  return Example{inputs_.select(0, index).clone(), targets_.select(0, index).clone()};
}

Batch SyntheticDataset::get_batch(std::span<const int64_t> indices) const {
  COHORT_CHECK(!indices.empty(), "SyntheticDataset::get_batch: empty index list");
  return Batch{gather_rows(inputs_, indices, "SyntheticDataset::get_batch"),
               gather_rows(targets_, indices, "SyntheticDataset::get_batch")};
}

}  // namespace cohort::data
