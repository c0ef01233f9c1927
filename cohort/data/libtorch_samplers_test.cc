// LibTorch's distributed samplers, against the orders Debian's LibTorch
// 1.13.1 prints for the same arguments (torch::data::samplers::
// DistributedRandomSampler(10, 3, rank, allow_duplicates) after
// set_epoch(e) and reset(), next(100)).
#include "cohort/data/libtorch_samplers.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::data {
namespace {

using V = std::vector<int64_t>;

TEST(DistributedRandomSampler, MatchesLibTorchsOrder) {
  const V with_dup[2][3] = {{{0, 2, 1, 5}, {9, 1, 4, 7}, {6, 0, 3, 8}},
                            {{1, 8, 5, 2}, {0, 6, 7, 1}, {9, 0, 4, 3}}};
  const V without_dup[2][3] = {{{2, 4, 6}, {0, 5, 1}, {8, 3, 7}},
                               {{3, 6, 0}, {1, 2, 8}, {7, 4, 5}}};
  const int64_t epochs[2] = {0, 5};
  for (int e = 0; e < 2; ++e)
    for (int64_t rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(DistributedRandomSampler(10, 3, rank, true).indices(epochs[e]), with_dup[e][rank])
          << "epoch " << epochs[e] << " rank " << rank;
      EXPECT_EQ(DistributedRandomSampler(10, 3, rank, false).indices(epochs[e]),
                without_dup[e][rank])
          << "epoch " << epochs[e] << " rank " << rank;
    }
}

TEST(DistributedRandomSampler, RanksCoverThePaddedSetAndKeepTheirEpoch) {
  V all;
  for (int64_t rank = 0; rank < 4; ++rank) {
    DistributedRandomSampler s(13, 4, rank);
    EXPECT_EQ(s.size(), 4);
    V mine = s.begin_epoch();
    all.insert(all.end(), mine.begin(), mine.end());
    s.end_epoch();
    EXPECT_EQ(s.epoch(), 0);  // only set_epoch() moves it, as in LibTorch
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (V{0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(DistributedRandomSampler(5).indices(1).size(), 5u);
}

TEST(DistributedSequentialSampler, MatchesLibTorchsBlocks) {
  EXPECT_EQ(DistributedSequentialSampler(10, 3, 0).indices(0), (V{0, 1, 2, 3}));
  EXPECT_EQ(DistributedSequentialSampler(10, 3, 1).indices(0), (V{4, 5, 6, 7}));
  EXPECT_EQ(DistributedSequentialSampler(10, 3, 2).indices(0), (V{8, 9, 0, 1}));
  EXPECT_EQ(DistributedSequentialSampler(10, 3, 2, false).indices(0), (V{6, 7, 8}));
}

TEST(DistributedRandomSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedRandomSampler(10, 0, 0), InvalidArgument);
  EXPECT_THROW(DistributedRandomSampler(10, 2, 2), InvalidArgument);
  EXPECT_THROW(DistributedSequentialSampler(-1, 1, 0), InvalidArgument);
}

}  // namespace
}  // namespace cohort::data
