#include "cohort/core/storage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/runtime.h"
#include "cohort/core/live_bytes_peak.h"

namespace cohort {
namespace {

TEST(Storage, AlignedAndWritable) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{1} << 20}) {
    Storage s(n);
    EXPECT_EQ(s.nbytes(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data()) % Storage::kAlignment, 0u);
    if (n) std::memset(s.data(), 1, n);
  }
}

TEST(Storage, LargeBlocksAreRecycled) {
  RuntimeOptions on;  // the default: cache on (the edge may have turned it off)
  RuntimeOptionsGuard guard(on);
  Storage::release_cache();
  void* first;
  {
    Storage s(3 << 20);
    first = s.data();
  }
  EXPECT_GE(Storage::cached_bytes(), size_t{3} << 20);
  Storage again(3 << 20);
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(Storage::cached_bytes(), 0u);
  Storage::release_cache();
}

TEST(Storage, CacheLimitIsKeptAndCounted) {
  RuntimeOptions o;
  o.storage_cache_bytes = size_t{5} << 20;  // room for one 3 MiB block, not two
  RuntimeOptionsGuard guard(o);
  Storage::release_cache();
  const CacheStats before = Runtime::process().stats().storage_blocks;
  { Storage a(3 << 20), b(3 << 20); }
  EXPECT_EQ(Storage::cached_bytes(), size_t{3} << 20);
  {
    Storage again(3 << 20);  // a hit
    EXPECT_EQ(Storage::cached_bytes(), 0u);
  }
  const CacheStats after = Runtime::process().stats().storage_blocks;
  EXPECT_EQ(after.limit, size_t{5} << 20);
  EXPECT_EQ(after.bytes, size_t{3} << 20);
  EXPECT_EQ(after.misses - before.misses, 2u);
  EXPECT_EQ(after.hits - before.hits, 1u);
  EXPECT_EQ(after.dropped - before.dropped, 1u);  // the second of a and b
  EXPECT_GE(after.peak_bytes, size_t{3} << 20);

  // Off (COHORT_STORAGE_CACHE=0 at the edge): what is held goes at once, and
  // nothing more is kept.
  o.storage_cache_bytes = 0;
  Runtime::process().configure(o);
  EXPECT_EQ(Storage::cached_bytes(), 0u);
  { Storage c(3 << 20); }
  EXPECT_EQ(Storage::cached_bytes(), 0u);
}

TEST(Storage, LiveBytesCountsStoragesAliveNow) {
  const size_t before = Storage::live_bytes();
  {
    Storage small(1000), large(Storage::kCacheMinBytes * 2);
    EXPECT_EQ(Storage::live_bytes() - before, 1000 + Storage::kCacheMinBytes * 2);
  }
  EXPECT_EQ(Storage::live_bytes(), before);  // cached blocks are not live
}

TEST(Storage, PeakLiveBytesKeepsTheHighestCountSinceTheReset) {
  reset_peak_live_bytes();
  const size_t before = Storage::live_bytes();
  EXPECT_EQ(peak_live_bytes(), before);
  { Storage a(4096), b(8192); }
  { Storage c(1000); }
  EXPECT_EQ(peak_live_bytes(), before + 4096 + 8192);
  reset_peak_live_bytes();
  EXPECT_EQ(peak_live_bytes(), before);
}

TEST(Storage, RebindMovesABorrowedStorageAndTheDeleterGetsTheOriginal) {
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  void* deleted = nullptr;
  {
    auto s = std::make_shared<Storage>(a.data(), a.size() * sizeof(float),
                                       [&](void* p) { deleted = p; });
    s->rebind(b.data());
    EXPECT_EQ(s->data(), b.data());
    EXPECT_EQ(static_cast<float*>(s->data())[3], 2.0f);
  }
  EXPECT_EQ(deleted, a.data());
  Storage owned(16);
  EXPECT_THROW(owned.rebind(b.data()), Error);
}

}  // namespace
}  // namespace cohort
