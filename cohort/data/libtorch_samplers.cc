#include "cohort/data/libtorch_samplers.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "cohort/base/error.h"

namespace cohort::data {
namespace {

int64_t local_count(const char* what, int64_t n, int64_t replicas, int64_t rank, bool dup) {
  COHORT_CHECK(replicas >= 1, "{}: num_replicas must be >= 1, got {}", what, replicas);
  COHORT_CHECK(rank >= 0 && rank < replicas, "{}: rank {} is outside [0, {}]", what, rank,
               replicas - 1);
  COHORT_CHECK(n >= 0, "{}: the data set size must be >= 0, got {}", what, n);
  return dup ? (n + replicas - 1) / replicas : n / replicas;
}

}  // namespace

DistributedRandomSampler::DistributedRandomSampler(int64_t size, int64_t num_replicas,
                                                   int64_t rank, bool allow_duplicates)
    : n_(size),
      replicas_(num_replicas),
      rank_(rank),
      local_(local_count("DistributedRandomSampler", size, num_replicas, rank, allow_duplicates)) {}

std::vector<int64_t> DistributedRandomSampler::indices(int64_t epoch) const {
  // LibTorch shuffles the whole padded order with one rank-independent seed,
  // then each rank takes its block.
  const int64_t total = replicas_ == 1 ? n_ : local_ * replicas_;
  std::vector<int64_t> all(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) all[static_cast<size_t>(i)] = n_ ? i % n_ : 0;
  std::mt19937 rand(static_cast<std::mt19937::result_type>(epoch));
  std::shuffle(all.begin(), all.end(), rand);
  auto begin = all.begin() + rank_ * local_;
  return std::vector<int64_t>(begin, begin + local_);
}

DistributedSequentialSampler::DistributedSequentialSampler(int64_t size, int64_t num_replicas,
                                                           int64_t rank, bool allow_duplicates)
    : n_(size),
      rank_(rank),
      local_(local_count("DistributedSequentialSampler", size, num_replicas, rank,
                         allow_duplicates)) {}

std::vector<int64_t> DistributedSequentialSampler::indices(int64_t) const {
  std::vector<int64_t> mine(static_cast<size_t>(local_));
  for (int64_t i = 0; i < local_; ++i) mine[static_cast<size_t>(i)] = (rank_ * local_ + i) % n_;
  return mine;
}

}  // namespace cohort::data
