#include "cohort/base/runtime.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"

namespace cohort {
namespace {

TEST(BlockCache, KeepsBlocksUpToItsLimitAndCounts) {
  BlockCache cache(8192);
  void* a = cache.allocate(4096);
  void* b = cache.allocate(4096);
  void* c = cache.allocate(4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kCacheAlignment, 0u);
  cache.deallocate(a, 4096);
  cache.deallocate(b, 4096);
  cache.deallocate(c, 4096);  // over the limit: freed
  EXPECT_EQ(cache.held_bytes(), 8192u);
  void* again = cache.allocate(4096);
  EXPECT_TRUE(again == a || again == b);
  void* other = cache.allocate(8192);  // no block of that size
  CacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.dropped, 1u);
  EXPECT_EQ(s.bytes, 4096u);
  EXPECT_EQ(s.peak_bytes, 8192u);
  EXPECT_EQ(s.limit, 8192u);
  cache.deallocate(again, 4096);
  cache.deallocate(other, 8192);  // 4096 + 8192 > 8192: freed
  cache.set_limit(4096);          // trims to the new limit
  EXPECT_LE(cache.held_bytes(), 4096u);
  cache.release();
  EXPECT_EQ(cache.held_bytes(), 0u);
}

TEST(ScratchPool, ReusesSetsAndFreesWhatTheLimitCannotHold) {
  ScratchPool pool(1 << 20);
  auto s1 = pool.acquire();
  auto s2 = pool.acquire();
  s1->buffers[0].reserve(600 << 10);
  s2->buffers[1].reserve(600 << 10);
  EXPECT_GE(s1->bytes(), size_t{600} << 10);
  void* kept = s1->buffers[0].data();
  pool.give_back(std::move(s1));
  pool.give_back(std::move(s2));  // 1.2 MiB > 1 MiB: freed
  CacheStats st = pool.stats();
  EXPECT_EQ(st.dropped, 1u);
  EXPECT_EQ(st.bytes, size_t{600} << 10);
  auto s3 = pool.acquire();  // the kept one, warm
  EXPECT_EQ(s3->buffers[0].data(), kept);
  EXPECT_EQ(pool.stats().hits, 1u);
  EXPECT_EQ(pool.stats().misses, 2u);
  EXPECT_EQ(pool.stats().bytes, 0u);
}

TEST(AlignedBuffer, GrowsZeroedAndAligned) {
  AlignedBuffer b;
  auto* p = static_cast<unsigned char*>(b.reserve(100));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kCacheAlignment, 0u);
  EXPECT_GE(b.capacity(), 100u);
  for (size_t i = 0; i < 100; ++i) EXPECT_EQ(p[i], 0);
  EXPECT_EQ(b.reserve(50), p);  // no shrink, no move
  AlignedBuffer moved(std::move(b));
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(b.capacity(), 0u);
}

TEST(ThreadBuffer, IsKeptUnderTheLimitAndFreedAfterAUseOverIt) {
  RuntimeOptions o = Runtime::process().options();
  o.thread_buffer_bytes = 1 << 20;
  RuntimeOptionsGuard guard(o);
  std::thread([] {
    Runtime& rt = Runtime::process();
    const CacheStats before = rt.stats().thread_buffers;
    ThreadBuffer buf;
    {
      ThreadBufferUse<float> use(buf, 1000);
      use[999] = 1.0f;
    }
    EXPECT_GE(buf.capacity(), 4000u);  // kept for the next use
    EXPECT_GE(rt.stats().thread_buffers.bytes, before.bytes + 4000);
    float* small = buf.get<float>(10);  // no growth: same memory
    buf.done();
    EXPECT_GE(buf.capacity(), 4000u);
    (void)small;
    {
      ThreadBufferUse<float> big(buf, (2 << 20) / sizeof(float));  // 2 MiB > 1 MiB
      big[0] = 1.0f;
    }
    EXPECT_EQ(buf.capacity(), 0u);  // freed after the use
    const CacheStats after = rt.stats().thread_buffers;
    EXPECT_EQ(after.misses - before.misses, 2u);
    EXPECT_EQ(after.dropped - before.dropped, 1u);
    EXPECT_EQ(after.limit, size_t{1} << 20);
    EXPECT_EQ(after.bytes, before.bytes);
  }).join();
}

TEST(Runtime, ConfigureAppliesLimitsAndTheDefaultBudget) {
  Runtime& rt = Runtime::process();
  const RuntimeOptions saved = rt.options();
  {
    RuntimeOptions o;
    o.storage_cache_bytes = 1 << 20;
    o.kernel_scratch_bytes = 2 << 20;
    o.thread_buffer_bytes = 3 << 20;
    o.num_threads = 3;
    RuntimeOptionsGuard guard(o);
    const RuntimeOptions now = rt.options();
    EXPECT_EQ(now.storage_cache_bytes, size_t{1} << 20);
    EXPECT_EQ(now.kernel_scratch_bytes, size_t{2} << 20);
    EXPECT_EQ(now.thread_buffer_bytes, size_t{3} << 20);
    EXPECT_EQ(now.num_threads, 3);
    EXPECT_EQ(rt.stats().thread_pool.default_threads, 3);
    EXPECT_EQ(num_threads(), 3);  // this thread set none of its own
  }
  EXPECT_EQ(rt.options().num_threads, saved.num_threads);
  EXPECT_EQ(rt.options().storage_cache_bytes, saved.storage_cache_bytes);
  RuntimeOptions bad;
  bad.num_threads = -1;
  EXPECT_THROW(rt.configure(bad), InvalidArgument);
}

TEST(Runtime, ThreadPoolStatsCountWorkersAndTasks) {
  ThreadBudgetGuard budget(2);
  const ThreadPoolStats before = Runtime::process().stats().thread_pool;
  parallel_for(0, 2, 1, [](int64_t, int64_t) {});
  const ThreadPoolStats after = Runtime::process().stats().thread_pool;
  EXPECT_GE(after.workers, 1);
  EXPECT_EQ(after.tasks - before.tasks, 1u);  // the caller runs the other chunk
}

// What a later layer (a device allocator) plugs in.
class FakeDevicePool final : public RuntimeResource {
 public:
  std::string name() const override { return "fake-device"; }
  CacheStats stats() const override {
    CacheStats s;
    s.bytes = held;
    s.limit = 1 << 20;
    return s;
  }
  void release_cached() noexcept override { held = 0; }
  size_t held = 4096;
};

TEST(Runtime, AttachedResourcesAreCountedAndReleased) {
  auto pool = std::make_shared<FakeDevicePool>();
  Runtime::process().attach(pool);
  bool found = false;
  for (const auto& [name, s] : Runtime::process().stats().resources) {
    if (name == "fake-device") {
      found = true;
      EXPECT_EQ(s.bytes, 4096u);
    }
  }
  EXPECT_TRUE(found);
  Runtime::process().release_caches();
  EXPECT_EQ(pool->held, 0u);
  EXPECT_EQ(Runtime::process().stats().storage_blocks.bytes, 0u);
  EXPECT_THROW(Runtime::process().attach(nullptr), InvalidArgument);
}

}  // namespace
}  // namespace cohort
