#include "cohort/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "cohort/base/error.h"
#include "cohort/data/distributed_sampler.h"

namespace cohort::data {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(SequentialSampler, YieldsRangeEveryEpoch) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.begin_epoch(), iota(5));
  s.advance(5);
  s.end_epoch();
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(s.begin_epoch(), iota(5));
}

TEST(RandomSampler, PermutationDependsOnSeedAndEpochOnly) {
  RandomSampler a(100, 7), b(100, 7), c(100, 8);
  auto a0 = a.indices(0), a1 = a.indices(1);
  auto sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
  EXPECT_NE(a0, iota(100));
  EXPECT_NE(a0, a1);
  EXPECT_EQ(a0, b.indices(0));
  EXPECT_EQ(a1, b.indices(1));
  EXPECT_NE(a0, c.indices(0));
}

TEST(RandomSampler, SameStepSamplesAsDistributedRanks) {
  // One process, batch 2 * 4, sees per step the union of what 2 ranks with
  // batch 4 see: the single-process baseline of data-parallel training.
  const int64_t n = 64, b = 4;
  RandomSampler single(n, 11);
  std::vector<std::vector<int64_t>> ranks;
  for (int64_t r = 0; r < 2; ++r) {
    DistributedSampler s(n, {.num_replicas = 2, .rank = r, .seed = 11});
    s.set_epoch(3);
    ranks.push_back(s.begin_epoch());
  }
  auto all = single.indices(3);
  for (int64_t step = 0; step < n / (2 * b); ++step) {
    std::multiset<int64_t> one(all.begin() + step * 2 * b, all.begin() + (step + 1) * 2 * b);
    std::multiset<int64_t> two;
    for (const auto& r : ranks) two.insert(r.begin() + step * b, r.begin() + (step + 1) * b);
    EXPECT_EQ(one, two) << "step " << step;
  }
}

TEST(RandomSampler, NewPermutationPerIteration) {
  RandomSampler s(50, 3);
  auto e0 = s.begin_epoch();
  s.advance(50);
  s.end_epoch();
  auto e1 = s.begin_epoch();
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e1, s.indices(1));
}

TEST(Sampler, ResumesAtLoadedPosition) {
  RandomSampler s(20, 1);
  s.load_state({3, 8});
  auto rest = s.begin_epoch();
  auto full = s.indices(3);
  EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + 8, full.end()));
  // set_epoch with the same epoch keeps the resume point; a new one drops it.
  s.load_state({3, 8});
  s.set_epoch(3);
  EXPECT_EQ(s.begin_epoch().size(), 12u);
  s.load_state({3, 8});
  s.set_epoch(4);
  EXPECT_EQ(s.begin_epoch(), s.indices(4));
  EXPECT_THROW(s.load_state({0, 21}), InvalidArgument);
  EXPECT_THROW(s.load_state({-1, 0}), InvalidArgument);
}

TEST(Sampler, TorchCpuRandpermMatchesPyTorch) {
  // torch.randperm(10, generator=torch.Generator().manual_seed(s)), PyTorch 1.13.
  EXPECT_EQ(torch_cpu_randperm(10, 0), (std::vector<int64_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}));
  EXPECT_EQ(torch_cpu_randperm(10, 1), (std::vector<int64_t>{5, 6, 1, 2, 0, 8, 9, 3, 7, 4}));
  EXPECT_EQ(torch_cpu_randperm(10, 42), (std::vector<int64_t>{2, 6, 1, 8, 4, 5, 0, 9, 3, 7}));
  EXPECT_EQ(torch_cpu_randperm(10, 4294967301ull),
            (std::vector<int64_t>{1, 4, 9, 6, 3, 5, 0, 2, 8, 7}));
}

struct TorchCase {
  int64_t n, replicas, rank;
  bool shuffle, drop_last;
  int64_t epoch;
  uint64_t seed;
  std::vector<int64_t> expected;
};

