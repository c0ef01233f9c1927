#include "cohort/launch/line_prefixer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cohort::launch {
namespace {

TEST(LinePrefixer, PrefixesWholeLinesAcrossChunks) {
  std::vector<std::string> writes;
  LinePrefixer p("[rank 2] ", [&](std::string_view s) { writes.emplace_back(s); });
  p.feed("hel");
  EXPECT_TRUE(writes.empty());  // no newline yet: held
  p.feed("lo\nwor");
  p.feed("ld\n\nlast");
  p.finish();
  std::string all;
  for (auto& w : writes) all += w;
  EXPECT_EQ(all, "[rank 2] hello\n[rank 2] world\n[rank 2] \n[rank 2] last\n");
  for (auto& w : writes) EXPECT_EQ(w.back(), '\n');  // never a partial line
}

TEST(LinePrefixer, VeryLongLineIsCut) {
  std::string out;
  LinePrefixer p("> ", [&](std::string_view s) { out += s; });
  p.feed(std::string(LinePrefixer::kMaxHeld + 10, 'x'));
  EXPECT_EQ(out.size(), LinePrefixer::kMaxHeld + 10 + 3);
  p.finish();
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace cohort::launch
