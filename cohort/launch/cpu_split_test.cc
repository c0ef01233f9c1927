#include "cohort/launch/cpu_split.h"

#include <gtest/gtest.h>

#include <numeric>

#include "cohort/base/error.h"

namespace cohort::launch {
namespace {

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(CpuSplit, EvenSplit) {
  auto shares = split_cpus(range(32), 2);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].size(), 16u);
  EXPECT_EQ(shares[1].size(), 16u);
  EXPECT_EQ(shares[0].front(), 0);
  EXPECT_EQ(shares[1].front(), 16);
}

TEST(CpuSplit, UnevenAndSparseCpus) {
  auto shares = split_cpus({1, 3, 5, 7, 9}, 2);
  EXPECT_EQ(shares[0], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(shares[1], (std::vector<int>{7, 9}));
}

TEST(CpuSplit, MoreWorkersThanCpusShareOneEach) {
  auto shares = split_cpus({0, 1}, 5);
  ASSERT_EQ(shares.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(shares[i], (std::vector<int>{static_cast<int>(i % 2)}));
}

TEST(CpuSplit, RejectsBadInput) {
  EXPECT_THROW(split_cpus({0}, 0), InvalidArgument);
  EXPECT_THROW(split_cpus({}, 1), InvalidArgument);
  EXPECT_FALSE(allowed_cpus().empty());
}

}  // namespace
}  // namespace cohort::launch
