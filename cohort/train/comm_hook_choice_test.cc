#include "cohort/train/comm_hook_choice.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"
#include "cohort/train/train_options.h"

namespace cohort::train {
namespace {

TEST(CommHookChoice, ParsesEveryFormAndNamesIt) {
  EXPECT_EQ(parse_comm_hook("allreduce").kind, CommHookKind::kAllreduce);
  EXPECT_EQ(parse_comm_hook("fp16").kind, CommHookKind::kFp16);
  EXPECT_EQ(parse_comm_hook("bf16").kind, CommHookKind::kBf16);
  EXPECT_EQ(parse_comm_hook("powersgd").rank, 1);
  const CommHookChoice c = parse_comm_hook("powersgd:4");
  EXPECT_EQ(c.kind, CommHookKind::kPowerSGD);
  EXPECT_EQ(c.rank, 4);
  EXPECT_EQ(comm_hook_name(c), "powersgd:4");
  for (const char* bad : {"", "powersgd:", "powersgd:0", "powersgd:2x", "powersgd2", "topk"})
    EXPECT_THROW(parse_comm_hook(bad), InvalidArgument) << bad;
  EXPECT_EQ(make_comm_hook(c)->name(), "powersgd:4");
  EXPECT_EQ(make_comm_hook(parse_comm_hook("fp16"))->name(), "fp16_compress");
}

TEST(CommHookChoice, OptionsRefuseWhatConflicts) {
  TrainOptions o;
  o.strategy = Strategy::kDdp;
  o.comm_hook = parse_comm_hook("powersgd:2");
  o.comm_hook->start_iter = 10;
  EXPECT_NO_THROW(o.validate());
  o.grad_reduce = ComputePrecision::kBFloat16;
  EXPECT_THROW(o.validate(), InvalidArgument);
  o.comm_hook = parse_comm_hook("bf16");  // the same hook as --grad-reduce bf16
  EXPECT_NO_THROW(o.validate());
  o.grad_reduce = ComputePrecision::kFloat32;
  o.strategy = Strategy::kZero;
  EXPECT_THROW(o.validate(), InvalidArgument);
  o.strategy = Strategy::kDdp;
  o.comm_hook = parse_comm_hook("powersgd");
  o.comm_hook->start_iter = 1;
  EXPECT_THROW(o.validate(), InvalidArgument);
}

}  // namespace
}  // namespace cohort::train
