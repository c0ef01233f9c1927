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
  const CommHookChoice b = parse_comm_hook("batched_powersgd:3");
  EXPECT_EQ(b.kind, CommHookKind::kBatchedPowerSGD);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(comm_hook_name(b), "batched_powersgd:3");
  EXPECT_EQ(parse_comm_hook("batched_powersgd").rank, 1);
  for (const char* bad : {"batched_", "batched_powersgd:0", "batched_fp16"})
    EXPECT_THROW(parse_comm_hook(bad), InvalidArgument) << bad;
}

TEST(CommHookChoice, ZeroTakesTheShardedFormsAndRefusesPowerSGD) {
  EXPECT_EQ(make_zero_comm_hook(parse_comm_hook("allreduce"))->name(), "reduce_scatter");
  EXPECT_EQ(make_zero_comm_hook(parse_comm_hook("fp16"))->name(), "fp16_compress");
  EXPECT_EQ(make_zero_comm_hook(parse_comm_hook("bf16"))->name(), "bf16_compress");
  for (const char* p : {"powersgd:2", "batched_powersgd"})
    EXPECT_THROW(make_zero_comm_hook(parse_comm_hook(p)), InvalidArgument) << p;
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
  EXPECT_NO_THROW(o.validate());
  o.zero_shard_size = 2;  // HSDP: as FSDP's hybrid strategies, no hook
  EXPECT_THROW(o.validate(), InvalidArgument);
  o.zero_shard_size = 0;
  o.comm_hook = parse_comm_hook("powersgd:2");
  o.comm_hook->start_iter = 10;
  EXPECT_THROW(o.validate(), InvalidArgument);
  o.strategy = Strategy::kPipeline;
  o.comm_hook = parse_comm_hook("fp16");
  EXPECT_THROW(o.validate(), InvalidArgument);
  o.strategy = Strategy::kDdp;
  o.comm_hook = parse_comm_hook("powersgd");
  o.comm_hook->start_iter = 1;
  EXPECT_THROW(o.validate(), InvalidArgument);
}

}  // namespace
}  // namespace cohort::train
