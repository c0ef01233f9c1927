#include "cohort/core/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "cohort/base/parallel.h"

namespace cohort {
namespace {

TEST(Random, PhiloxKnownAnswer) {
  // Random123's known-answer test for philox4x32-10 with zero counter and key.
  auto r = philox4x32(0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Random, SeedReproducesAndStateRoundTrips) {
  Generator g(42);
  Tensor a = rand({100}, g);
  std::vector<uint8_t> st = g.get_state();
  Tensor b = randn({100}, g);
  Generator h(42);
  EXPECT_TRUE(equal(rand({100}, h), a));
  h.set_state(st);
  EXPECT_TRUE(equal(randn({100}, h), b));
  EXPECT_FALSE(equal(rand({100}, g), a));
  EXPECT_THROW(h.set_state({1, 2, 3}), InvalidArgument);
  Generator copy = g;
  EXPECT_EQ(copy.get_state(), g.get_state());
}

TEST(Random, IndependentOfThreadCount) {
  Tensor one, four;
  {
    ThreadBudgetGuard t(1);
    Generator g(7);
    one = randn({100001}, g);
  }
  {
    ThreadBudgetGuard t(4);
    Generator g(7);
    four = randn({100001}, g);
  }
  EXPECT_TRUE(equal(one, four));
}

TEST(Random, UniformMoments) {
  Generator g(1);
  Tensor t = Tensor::empty({200000}, kFloat64);
  uniform_(t, -1, 3, g);
  auto v = t.to_vector<double>();
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  EXPECT_NEAR(mean, 1.0, 0.02);
  for (double x : v) ASSERT_TRUE(x >= -1 && x < 3);
  Tensor f = rand({200000}, g);
  auto vf = f.to_vector<float>();
  for (float x : vf) ASSERT_TRUE(x >= 0 && x < 1);
}

TEST(Random, NormalMoments) {
  Generator g(2);
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor t = Tensor::empty({200001}, dt);
    normal_(t, 2.0, 3.0, g);
    auto v = t.to_vector<double>();
    double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= v.size();
    EXPECT_NEAR(mean, 2.0, 0.03);
    EXPECT_NEAR(std::sqrt(var), 3.0, 0.03);
  }
}

TEST(Random, NonContiguousFill) {
  Generator g(3);
  Tensor t = Tensor::zeros({4, 6});
  Tensor v = t.transpose(0, 1);
  uniform_(v, 5, 6, g);
  for (float x : t.to_vector<float>()) ASSERT_TRUE(x >= 5 && x < 6);
}

TEST(Random, BernoulliAndRandint) {
  Generator g(4);
  Tensor b = bernoulli({100000}, 0.3, g);
  auto v = b.to_vector<double>();
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  EXPECT_NEAR(mean, 0.3, 0.01);
  Tensor p = Tensor::from_vector<float>({0, 1, 0, 1});
  EXPECT_EQ(bernoulli(p, g).to_vector<float>(), (std::vector<float>{0, 1, 0, 1}));
  Tensor r = randint(-2, 3, {10000}, g);
  std::vector<int> counts(5, 0);
  for (int64_t x : r.to_vector<int64_t>()) {
    ASSERT_TRUE(x >= -2 && x < 3);
    ++counts[x + 2];
  }
  for (int c : counts) EXPECT_GT(c, 1800);
}

TEST(Random, RandpermIsAPermutation) {
  Generator g(5);
  auto p = randperm(1000, g).to_vector<int64_t>();
  std::vector<int64_t> s = p;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(s[i], i);
  EXPECT_NE(p, s);  // not the identity
  Generator g2(5);
  EXPECT_EQ(randperm(1000, g2).to_vector<int64_t>(), p);
  EXPECT_EQ(randperm(0, g).numel(), 0);
}

TEST(GeneratorReplay, ReplaysRecordedDrawsWithoutMovingTheGenerator) {
  Generator a(9), b(10);
  (void)rand({3}, a);  // state before the recording: not at the start
  std::vector<GeneratorSnapshot> snaps;
  std::vector<float> first_a, first_b;
  {
    GeneratorRecording rec;
    first_a = rand({5}, a).to_vector<float>();
    first_b = randn({4}, b).to_vector<float>();
    (void)rand({2}, a);  // a second draw from a: still one snapshot
    snaps = rec.snapshots();
  }
  ASSERT_EQ(snaps.size(), 2u);
  EXPECT_EQ(snaps[0].generator, &a);
  EXPECT_EQ(snaps[1].generator, &b);
  const std::vector<uint8_t> a_after = a.get_state(), b_after = b.get_state();
  const std::vector<float> next_a = [&] {
    Generator copy = a;
    return rand({5}, copy).to_vector<float>();
  }();
  {
    GeneratorReplay replay(snaps);
    EXPECT_EQ(rand({5}, a).to_vector<float>(), first_a);
    EXPECT_EQ(randn({4}, b).to_vector<float>(), first_b);
    Generator other(9);  // not recorded: draws from its own state
    EXPECT_EQ(other.get_state(), Generator(9).get_state());
    (void)rand({1}, other);
    EXPECT_NE(other.get_state(), Generator(9).get_state());
  }
  EXPECT_EQ(a.get_state(), a_after);
  EXPECT_EQ(b.get_state(), b_after);
  EXPECT_EQ(rand({5}, a).to_vector<float>(), next_a);
}

TEST(GeneratorReplay, RecordingUnderReplayNotesTheReplayedState) {
  Generator g(4);
  std::vector<GeneratorSnapshot> outer;
  std::vector<float> drawn;
  {
    GeneratorRecording rec;
    drawn = rand({3}, g).to_vector<float>();
    outer = rec.snapshots();
  }
  std::vector<GeneratorSnapshot> inner;
  {
    GeneratorReplay replay(outer);
    GeneratorRecording rec;
    EXPECT_EQ(rand({3}, g).to_vector<float>(), drawn);
    inner = rec.snapshots();
  }
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_EQ(inner[0].seed, outer[0].seed);
  EXPECT_EQ(inner[0].offset, outer[0].offset);
  GeneratorReplay again(inner);
  EXPECT_EQ(rand({3}, g).to_vector<float>(), drawn);
}

}  // namespace
}  // namespace cohort
