#include "cohort/parallel/buckets.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"

namespace cohort::parallel {
namespace {

TEST(AssignBuckets, ReverseRegistrationOrderClosedAtTheCapOneDtypePerBucket) {
  // The example of the header: 80 B exceeds 64 on its own; 4 + 40 fit.
  EXPECT_EQ(assign_buckets({{40, 0}, {4, 0}, {80, 0}}, 64),
            (std::vector<std::vector<size_t>>{{2}, {1, 0}}));
  // Two dtypes interleaved: each keeps its own open bucket; ordered by the
  // latest-registered member.
  EXPECT_EQ(assign_buckets({{8, 0}, {8, 1}, {8, 0}, {8, 1}}, 16),
            (std::vector<std::vector<size_t>>{{3, 1}, {2, 0}}));
  EXPECT_EQ(assign_buckets({{8, 0}, {8, 0}, {8, 0}}, 8),
            (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
  EXPECT_TRUE(assign_buckets({}, 8).empty());
}

TEST(BucketCapBytes, GivenMibOrTheAutomaticCapAndNeverZero) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(bucket_cap_bytes(2.0, 0), 2 * kMiB);
  EXPECT_EQ(bucket_cap_bytes(std::nullopt, 13 * kMiB), 13 * kMiB / 8);
  EXPECT_EQ(bucket_cap_bytes(1e-9, 0), 1u);
  EXPECT_THROW(bucket_cap_bytes(0.0, 0), InvalidArgument);
  EXPECT_THROW(bucket_cap_bytes(-1.0, 0), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