// list(DistributedSampler(range(n), num_replicas, rank, shuffle, seed, drop_last))
// after set_epoch(epoch), recorded with PyTorch 1.13.
const TorchCase kTorchCases[] = {
    {10, 3, 0, false, false, 0, 0, {0, 3, 6, 9}},
    {10, 3, 2, false, false, 0, 0, {2, 5, 8, 1}},
    {10, 3, 1, false, true, 0, 0, {1, 4, 7}},
    {10, 4, 3, false, true, 0, 0, {3, 7}},
    {2, 5, 4, false, false, 0, 0, {0}},
    {10, 3, 0, true, false, 0, 0, {4, 5, 0, 2}},
    {10, 3, 1, true, false, 1, 0, {6, 0, 3, 5}},
    {10, 3, 2, true, true, 3, 42, {5, 9, 2}},
    {17, 4, 2, true, false, 5, 7, {9, 3, 0, 4, 12}},
    {100, 3, 1, true, false, 0, 1234, {67, 48, 34, 13, 14, 76, 16, 94, 82, 6,  87, 5,
                                       8,  91, 98, 59, 37, 55, 96, 40, 88, 93, 60, 99,
                                       38, 71, 32, 35, 61, 2,  12, 49, 95, 75}},
    {7, 8, 7, true, false, 2, 0, {2}},
};

TEST(DistributedSampler, MatchesPyTorchIndexLists) {
  for (const TorchCase& c : kTorchCases) {
    DistributedSampler s(c.n, {.num_replicas = c.replicas,
                               .rank = c.rank,
                               .shuffle = c.shuffle,
                               .seed = c.seed,
                               .drop_last = c.drop_last});
    s.set_epoch(c.epoch);
    EXPECT_EQ(s.begin_epoch(), c.expected)
        << "n=" << c.n << " R=" << c.replicas << " rank=" << c.rank << " shuffle=" << c.shuffle
        << " drop_last=" << c.drop_last << " epoch=" << c.epoch << " seed=" << c.seed;
    EXPECT_EQ(s.size(), static_cast<int64_t>(c.expected.size()));
  }
}

int64_t weighted_sum(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (size_t i = 0; i < v.size(); ++i)
    sum = (sum + static_cast<int64_t>(i) * v[i] % 1000000007) % 1000000007;
  return sum;
}

TEST(DistributedSampler, MatchesPyTorchOnFullSizeDataSets) {
  // Values recorded with PyTorch 1.13: len, head, tail, sum(i * v) mod 1e9+7.
  DistributedSampler a(60000, {.num_replicas = 2, .rank = 1, .shuffle = true, .seed = 0});
  a.set_epoch(3);
  auto la = a.begin_epoch();
  ASSERT_EQ(la.size(), 30000u);
  EXPECT_EQ(std::vector<int64_t>(la.begin(), la.begin() + 8),
            (std::vector<int64_t>{46111, 54054, 45710, 38831, 48358, 16864, 5519, 58384}));
  EXPECT_EQ(std::vector<int64_t>(la.end() - 3, la.end()),
            (std::vector<int64_t>{48743, 59646, 32804}));
  EXPECT_EQ(weighted_sum(la), 368695300);

  DistributedSampler b(60001, {.num_replicas = 4, .rank = 3, .shuffle = true, .seed = 17});
  b.set_epoch(1);
  auto lb = b.begin_epoch();
  ASSERT_EQ(lb.size(), 15001u);
  EXPECT_EQ(std::vector<int64_t>(lb.begin(), lb.begin() + 8),
            (std::vector<int64_t>{34266, 32477, 49267, 13250, 28449, 17834, 39028, 6601}));
  EXPECT_EQ(weighted_sum(lb), 706791442);
}

