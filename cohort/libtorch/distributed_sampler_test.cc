// DistributedSampler against PyTorch's Python DistributedSampler: the
// expected indices below were printed by torch 1.13's
// torch.utils.data.distributed.DistributedSampler (list(sampler) for each
// rank after set_epoch) for the same arguments.
#include "cohort/libtorch/distributed_sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace cohort::libtorch {
namespace {

struct Case {
  size_t size, replicas;
  bool shuffle;
  uint64_t seed;
  size_t epoch;
  bool drop_last;
  std::vector<std::vector<size_t>> want;  // per rank
};

TEST(LibTorchDistributedSampler, DrawsPyTorchsIndicesBitForBit) {
  const std::vector<Case> cases = {
      {10, 3, true, 0, 0, false, {{4, 5, 0, 2}, {1, 3, 8, 4}, {7, 9, 6, 1}}},
      {10, 3, true, 7, 2, false, {{0, 7, 9, 3}, {5, 6, 1, 0}, {8, 2, 4, 5}}},
      {10, 3, false, 0, 0, false, {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}},
      {10, 3, true, 0, 1, true, {{5, 2, 9}, {6, 0, 3}, {1, 8, 7}}},
      {2, 3, true, 0, 0, false, {{0}, {1}, {0}}},
      {23,
       4,
       true,
       42,
       5,
       false,
       {{7, 10, 21, 3, 9, 6},
        {5, 18, 11, 22, 12, 4},
        {1, 15, 16, 8, 13, 19},
        {0, 14, 2, 17, 20, 7}}},
  };
  for (const Case& c : cases) {
    for (size_t r = 0; r < c.replicas; ++r) {
      DistributedSampler s(c.size, {.num_replicas = c.replicas,
                                    .rank = r,
                                    .shuffle = c.shuffle,
                                    .seed = c.seed,
                                    .drop_last = c.drop_last});
      s.set_epoch(c.epoch);
      s.reset();
      std::vector<size_t> got;
      while (auto b = s.next(4)) got.insert(got.end(), b->begin(), b->end());
      EXPECT_EQ(got, c.want[r]) << "size " << c.size << " replicas " << c.replicas << " rank " << r
                                << " seed " << c.seed << " epoch " << c.epoch;
      EXPECT_EQ(s.num_samples(), c.want[r].size());
    }
  }
}

// A tiny data set of its own indices, to see what a DataLoader hands out.
struct Indices : torch::data::datasets::Dataset<Indices> {
  torch::data::Example<> get(size_t i) override {
    return {torch::tensor(static_cast<int64_t>(i)), torch::tensor(0)};
  }
  torch::optional<size_t> size() const override { return 23; }
};

TEST(LibTorchDistributedSampler, DataLoaderBatchesFollowTheSampler) {
  auto loader = torch::data::make_data_loader(
      Indices().map(torch::data::transforms::Stack<>()),
      DistributedSampler(23, {.num_replicas = 4, .rank = 3, .seed = 42}),
      torch::data::DataLoaderOptions(4));
  // The loader owns a copy of the sampler: its batches are the sampler's indices in order.
  std::vector<int64_t> got;
  for (auto& batch : *loader)
    for (int64_t i = 0; i < batch.data.size(0); ++i) got.push_back(batch.data[i].item<int64_t>());
  DistributedSampler ref(23, {.num_replicas = 4, .rank = 3, .seed = 42});
  std::vector<int64_t> want(ref.indices().begin(), ref.indices().end());
  EXPECT_EQ(got, want);
  EXPECT_THROW(DistributedSampler(5, {.num_replicas = 2, .rank = 2}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::libtorch
