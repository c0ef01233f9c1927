#include "cohort/core/caching_allocator.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"
#include "cohort/core/fake_device_testing.h"

namespace cohort {
namespace {

const Stream kMain{Device(DeviceType::kCUDA, 0), nullptr, 0};
const Stream kSide{Device(DeviceType::kCUDA, 0), nullptr, 1};

TEST(CachingAllocator, SizeClassesBoundTheWaste) {
  EXPECT_EQ(CachingAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(size_t{1} << 20), size_t{1} << 20);
  for (size_t n : {size_t{1} << 20, size_t{3} << 20, size_t{5000001}, size_t{123456789}}) {
    size_t c = CachingAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n + n / 8 + 1) << n;
  }
}

TEST(CachingAllocator, ASteadyStepReusesBlocksWithoutDeviceCalls) {
  testing::FakeDeviceMemory mem;
  CachingAllocator a("cuda:0", mem);
  for (int step = 0; step < 5; ++step) {
    void* x = a.allocate(4000, kMain);
    void* y = a.allocate(size_t{3} << 20, kMain);
    a.deallocate(x);
    a.deallocate(y);
  }
  DeviceMemoryStats s = a.stats();
  EXPECT_EQ(s.device_allocs, 2u);
  EXPECT_EQ(s.cache_hits, 8u);
  EXPECT_EQ(s.allocated, 0u);
  EXPECT_EQ(s.reserved, 4096u + (size_t{3} << 20));
  EXPECT_EQ(s.peak_allocated, s.reserved);
  EXPECT_EQ(a.cached_bytes(), s.reserved);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(mem.frees, 2);
}

TEST(CachingAllocator, BlocksStayWithTheirStream) {
  testing::FakeDeviceMemory mem;
  CachingAllocator a("cuda:0", mem);
  void* x = a.allocate(1000, kMain);
  a.deallocate(x);
  void* y = a.allocate(1000, kSide);
  EXPECT_NE(x, y);
  EXPECT_EQ(a.allocate(1000, kMain), x);
  a.deallocate(y);
  a.deallocate(x);
}

TEST(CachingAllocator, RecordStreamHoldsTheBlockUntilThatStreamsWorkIsDone) {
  testing::FakeDeviceMemory mem;
  mem.complete_events = false;
  CachingAllocator a("cuda:0", mem);
  void* x = a.allocate(1000, kMain);
  a.record_stream(x, kSide);
  a.deallocate(x);
  void* y = a.allocate(1000, kMain);
  EXPECT_NE(x, y) << "reused while the side stream may still read it";
  mem.complete_all();
  a.deallocate(y);
  void* z = a.allocate(1000, kMain);
  void* w = a.allocate(1000, kMain);
  EXPECT_TRUE((z == x && w == y) || (z == y && w == x));
  a.deallocate(z);
  a.deallocate(w);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheOnceThenNamesTheNumbers) {
  testing::FakeDeviceMemory mem;
  mem.fail_above = size_t{6} << 20;
  CachingAllocator a("cuda:0", mem);
  void* x = a.allocate(size_t{4} << 20, kMain);
  a.deallocate(x);                               // cached
  void* y = a.allocate(size_t{5} << 20, kMain);  // fits only after the cache is emptied
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(a.stats().oom_retries, 1u);
  try {
    a.allocate(size_t{2} << 20, kMain);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:0: out of memory allocating 2.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("5.0 MiB allocated"), std::string::npos) << m;
    EXPECT_NE(m.find("fake device full"), std::string::npos) << m;
  }
  a.deallocate(y);
}

TEST(CachingAllocator, FreeingWhatItDoesNotHoldIsAnError) {
  testing::FakeDeviceMemory mem;
  CachingAllocator a("cuda:0", mem);
  void* x = a.allocate(10, kMain);
  a.deallocate(x);
  EXPECT_THROW(a.deallocate(x), InvalidArgument);
  int local = 0;
  EXPECT_THROW(a.deallocate(&local), InvalidArgument);
}

TEST(CachingAllocator, PeakResetsToWhatIsInUse) {
  testing::FakeDeviceMemory mem;
  CachingAllocator a("cuda:0", mem);
  void* x = a.allocate(size_t{2} << 20, kMain);
  void* y = a.allocate(size_t{2} << 20, kMain);
  a.deallocate(y);
  EXPECT_EQ(a.stats().peak_allocated, size_t{4} << 20);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_allocated, size_t{2} << 20);
  a.deallocate(x);
}

}  // namespace
}  // namespace cohort
