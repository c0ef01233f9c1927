// The per-shape plan caches of gemm.cc and conv2d.cc on the CPU: the cache
// class (hits, misses, least-recently-used eviction, bounded, a failed build
// not stored, concurrent lookups) and the keys, which must tell apart
// everything the descriptors and the algorithm choice depend on and nothing
// else.
#include "cohort/cuda/plan_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cohort/cuda/conv2d_plan.h"
#include "cohort/cuda/gemm.h"

namespace cohort::cuda {
namespace {

struct IntKey {
  int64_t v;
  bool operator==(const IntKey&) const = default;
};
using IntCache = PlanCache<IntKey, int, Int64FieldsHash<IntKey>>;

TEST(PlanCache, RepeatedLookupsHitAndBuildOnce) {
  IntCache cache(4);
  int builds = 0;
  auto make = [&] {
    ++builds;
    return std::make_shared<int>(42);
  };
  std::shared_ptr<int> first = cache.get({1}, make);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(cache.get({1}, make), first);
  EXPECT_EQ(builds, 1);
  PlanCacheStats s = cache.stats();
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.hits, 5);
  EXPECT_EQ(s.size, 1u);
  cache.get({2}, make);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(builds, 2);
}

TEST(PlanCache, BoundedLeastRecentlyUsedGoesFirst) {
  IntCache cache(2);
  auto make = [] { return std::make_shared<int>(0); };
  std::shared_ptr<int> one = cache.get({1}, make);
  cache.get({2}, make);
  cache.get({1}, make);  // 1 is now the most recent
  cache.get({3}, make);  // evicts 2
  PlanCacheStats s = cache.stats();
  EXPECT_EQ(s.size, 2u);
  EXPECT_EQ(s.evictions, 1);
  const int64_t misses = s.misses;
  EXPECT_EQ(cache.get({1}, make), one);
  EXPECT_EQ(cache.stats().misses, misses);  // 1 stayed
  cache.get({2}, make);
  EXPECT_EQ(cache.stats().misses, misses + 1);  // 2 was gone
  for (int64_t k = 10; k < 100; ++k) cache.get({k}, make);
  EXPECT_EQ(cache.stats().size, 2u);
  EXPECT_EQ(*one, 0);  // an evicted plan lives on while a caller holds it
}

TEST(PlanCache, FailedBuildIsNotStored) {
  IntCache cache(4);
  EXPECT_THROW(cache.get({7}, []() -> std::shared_ptr<int> { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(cache.stats().size, 0u);
  int builds = 0;
  cache.get({7}, [&] {
    ++builds;
    return std::make_shared<int>(1);
  });
  EXPECT_EQ(builds, 1);
}

TEST(PlanCache, ConcurrentLookupsAgree) {
  IntCache cache(16);
  std::atomic<int> builds{0}, wrong{0};
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<int>> zero(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto p = cache.get({i % 4}, [&] {
          builds.fetch_add(1);
          return std::make_shared<int>(i % 4);
        });
        if (*p != i % 4) wrong.fetch_add(1);
        if (i == 0) zero[t] = p;
      }
    });
  for (std::thread& th : threads) th.join();
  PlanCacheStats s = cache.stats();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(s.hits + s.misses, 8 * 200);
  EXPECT_EQ(s.size, 4u);
  EXPECT_LE(builds.load(), 8 * 4);  // a race may build twice; one is kept
  for (int t = 1; t < 8; ++t) EXPECT_EQ(zero[t], zero[0]);
}

// A product with fake, 256-byte aligned addresses (keys read only their
// alignment).
GemmCall base_call() {
  GemmCall c;
  c.ab = DType::kFloat32;
  c.c = DType::kFloat32;
  c.m = 64;
  c.n = 96;
  c.k = 128;
  c.a.data = reinterpret_cast<const void*>(uintptr_t{0x10000});
  c.a.ld = 128;
  c.b.data = reinterpret_cast<const void*>(uintptr_t{0x20000});
  c.b.ld = 96;
  c.c_data = reinterpret_cast<void*>(uintptr_t{0x30000});
  c.ldc = 96;
  return c;
}

TEST(GemmPlanKey, DistinguishesWhatTheHeuristicDependsOn) {
  const Device d0(DeviceType::kCUDA, 0);
  const GemmKey base = gemm_key(d0, base_call(), false);
  EXPECT_EQ(gemm_key(d0, base_call(), false), base);
  EXPECT_EQ(Int64FieldsHash<GemmKey>{}(gemm_key(d0, base_call(), false)),
            Int64FieldsHash<GemmKey>{}(base));
  const std::vector<std::pair<const char*, std::function<void(GemmCall&)>>> changes = {
      {"m", [](GemmCall& c) { c.m = 65; }},
      {"n", [](GemmCall& c) { c.n = 95; }},
      {"k", [](GemmCall& c) { c.k = 127; }},
      {"batch", [](GemmCall& c) { c.batch = 2; }},
      {"trans a", [](GemmCall& c) { c.a.trans = true; }},
      {"trans b", [](GemmCall& c) { c.b.trans = true; }},
      {"lda", [](GemmCall& c) { c.a.ld = 136; }},
      {"ldb", [](GemmCall& c) { c.b.ld = 104; }},
      {"ldc", [](GemmCall& c) { c.ldc = 104; }},
      {"dtype", [](GemmCall& c) { c.ab = DType::kBFloat16; }},
      {"c dtype", [](GemmCall& c) { c.c = DType::kFloat64; }},
      {"epilogue", [](GemmCall& c) { c.epilogue = GemmEpilogue::kBias; }},
      {"a alignment", [](GemmCall& c) { c.a.data = static_cast<const char*>(c.a.data) + 4; }},
      {"b alignment", [](GemmCall& c) { c.b.data = static_cast<const char*>(c.b.data) + 8; }},
      {"c alignment", [](GemmCall& c) { c.c_data = static_cast<char*>(c.c_data) + 16; }},
      {"bias alignment",
       [](GemmCall& c) { c.bias = reinterpret_cast<const void*>(uintptr_t{0x40004}); }},
  };
  for (const auto& [what, change] : changes) {
    GemmCall c = base_call();
    change(c);
    EXPECT_FALSE(gemm_key(d0, c, false) == base) << what;
  }
  EXPECT_FALSE(gemm_key(Device(DeviceType::kCUDA, 1), base_call(), false) == base) << "device";
  EXPECT_FALSE(gemm_key(d0, base_call(), true) == base) << "tf32 for float32";
  // TF32 does not change a bf16 or float64 product's plan.
  GemmCall bf = base_call();
  bf.ab = DType::kBFloat16;
  EXPECT_EQ(gemm_key(d0, bf, true), gemm_key(d0, bf, false));
  // Batch strides matter for a batch, not for one product; nor does the
  // address beyond its alignment.
  GemmCall batched = base_call();
  batched.batch = 3;
  batched.a.batch_stride = 64 * 128;
  GemmCall other_stride = batched;
  other_stride.a.batch_stride = 0;
  EXPECT_FALSE(gemm_key(d0, other_stride, false) == gemm_key(d0, batched, false));
  GemmCall single = base_call();
  single.c_batch_stride = 12345;
  single.a.data = reinterpret_cast<const void*>(uintptr_t{0x90000});
  EXPECT_EQ(gemm_key(d0, single, false), base);
}

TEST(ConvPlanKey, DistinguishesShapeDirectionAndSettings) {
  const kernels::Conv2dGeometry g{2, 3, 12, 12, 8, 5, 5, 1, 1, 0, 0};
  const Device d0(DeviceType::kCUDA, 0);
  const ConvDirection fwd = ConvDirection::kForward;
  const ConvKey base = conv_key(g, DType::kFloat32, d0, false, fwd, 16);
  EXPECT_EQ(conv_key(g, DType::kFloat32, d0, false, fwd, 16), base);
  const std::vector<std::pair<const char*, std::function<void(kernels::Conv2dGeometry&)>>> changes =
      {
          {"batch", [](kernels::Conv2dGeometry& x) { x.batch = 3; }},
          {"in channels", [](kernels::Conv2dGeometry& x) { x.in_channels = 4; }},
          {"in h", [](kernels::Conv2dGeometry& x) { x.in_h = 13; }},
          {"in w", [](kernels::Conv2dGeometry& x) { x.in_w = 13; }},
          {"out channels", [](kernels::Conv2dGeometry& x) { x.out_channels = 9; }},
          {"kernel h", [](kernels::Conv2dGeometry& x) { x.kernel_h = 3; }},
          {"kernel w", [](kernels::Conv2dGeometry& x) { x.kernel_w = 3; }},
          {"stride h", [](kernels::Conv2dGeometry& x) { x.stride_h = 2; }},
          {"stride w", [](kernels::Conv2dGeometry& x) { x.stride_w = 2; }},
          {"pad h", [](kernels::Conv2dGeometry& x) { x.pad_h = 1; }},
          {"pad w", [](kernels::Conv2dGeometry& x) { x.pad_w = 1; }},
      };
  for (const auto& [what, change] : changes) {
    kernels::Conv2dGeometry h = g;
    change(h);
    EXPECT_FALSE(conv_key(h, DType::kFloat32, d0, false, fwd, 16) == base) << what;
  }
  EXPECT_FALSE(conv_key(g, DType::kFloat64, d0, false, fwd, 16) == base) << "dtype";
  EXPECT_FALSE(conv_key(g, DType::kFloat32, Device(DeviceType::kCUDA, 1), false, fwd, 16) == base)
      << "device";
  EXPECT_FALSE(conv_key(g, DType::kFloat32, d0, true, fwd, 16) == base) << "tf32";
  EXPECT_FALSE(conv_key(g, DType::kFloat32, d0, false, fwd, 4) == base) << "alignment";
  for (ConvDirection other :
       {ConvDirection::kBackwardData, ConvDirection::kBackwardFilter, ConvDirection::kBackwardBias})
    EXPECT_FALSE(conv_key(g, DType::kFloat32, d0, false, other, 16) == base) << "direction";
  // Alignments past 16 bytes are one plan.
  EXPECT_EQ(conv_key(g, DType::kFloat32, d0, false, fwd, 256), base);
}

}  // namespace
}  // namespace cohort::cuda
