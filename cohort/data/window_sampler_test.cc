#include "cohort/data/window_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "cohort/data/token_test_util.h"

namespace cohort::data {
namespace {

using namespace testing_util;

// A stream whose token i is i (mod 65536): a token names its position.
TokenStream positions(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  return TokenStream(std::move(t), 65536, "'positions'");
}

std::vector<int64_t> row(const Tensor& t, int64_t i) { return t.select(0, i).to_vector<int64_t>(); }

TEST(TorchCpuRandint, MatchesPyTorch) {
  // torch.randint(high, (n,), generator=torch.Generator().manual_seed(seed)),
  // PyTorch 1.13 on the CPU.
  EXPECT_EQ(torch_cpu_randint(1000, 8, 7),
            (std::vector<int64_t>{615, 892, 721, 286, 283, 347, 287, 279}));
  // The seed's low 32 bits only, as PyTorch's mt19937.
  EXPECT_EQ(torch_cpu_randint(1000, 8, (uint64_t{1} << 32) + 7), torch_cpu_randint(1000, 8, 7));
  EXPECT_EQ(torch_cpu_randint(4000000000, 3, 0),
            (std::vector<int64_t>{2357136044, 2546248239, 3071714933}));
  // A range of 2^32 or more takes two 32-bit draws per value.
  EXPECT_EQ(torch_cpu_randint((int64_t{1} << 33) + 5, 4, 12345),
            (std::vector<int64_t>{2431443253, 1459294139, 6785887124, 1353066883}));
}

TEST(WindowSampler, TargetIsTheInputShiftedByOne) {
  const int64_t T = 32;
  WindowSampler s(positions(5000), {.batch_size = 8, .block_size = T, .seed = 3});
  for (int64_t step = 0; step < 4; ++step) {
    Batch b = s.batch(step);
    ASSERT_EQ(b.input.sizes(), (Shape{8, T}));
    ASSERT_EQ(b.target.sizes(), (Shape{8, T}));
    EXPECT_EQ(b.input.dtype(), DType::kInt64);
    EXPECT_EQ(b.target.dtype(), DType::kInt64);
    const std::vector<int64_t> off = s.offsets(step);
    for (int64_t i = 0; i < 8; ++i) {
      std::vector<int64_t> x = row(b.input, i), y = row(b.target, i);
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(x[static_cast<size_t>(t)], off[static_cast<size_t>(i)] + t);
        EXPECT_EQ(y[static_cast<size_t>(t)], off[static_cast<size_t>(i)] + t + 1);
      }
    }
  }
}

TEST(WindowSampler, OffsetsAreTorchRandintSeededWithSeedPlusStep) {
  // n - T = 1000 possible starts; seed 5 at step 2 is torch's manual_seed(7).
  WindowSampler s(positions(1000 + 16), {.batch_size = 8, .block_size = 16, .seed = 5});
  EXPECT_EQ(s.num_offsets(), 1000);
  EXPECT_EQ(s.offsets(2), (std::vector<int64_t>{615, 892, 721, 286, 283, 347, 287, 279}));
}

TEST(WindowSampler, OffsetsStayInRangeAndReachBothEnds) {
  // n = T + 3: starts 0, 1, 2 only; the last window ends at the last token.
  const int64_t T = 10;
  WindowSampler s(positions(T + 3), {.batch_size = 16, .block_size = T});
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 20; ++step)
    for (int64_t o : s.offsets(step)) {
      EXPECT_GE(o, 0);
      EXPECT_LE(o, 2);
      seen.insert(o);
    }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2}));
  // One window exactly: n = T + 1.
  WindowSampler one(positions(T + 1), {.batch_size = 2, .block_size = T});
  EXPECT_EQ(one.offsets(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(row(one.batch(0).target, 1).back(), T);
}

TEST(WindowSampler, ReproduciblePerSeed) {
  TokenStream st = positions(10000);
  WindowSampler a(st, {.batch_size = 4, .block_size = 8, .seed = 11});
  WindowSampler b(st, {.batch_size = 4, .block_size = 8, .seed = 11});
  WindowSampler c(st, {.batch_size = 4, .block_size = 8, .seed = 12});
  for (int64_t step = 0; step < 5; ++step) {
    Batch x = a.next(), y = b.next();
    EXPECT_TRUE(equal(x.input, y.input));
    EXPECT_TRUE(equal(x.target, y.target));
    EXPECT_NE(a.offsets(step), c.offsets(step));
  }
  // Consecutive steps draw different windows.
  EXPECT_NE(a.offsets(0), a.offsets(1));
}

TEST(WindowSampler, RanksTogetherSeeWhatOneProcessWithTheirSummedBatchSees) {
  TokenStream st = positions(20000);
  const int64_t R = 3, B = 4, T = 16;
  WindowSampler single(st, {.batch_size = R * B, .block_size = T, .seed = 9});
  std::vector<WindowSampler> ranks;
  for (int64_t r = 0; r < R; ++r)
    ranks.emplace_back(
        st, WindowSampler::Options{
                .batch_size = B, .block_size = T, .seed = 9, .num_replicas = R, .rank = r});
  for (int64_t step = 0; step < 6; ++step) {
    std::vector<int64_t> joined;
    for (const WindowSampler& w : ranks) {
      std::vector<int64_t> o = w.offsets(step);
      EXPECT_EQ(o.size(), static_cast<size_t>(B));
      joined.insert(joined.end(), o.begin(), o.end());
    }
    EXPECT_EQ(joined, single.offsets(step)) << "step " << step;
    // The same holds for the batches' rows.
    Batch whole = single.batch(step);
    Batch part = ranks[1].batch(step);
    for (int64_t i = 0; i < B; ++i) EXPECT_EQ(row(part.input, i), row(whole.input, B + i));
  }
  // Rank draws differ from each other (disjoint slices of one draw).
  EXPECT_NE(ranks[0].offsets(0), ranks[1].offsets(0));
}

TEST(WindowSampler, ResumedAtAStepContinuesTheSameStream) {
  TokenStream st = positions(10000);
  WindowSampler::Options o{.batch_size = 4, .block_size = 8, .seed = 21};
  WindowSampler run(st, o);
  std::vector<Batch> seen;
  for (int i = 0; i < 6; ++i) seen.push_back(run.next());
  EXPECT_EQ(run.step(), 6);
  WindowSampler resumed(st, o);
  resumed.set_step(3);
  for (int i = 3; i < 6; ++i) {
    Batch b = resumed.next();
    EXPECT_TRUE(equal(b.input, seen[static_cast<size_t>(i)].input)) << "step " << i;
    EXPECT_TRUE(equal(b.target, seen[static_cast<size_t>(i)].target)) << "step " << i;
  }
  EXPECT_EQ(resumed.step(), 6);
  EXPECT_THROW(resumed.set_step(-1), InvalidArgument);
}

TEST(WindowSampler, RejectsAShortStreamAndBadOptions) {
  expect_all(message_of<InvalidArgument>(
                 [] { WindowSampler s(positions(16), {.batch_size = 2, .block_size = 16}); }),
             {"WindowSampler", "'positions'", "16 tokens", "block_size + 1 = 17"});
  EXPECT_THROW(WindowSampler(positions(100), {.batch_size = 0}), InvalidArgument);
  EXPECT_THROW(WindowSampler(positions(100), {.block_size = 0}), InvalidArgument);
  expect_all(message_of<InvalidArgument>([] {
               WindowSampler s(positions(100), {.block_size = 8, .num_replicas = 2, .rank = 2});
             }),
             {"rank 2", "[0, 1]"});
  EXPECT_THROW(WindowSampler(TokenStream(), {.block_size = 8}), InvalidArgument);
}

TEST(WindowBatch, RejectsAnOffsetPastTheLastWindow) {
  TokenStream st = positions(20);
  std::vector<int64_t> ok{0, 11}, bad{12};
  EXPECT_EQ(window_batch(st, ok, 8).input.size(0), 2);
  expect_all(message_of<InvalidArgument>([&] { window_batch(st, bad, 8); }),
             {"offset 12", "[0, 11]"});
}

TEST(EvalWindows, CoversTheSplitOnceWithoutOverlapAcrossRanks) {
  // n = 1000, T = 16: windows at 0, 16, ..., 61 * 16 (the last ends at 992).
  TokenStream st = positions(1000);
  const int64_t R = 3, B = 4, T = 16;
  std::vector<int64_t> all;
  int64_t batches = -1;
  for (int64_t r = 0; r < R; ++r) {
    EvalWindows ev(st, {.batch_size = B, .block_size = T, .num_replicas = R, .rank = r});
    EXPECT_EQ(ev.num_windows(), 62);
    if (batches >= 0) {
      EXPECT_EQ(ev.num_batches(), batches);  // the same on every rank
    }
    batches = ev.num_batches();
    int64_t count = 0;
    for (const Batch& b : ev) {
      std::vector<int64_t> off = ev.offsets(count);
      EXPECT_EQ(b.size(), static_cast<int64_t>(off.size()));
      for (int64_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ(row(b.input, i).front(), off[static_cast<size_t>(i)]);
        EXPECT_EQ(row(b.target, i).back(), off[static_cast<size_t>(i)] + T);
      }
      all.insert(all.end(), off.begin(), off.end());
      ++count;
    }
    EXPECT_EQ(count, ev.num_batches());
  }
  EXPECT_EQ(batches, 6);  // ceil(62 / 12)
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 62u);
  for (size_t k = 0; k < all.size(); ++k) EXPECT_EQ(all[k], static_cast<int64_t>(k) * T);
}

