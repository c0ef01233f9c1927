// DistributedSampler for torch::data: each of num_replicas ranks draws its
// own share of a data set's indices, the same indices, in the same order, as
// PyTorch's Python torch.utils.data.distributed.DistributedSampler with the
// same (size, num_replicas, rank, shuffle, seed, drop_last, epoch). LibTorch's
// own DistributedRandomSampler draws another permutation (and pads
// differently), so a C++ job and a Python job on the same data would see
// different batches; with this one they see the same.
//
//   cohort::libtorch::DistributedSampler sampler(dataset.size().value(),
//                                                {.num_replicas = pg.size(), .rank = pg.rank()});
//   auto loader = torch::data::make_data_loader(std::move(dataset), sampler, batch);
//   for (size_t epoch = 0; ...; ++epoch) { sampler.set_epoch(epoch); for (auto& b : *loader) ... }
//
// PyTorch's rule: shuffle = a permutation of [0, size) by torch::randperm
// with a CPU generator seeded seed + epoch, else [0, size); without
// drop_last padded to num_samples * num_replicas by repeating it from the
// start, with drop_last cut to that length; then rank, rank + num_replicas,
// ... num_samples = ceil(size / num_replicas), or with drop_last and a size
// that does not divide, ceil((size - num_replicas) / num_replicas).
// Construction throws cohort::InvalidArgument for rank outside
// [0, num_replicas). Not thread safe (as every torch::data sampler).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/data/samplers/distributed.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::libtorch {

struct DistributedSamplerOptions {
  size_t num_replicas = 1;
  size_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler : public torch::data::samplers::DistributedSampler<> {
 public:
  explicit DistributedSampler(size_t size, DistributedSamplerOptions options = {})
      : torch::data::samplers::DistributedSampler<>(size, options.num_replicas, options.rank,
                                                    !options.drop_last),
        options_(options) {
    COHORT_CHECK(options.num_replicas > 0 && options.rank < options.num_replicas,
                 "DistributedSampler: rank {} outside [0, num_replicas = {})", options.rank,
                 options.num_replicas);
    reset(size);
  }

  // The number of indices this rank draws per epoch.
  size_t num_samples() const { return num_samples_; }
  // This epoch's indices for this rank (what next() hands out in order).
  const std::vector<size_t>& indices() const { return indices_; }

  // Recomputes the indices for the current epoch (set_epoch() first).
  void reset(torch::optional<size_t> new_size = torch::nullopt) override {
    if (new_size) size_ = *new_size;
    const size_t n = size_, r = options_.num_replicas;
    num_samples_ =
        (options_.drop_last && n % r != 0) ? (n >= r ? (n - r + r - 1) / r : 0) : (n + r - 1) / r;
    const size_t total = num_samples_ * r;
    std::vector<size_t> all(n);
    if (options_.shuffle) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options_.seed + epoch_);
      at::Tensor perm = at::randperm(static_cast<int64_t>(n), gen, at::kLong);
      const int64_t* p = perm.data_ptr<int64_t>();
      for (size_t i = 0; i < n; ++i) all[i] = static_cast<size_t>(p[i]);
    } else {
      for (size_t i = 0; i < n; ++i) all[i] = i;
    }
    if (!options_.drop_last && n > 0) {
      const size_t base = all.size();
      for (size_t i = 0; all.size() < total; ++i) all.push_back(all[i % base]);
    } else {
      all.resize(std::min(all.size(), total));
    }
    indices_.clear();
    for (size_t i = options_.rank; i < all.size(); i += r) indices_.push_back(all[i]);
    next_ = 0;
  }

  torch::optional<std::vector<size_t>> next(size_t batch_size) override {
    if (next_ >= indices_.size()) return torch::nullopt;
    const size_t end = std::min(indices_.size(), next_ + batch_size);
    std::vector<size_t> out(indices_.begin() + static_cast<std::ptrdiff_t>(next_),
                            indices_.begin() + static_cast<std::ptrdiff_t>(end));
    next_ = end;
    return out;
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("epoch", torch::tensor(static_cast<int64_t>(epoch_)), /*is_buffer=*/true);
    archive.write("next", torch::tensor(static_cast<int64_t>(next_)), /*is_buffer=*/true);
  }
  void load(torch::serialize::InputArchive& archive) override {
    at::Tensor e, n;
    archive.read("epoch", e, /*is_buffer=*/true);
    archive.read("next", n, /*is_buffer=*/true);
    epoch_ = static_cast<size_t>(e.item<int64_t>());
    reset(size_);
    next_ = static_cast<size_t>(n.item<int64_t>());
  }

 private:
  DistributedSamplerOptions options_;
  size_t num_samples_ = 0;
  std::vector<size_t> indices_;
  size_t next_ = 0;
};

}  // namespace cohort::libtorch
