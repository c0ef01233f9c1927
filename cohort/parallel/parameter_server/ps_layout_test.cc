#include "cohort/parallel/parameter_server/ps_layout.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"

namespace cohort::parallel {
namespace {

TEST(PsLayout, FirstRanksServeTheOthersTrain) {
  PsLayout l = first_ranks_serve({"w0", "w1", "w2", "w3"}, 1);
  EXPECT_EQ(l.servers, std::vector<std::string>{"w0"});
  EXPECT_EQ(l.trainers, (std::vector<std::string>{"w1", "w2", "w3"}));
  EXPECT_EQ(l.server_index("w0"), 0);
  EXPECT_EQ(l.trainer_index("w0"), -1);
  EXPECT_EQ(l.trainer_index("w3"), 2);
  EXPECT_THROW(first_ranks_serve({"w0", "w1"}, 2), InvalidArgument);
  EXPECT_THROW(first_ranks_serve({"w0", "w1"}, 0), InvalidArgument);
  PsLayout c = colocated_layout({"a", "b"});
  EXPECT_EQ(c.server_index("b"), 1);
  EXPECT_EQ(c.trainer_index("b"), 1);
  EXPECT_GT(ps_handler_threads(8), 8);
}

}  // namespace
}  // namespace cohort::parallel