TEST(DistributedSampler, WithoutPaddingEveryIndexOnceAndCountsDifferByOne) {
  // pad = false: uneven inputs (for a Join): n indices over the ranks, none
  // repeated, the first n % R ranks one more.
  for (int64_t n : {0, 1, 9, 10, 11, 64}) {
    const int64_t replicas = 4;
    std::multiset<int64_t> all;
    for (int64_t r = 0; r < replicas; ++r) {
      DistributedSampler s(n, {.num_replicas = replicas, .rank = r, .seed = 5, .pad = false});
      s.set_epoch(1);
      auto idx = s.begin_epoch();
      EXPECT_EQ(static_cast<int64_t>(idx.size()), n / replicas + (r < n % replicas ? 1 : 0));
      EXPECT_EQ(s.size(), static_cast<int64_t>(idx.size()));
      EXPECT_EQ(s.total_size(), n);
      all.insert(idx.begin(), idx.end());
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(all.count(i), 1u) << "n=" << n << " i=" << i;
  }
}

TEST(DistributedSampler, RanksPartitionThePaddedOrder) {
  for (bool drop_last : {false, true}) {
    for (int64_t n : {1, 9, 10, 11, 64}) {
      const int64_t replicas = 4;
      std::multiset<int64_t> all;
      size_t per_rank = 0;
      for (int64_t r = 0; r < replicas; ++r) {
        DistributedSampler s(
            n, {.num_replicas = replicas, .rank = r, .seed = 5, .drop_last = drop_last});
        s.set_epoch(2);
        auto idx = s.begin_epoch();
        if (r == 0) per_rank = idx.size();
        EXPECT_EQ(idx.size(), per_rank);  // every rank the same count
        all.insert(idx.begin(), idx.end());
      }
      const int64_t expected_total =
          drop_last ? n / replicas * replicas : (n + replicas - 1) / replicas * replicas;
      EXPECT_EQ(static_cast<int64_t>(all.size()), expected_total) << "n=" << n;
      if (!drop_last) {
        for (int64_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << "n=" << n << " i=" << i;
      } else {
        for (int64_t i = 0; i < n; ++i) EXPECT_LE(all.count(i), 1u);
      }
    }
  }
}

TEST(DistributedSampler, EpochChangesShuffleOnlyViaSetEpoch) {
  DistributedSampler s(30, {.num_replicas = 2, .rank = 0, .seed = 1});
  auto e0 = s.begin_epoch();
  s.advance(static_cast<int64_t>(e0.size()));
  s.end_epoch();
  EXPECT_EQ(s.epoch(), 0);                            // PyTorch semantics: no automatic advance
  EXPECT_EQ(s.state(), (SamplerState{0, s.size()}));  // used up
  // Resuming from that state yields nothing more of epoch 0.
  DistributedSampler resumed(30, {.num_replicas = 2, .rank = 0, .seed = 1});
  resumed.load_state(s.state());
  resumed.set_epoch(0);
  EXPECT_TRUE(resumed.begin_epoch().empty());
  s.set_epoch(1);
  EXPECT_NE(s.begin_epoch(), e0);
}

TEST(DistributedSampler, WarnsWhenEpochIsRepeated) {
  DistributedSampler s(30, {.num_replicas = 2, .rank = 1, .seed = 1});
  s.set_epoch(0);
  testing::internal::CaptureStderr();
  s.begin_epoch();
  s.end_epoch();
  s.set_epoch(1);
  s.begin_epoch();
  s.end_epoch();
  std::string clean = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(s.warned_repeated_epoch());
  EXPECT_EQ(clean.find("set_epoch"), std::string::npos);
  testing::internal::CaptureStderr();
  s.begin_epoch();  // epoch 1 again
  std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.warned_repeated_epoch());
  EXPECT_NE(warned.find("set_epoch"), std::string::npos) << warned;
  // No warning without shuffle: the order is meant to be fixed.
  DistributedSampler fixed(30, {.num_replicas = 2, .rank = 0, .shuffle = false});
  fixed.begin_epoch();
  fixed.end_epoch();
  fixed.begin_epoch();
  EXPECT_FALSE(fixed.warned_repeated_epoch());
}

TEST(DistributedSampler, RejectsBadRank) {
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 0, .rank = 0}), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = -1}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::data
