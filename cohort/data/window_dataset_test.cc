#include "cohort/data/window_dataset.h"

#include <gtest/gtest.h>

#include <numeric>

#include "cohort/base/error.h"
#include "cohort/data/data_loader.h"

namespace cohort::data {
namespace {

TokenStream counting_stream(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>(i % 251);
  return TokenStream(std::move(t), 256, "counting");
}

TEST(WindowDataset, IndexTimesStrideIsTheOffset) {
  WindowDataset d(counting_stream(100), 8, 8);
  EXPECT_EQ(d.size(), (100 - 9) / 8 + 1);
  Batch b = d.get_batch(std::vector<int64_t>{0, 3});
  ASSERT_EQ(b.input.sizes(), (Shape{2, 8}));
  EXPECT_EQ(b.input.data_ptr<int64_t>()[8], 24);   // window 3 starts at 24
  EXPECT_EQ(b.target.data_ptr<int64_t>()[8], 25);  // the next token
  Example e = d.get(d.size() - 1);
  EXPECT_EQ(e.target.data_ptr<int64_t>()[7], (d.size() - 1) * 8 + 8);
  EXPECT_THROW(d.get(d.size()), InvalidArgument);
}

TEST(WindowDataset, RejectsAStreamShorterThanOneWindow) {
  EXPECT_THROW(WindowDataset(counting_stream(8), 8, 1), InvalidArgument);
  EXPECT_NO_THROW(WindowDataset(counting_stream(9), 8, 1));
}

TEST(RandomWindowSampler, EpochStepsAreTheWindowSamplersGlobalSteps) {
  TokenStream s = counting_stream(1000);
  WindowSampler::Options o{
      .batch_size = 4, .block_size = 16, .seed = 5, .num_replicas = 2, .rank = 1};
  RandomWindowSampler sampler(s, o, 3);
  WindowSampler plain(s, o);
  std::vector<int64_t> e1 = sampler.indices(1);
  ASSERT_EQ(static_cast<int64_t>(e1.size()), sampler.size());
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<int64_t> want = plain.offsets(3 + step);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), e1.begin() + step * 4)) << step;
  }
}

TEST(RandomWindowSampler, DataLoaderBatchesAreNanoGptWindowsAndResume) {
  TokenStream s = counting_stream(500);
  WindowSampler::Options o{.batch_size = 2, .block_size = 8, .seed = 1};
  auto sampler = std::make_shared<RandomWindowSampler>(s, o, 5);
  auto data = std::make_shared<WindowDataset>(s, 8, 1);
  DataLoaderOptions lo;
  lo.batch_size = 2;
  DataLoader loader(data, lo, sampler);
  loader.set_epoch(0);
  std::vector<Batch> all;
  for (Batch& b : loader) all.push_back(b);
  ASSERT_EQ(all.size(), 5u);
  WindowSampler plain(s, o);
  Batch want = plain.batch(3);
  EXPECT_TRUE(equal(all[3].input, want.input));
  EXPECT_TRUE(equal(all[3].target, want.target));

  // A loader resumed at position 6 (three batches in) yields batch 3 next.
  auto sampler2 = std::make_shared<RandomWindowSampler>(s, o, 5);
  DataLoader resumed(data, lo, sampler2);
  resumed.load_state({0, 6});
  resumed.set_epoch(0);
  auto it = resumed.begin();
  EXPECT_TRUE(equal((*it).input, want.input));
}

TEST(DefaultStepsPerEpoch, CoversTheStreamOnceOnAverage) {
  EXPECT_EQ(default_steps_per_epoch(2048, 1, 16, 128), 1);
  EXPECT_EQ(default_steps_per_epoch(2049, 1, 16, 128), 2);
  EXPECT_EQ(default_steps_per_epoch(100000, 2, 16, 128), 25);
  EXPECT_EQ(default_steps_per_epoch(0, 1, 16, 128), 1);
}

}  // namespace
}  // namespace cohort::data
