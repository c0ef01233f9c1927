#include "cohort/core/storage.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cohort/base/error.h"

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
  if (std::getenv("COHORT_STORAGE_CACHE")) GTEST_SKIP() << "cache configured by environment";
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

TEST(Storage, LiveBytesCountsStoragesAliveNow) {
  const size_t before = Storage::live_bytes();
  {
    Storage small(1000), large(Storage::kCacheMinBytes * 2);
    EXPECT_EQ(Storage::live_bytes() - before, 1000 + Storage::kCacheMinBytes * 2);
  }
  EXPECT_EQ(Storage::live_bytes(), before);  // cached blocks are not live
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
