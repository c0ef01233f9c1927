#include "cohort/transport/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace cohort::transport {
namespace {

// A process that made a segment and ended without unlinking its name (a rank
// killed during bootstrap): whoever outlives it removes the name, and only
// that process's names.
TEST(ShmSegment, RemoveSegmentsOfTakesOnlyThatCreatorsNames) {
  ShmSegment mine = ShmSegment::create(0, 2, 4096);
  ASSERT_EQ(mine.name().rfind("/cohort-" + std::to_string(::getpid()) + "-", 0), 0u) << mine.name();
  const std::string path = "/dev/shm" + mine.name();
  ASSERT_TRUE(std::filesystem::exists(path));
  // Another creator (a pid above any pid_max, so no live process's names
  // are touched): ours stay.
  EXPECT_EQ(remove_segments_of(pid_t{1} << 23), 0);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(remove_segments_of(::getpid()), 1);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(remove_segments_of(::getpid()), 0);
}

}  // namespace
}  // namespace cohort::transport
