#include <gtest/gtest.h>

#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {
namespace {

TEST(AutoBucketCap, AnEighthOfTheGradientsWithinOneAnd25MiB) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(auto_bucket_cap_bytes(440 * 1024), kMiB);          // Net: one bucket, as before
  EXPECT_EQ(auto_bucket_cap_bytes(13 * kMiB), 13 * kMiB / 8);  // the GPT reference: 8 buckets
  EXPECT_EQ(auto_bucket_cap_bytes(500 * kMiB), 25 * kMiB);     // PyTorch's default above 200 MiB
}

}  // namespace
}  // namespace cohort::parallel
