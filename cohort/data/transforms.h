// Data transforms with LibTorch's names (torch::data::transforms), and
// data::map, which passes every example and batch of a data set through one:
//
//   auto train = data::map(data::FashionMnist(root), data::transforms::Normalize(0.1307, 0.3081));
//   DataLoader loader(train, options);
//
// Normalize is torchvision's: input = (input - mean) / std in the input's
// dtype, per channel (one mean and std for every channel, or one per
// channel: dim 0 of an example's input, dim 1 of a batch's); targets pass
// unchanged. Stack gathers same-shaped examples into a batch along a new dim
// 0: what Dataset::get_batch does by default, so unlike LibTorch a cohort
// program never maps Stack itself (cohort's DataLoader always yields Batches).
// MapDataset keeps the wrapped data set's own get_batch (one gather, then the
// transform on the batch), so mapping costs one pass over each batch.
// Errors: InvalidArgument for a non-positive std, mean/std lists of different
// lengths, a channel count that does not match, or a non-floating input.
// Thread safety: transforms are immutable; MapDataset is as thread safe as
// the data set it wraps.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/data/dataset.h"

namespace cohort::data {

namespace transforms {

class Normalize {
 public:
  Normalize(double mean, double stddev);
  Normalize(std::vector<double> mean, std::vector<double> stddev);

  Example operator()(Example example) const;  // input [C, ...] (or any shape for one mean)
  Batch operator()(Batch batch) const;        // input [B, C, ...] (or any shape for one mean)

 private:
  Tensor apply(const Tensor& input, int64_t channel_dim) const;

  std::vector<double> mean_;
  std::vector<double> stddev_;
};

struct Stack {
  // Throws InvalidArgument for no examples or examples of different shapes/dtypes.
  Batch operator()(std::span<const Example> examples) const;
};

}  // namespace transforms

// A data set whose examples and batches pass through `transform`, a callable
// on Example and on Batch (e.g. transforms::Normalize).
class MapDataset final : public Dataset {
 public:
  template <typename Transform>
  MapDataset(std::shared_ptr<const Dataset> base, Transform transform)
      : base_(std::move(base)),
        on_example_([transform](Example e) { return transform(std::move(e)); }),
        on_batch_([transform](Batch b) { return transform(std::move(b)); }) {
    COHORT_CHECK(base_ != nullptr, "MapDataset: the data set to map is null");
  }

  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override { return on_example_(base_->get(index)); }
  Batch get_batch(std::span<const int64_t> indices) const override {
    return on_batch_(base_->get_batch(indices));
  }
  const Dataset& base() const { return *base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::function<Example(Example)> on_example_;
  std::function<Batch(Batch)> on_batch_;
};

// LibTorch's dataset.map(transform): `dataset` is a shared_ptr to a data set
// or a data set by value (moved into a shared_ptr).
template <typename D, typename Transform>
std::shared_ptr<MapDataset> map(D&& dataset, Transform transform) {
  using Plain = std::remove_cvref_t<D>;
  if constexpr (requires { typename Plain::element_type; }) {
    return std::make_shared<MapDataset>(std::shared_ptr<const Dataset>(std::forward<D>(dataset)),
                                        std::move(transform));
  } else {
    return std::make_shared<MapDataset>(std::make_shared<Plain>(std::forward<D>(dataset)),
                                        std::move(transform));
  }
}

}  // namespace cohort::data
