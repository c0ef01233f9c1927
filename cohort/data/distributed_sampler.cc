#include "cohort/data/distributed_sampler.h"

#include <numeric>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, const Options& options)
    : dataset_size_(dataset_size), options_(options) {
  COHORT_CHECK(options.num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got {}",
               options.num_replicas);
  COHORT_CHECK(options.rank >= 0 && options.rank < options.num_replicas,
               "DistributedSampler: invalid rank {}, rank should be in the interval [0, {}]",
               options.rank, options.num_replicas - 1);
  COHORT_CHECK(dataset_size >= 0, "DistributedSampler: dataset size must be >= 0, got {}",
               dataset_size);
  const int64_t n = dataset_size, r = options.num_replicas;
  if (options.drop_last && n % r != 0) {
    num_samples_ = (n - r + r - 1) / r;  // ceil((n - r) / r), as PyTorch
    if (n < r) num_samples_ = 0;
  } else if (!options.drop_last && !options.pad) {
    num_samples_ = n / r + (options.rank < n % r ? 1 : 0);
  } else {
    num_samples_ = (n + r - 1) / r;
  }
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = torch_cpu_randperm(dataset_size_, options_.seed + static_cast<uint64_t>(epoch));
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  if (!options_.drop_last && !options_.pad) {
    std::vector<int64_t> mine;
    mine.reserve(static_cast<size_t>(num_samples_));
    for (int64_t i = options_.rank; i < dataset_size_; i += options_.num_replicas)
      mine.push_back(order[static_cast<size_t>(i)]);
    return mine;
  }
  const int64_t total = total_size();
  if (!options_.drop_last) {
    // Pad by repeating the order from its start (several times when the
    // padding is longer than the data set).
    const int64_t n = dataset_size_;
    for (int64_t i = n; i < total; ++i) order.push_back(order[static_cast<size_t>((i - n) % n)]);
  } else {
    order.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = options_.rank; i < total; i += options_.num_replicas)
    mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

void DistributedSampler::on_begin_epoch(bool resumed) {
  if (options_.shuffle && !resumed && last_begun_epoch_ == epoch() && !warned_) {
    warned_ = true;
    COHORT_WARN(
        "DistributedSampler (rank {} of {}): epoch {} is iterated again without set_epoch(); "
        "every epoch will see the same order. Call set_epoch(epoch) before each epoch.",
        options_.rank, options_.num_replicas, epoch());
  }
  last_begun_epoch_ = epoch();
}

}  // namespace cohort::data