TEST(EvalWindows, ShortAndEmptyLastBatches) {
  // 62 windows, R = 3, B = 4: the last global batch holds windows 60, 61, so
  // rank 0 gets 2 and ranks 1 and 2 get an empty batch [0, T].
  TokenStream st = positions(1000);
  EvalWindows r0(st, {.batch_size = 4, .block_size = 16, .num_replicas = 3, .rank = 0});
  EvalWindows r2(st, {.batch_size = 4, .block_size = 16, .num_replicas = 3, .rank = 2});
  EXPECT_EQ(r0.batch(5).size(), 2);
  Batch empty = r2.batch(5);
  EXPECT_EQ(empty.input.sizes(), (Shape{0, 16}));
  EXPECT_EQ(empty.target.sizes(), (Shape{0, 16}));
  EXPECT_THROW(r0.batch(6), InvalidArgument);
  EXPECT_THROW(r0.offsets(-1), InvalidArgument);
}

TEST(EvalWindows, MaxBatchesKeepsTheFirstGlobalBatches) {
  TokenStream st = positions(1000);
  EvalWindows all(st, {.batch_size = 4, .block_size = 16, .num_replicas = 2, .rank = 1});
  EvalWindows some(
      st, {.batch_size = 4, .block_size = 16, .num_replicas = 2, .rank = 1, .max_batches = 3});
  EXPECT_EQ(some.num_batches(), 3);
  EXPECT_EQ(some.num_windows(), 24);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(some.offsets(i), all.offsets(i));
  EXPECT_EQ(some.offsets(0), (std::vector<int64_t>{64, 80, 96, 112}));  // windows 4..7
  EvalWindows more(st, {.batch_size = 4, .block_size = 16, .max_batches = 100});
  EXPECT_EQ(more.num_windows(), 62);
  EXPECT_THROW(EvalWindows(st, {.max_batches = -1}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::data
