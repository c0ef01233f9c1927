#include "cohort/base/error.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace cohort {

TEST(Error, CheckThrowsInvalidArgumentWithMessage) {
  int got = 3;
  try {
    COHORT_CHECK(got == 4, "expected 4 things, got {}", got);
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "expected 4 things, got 3");
  }
}

TEST(Error, AssertThrowsErrorNamingLocation) {
  try {
    COHORT_ASSERT(1 + 1 == 3, "math");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("error_test.cc"), std::string::npos);
  }
}

TEST(Error, ThrowErrnoAppendsStrerror) {
  EXPECT_THROW(throw_errno("open /nope", ENOENT), IoError);
  EXPECT_EQ(errno_message("open", ENOENT), "open: No such file or directory");
}

TEST(Error, PeerLostIsAnIoError) { EXPECT_THROW(throw PeerLost("rank 1 died"), IoError); }

}  // namespace cohort
