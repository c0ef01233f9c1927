#include "cohort/train/comm_hook_choice.h"

#include <fmt/format.h>

#include <charconv>

#include "cohort/base/error.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/comm_hooks/compression_hooks.h"
#include "cohort/parallel/comm_hooks/powersgd_hook.h"

namespace cohort::train {

CommHookChoice parse_comm_hook(std::string_view text) {
  const auto bad = [&] {
    return InvalidArgument(fmt::format(
        "--comm-hook must be allreduce, fp16, bf16, powersgd, powersgd:RANK, batched_powersgd or "
        "batched_powersgd:RANK (RANK >= 1), got '{}'",
        text));
  };
  if (text == "allreduce") return {.kind = CommHookKind::kAllreduce};
  if (text == "fp16") return {.kind = CommHookKind::kFp16};
  if (text == "bf16") return {.kind = CommHookKind::kBf16};
  constexpr std::string_view kPowerSGD = "powersgd", kBatched = "batched_";
  CommHookChoice c{.kind = CommHookKind::kPowerSGD};
  if (text.starts_with(kBatched)) {
    c.kind = CommHookKind::kBatchedPowerSGD;
    text.remove_prefix(kBatched.size());
  }
  if (!text.starts_with(kPowerSGD)) throw bad();
  std::string_view rest = text.substr(kPowerSGD.size());
  if (rest.empty()) return c;
  if (rest.front() != ':') throw bad();
  rest.remove_prefix(1);
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), c.rank);
  if (ec != std::errc() || end != rest.data() + rest.size() || c.rank < 1) throw bad();
  return c;
}

std::string comm_hook_name(const CommHookChoice& choice) {
  switch (choice.kind) {
    case CommHookKind::kAllreduce:
      return "allreduce";
    case CommHookKind::kFp16:
      return "fp16";
    case CommHookKind::kBf16:
      return "bf16";
    case CommHookKind::kPowerSGD:
      return fmt::format("powersgd:{}", choice.rank);
    case CommHookKind::kBatchedPowerSGD:
      return fmt::format("batched_powersgd:{}", choice.rank);
  }
  return "?";
}

bool is_powersgd(const CommHookChoice& choice) {
  return choice.kind == CommHookKind::kPowerSGD || choice.kind == CommHookKind::kBatchedPowerSGD;
}

void check_comm_hook(const CommHookChoice& choice) {
  if (!is_powersgd(choice)) return;
  COHORT_CHECK(choice.rank >= 1, "--comm-hook powersgd:RANK needs RANK >= 1, got {}", choice.rank);
  COHORT_CHECK(choice.start_iter > 1,
               "--powersgd-start-iter must be > 1 (PowerSGD's error feedback and warm start "
               "start after plain all_reduce steps, as PyTorch's), got {}",
               choice.start_iter);
}

parallel::CommHookPtr make_comm_hook(const CommHookChoice& choice) {
  check_comm_hook(choice);
  switch (choice.kind) {
    case CommHookKind::kAllreduce:
      return parallel::allreduce_hook();
    case CommHookKind::kFp16:
      return parallel::fp16_compress_hook();
    case CommHookKind::kBf16:
      return parallel::bf16_compress_hook();
    case CommHookKind::kPowerSGD:
      return parallel::powersgd_hook(
          {.matrix_approximation_rank = choice.rank, .start_powerSGD_iter = choice.start_iter});
    case CommHookKind::kBatchedPowerSGD:
      return parallel::batched_powersgd_hook(
          {.matrix_approximation_rank = choice.rank, .start_powerSGD_iter = choice.start_iter});
  }
  throw InvalidArgument("--comm-hook: unknown kind");
}

parallel::ShardedCommHookPtr make_zero_comm_hook(const CommHookChoice& choice) {
  switch (choice.kind) {
    case CommHookKind::kAllreduce:
      return parallel::zero_reduce_scatter_hook();
    case CommHookKind::kFp16:
      return parallel::zero_fp16_compress_hook();
    case CommHookKind::kBf16:
      return parallel::zero_bf16_compress_hook();
    case CommHookKind::kPowerSGD:
    case CommHookKind::kBatchedPowerSGD:
      break;
  }
  throw InvalidArgument(fmt::format(
      "--comm-hook {} applies to DDP: PowerSGD compresses a bucket as low-rank matrices, which "
      "ZeRO's reduce_scatter of segments cannot take (FSDP has no such hook either); with "
      "--strategy zero use allreduce, fp16 or bf16",
      comm_hook_name(choice)));
}

}  // namespace cohort::train
