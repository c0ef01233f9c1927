// LibTorch's distributed samplers (torch::data::samplers::
// DistributedRandomSampler and DistributedSequentialSampler), for programs
// ported from LibTorch that expect their order. They differ from
// DistributedSampler (PyTorch's Python sampler, strided, seeded randperm):
//   - each rank takes a contiguous block of local = ceil(n / R) indices
//     (allow_duplicates) or floor(n / R) (not), block `rank` of the order;
//   - the order is 0..n-1 padded to local * R by wrapping around (i % n),
//     and for the random sampler shuffled with std::shuffle driven by a
//     std::mt19937 seeded with the epoch: identical on every rank, a new
//     order per set_epoch(). std::shuffle is the standard library's, so the
//     order matches LibTorch built against the same one (Debian's libtorch
//     and cohort both use libstdc++).
// As in LibTorch the epoch only changes through set_epoch().
// Construction throws InvalidArgument unless num_replicas >= 1,
// 0 <= rank < num_replicas and size >= 0.
// Thread safety: none (see sampler.h).
#pragma once

#include "cohort/data/sampler.h"

namespace cohort::data {

class DistributedRandomSampler final : public Sampler {
 public:
  DistributedRandomSampler(int64_t size, int64_t num_replicas = 1, int64_t rank = 0,
                           bool allow_duplicates = true);
  int64_t size() const override { return local_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 protected:
  bool advances_epoch_itself() const override { return false; }

 private:
  int64_t n_, replicas_, rank_, local_;
};

class DistributedSequentialSampler final : public Sampler {
 public:
  DistributedSequentialSampler(int64_t size, int64_t num_replicas = 1, int64_t rank = 0,
                               bool allow_duplicates = true);
  int64_t size() const override { return local_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 protected:
  bool advances_epoch_itself() const override { return false; }

 private:
  int64_t n_, rank_, local_;
};

}  // namespace cohort::data
