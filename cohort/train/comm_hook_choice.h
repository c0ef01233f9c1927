// --comm-hook: which communication hook (parallel/comm_hooks/) a training
// run registers, as data: "allreduce", "fp16", "bf16", "powersgd",
// "powersgd:RANK", "batched_powersgd" or "batched_powersgd:RANK" (PyTorch's
// allreduce_hook, fp16_compress_hook, bf16_compress_hook, powerSGD_hook and
// batched_powerSGD_hook with matrix_approximation_rank RANK).
// make_comm_hook builds the hook for one DDP; make_zero_comm_hook the
// sharded form for ZeRO (FSDP's hooks: allreduce is its reduce_scatter,
// fp16 and bf16 compress it; PowerSGD has no sharded form and is refused).
// Parsing throws InvalidArgument naming the accepted forms. No state; any
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/parallel/comm_hooks/comm_hook.h"
#include "cohort/parallel/comm_hooks/sharded_comm_hook.h"

namespace cohort::train {

enum class CommHookKind { kAllreduce, kFp16, kBf16, kPowerSGD, kBatchedPowerSGD };

struct CommHookChoice {
  CommHookKind kind = CommHookKind::kAllreduce;
  int64_t rank = 1;  // PowerSGD's matrix_approximation_rank
  // PowerSGD's start_powerSGD_iter (--powersgd-start-iter; PyTorch's default).
  int64_t start_iter = 1'000;
};

CommHookChoice parse_comm_hook(std::string_view text);
// "allreduce", "fp16", "bf16", "powersgd:2", "batched_powersgd:2".
std::string comm_hook_name(const CommHookChoice& choice);
// Throws InvalidArgument for a rank < 1 or a start_iter <= 1 (PowerSGD's
// error feedback and warm start, on in cohort train, need two plain steps).
void check_comm_hook(const CommHookChoice& choice);
parallel::CommHookPtr make_comm_hook(const CommHookChoice& choice);
// Throws InvalidArgument for the PowerSGD kinds, naming the others.
parallel::ShardedCommHookPtr make_zero_comm_hook(const CommHookChoice& choice);
bool is_powersgd(const CommHookChoice& choice);

}  // namespace cohort::train
