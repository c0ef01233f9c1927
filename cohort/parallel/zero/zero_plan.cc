// The unit policies, the ZeRO formulas, choose_zero_stage and the HSDP
// groups (sharded_data_parallel.h).
#include <algorithm>
#include <cmath>

#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel {

UnitPolicy child_unit_policy() {
  return [](const std::string& path, const nn::Module&) {
    return path.find('.') == std::string::npos;
  };
}

UnitPolicy module_type_policy(std::vector<std::string> types) {
  return [types = std::move(types)](const std::string&, const nn::Module& m) {
    return std::find(types.begin(), types.end(), m.type_name()) != types.end();
  };
}

UnitPolicy no_unit_policy() {
  return [](const std::string&, const nn::Module&) { return false; };
}

double zero_model_state_bytes(int stage, int64_t psi, int world) {
  const double p = static_cast<double>(psi), n = world;
  switch (stage) {
    case 0:
      return 16 * p;
    case 1:
      return 8 * p + 8 * p / n;
    case 2:
      return 4 * p + 12 * p / n;
    case 3:
      return 16 * p / n;
  }
  throw InvalidArgument(
      fmt::format("zero_model_state_bytes: stage must be 0 (DDP) to 3, got {}", stage));
}

double zero_traffic_bytes(int stage, int64_t psi) {
  COHORT_CHECK(stage >= 0 && stage <= 3, "zero_traffic_bytes: stage must be 0 (DDP) to 3, got {}",
               stage);
  return (stage == 3 ? 3.0 : 2.0) * 4.0 * static_cast<double>(psi);
}

double hybrid_traffic_bytes(int stage, int64_t psi, int shard_size, int replicas) {
  COHORT_CHECK(shard_size >= 1 && replicas >= 1,
               "hybrid_traffic_bytes: needs shard_size >= 1 and replicas >= 1, got {} and {}",
               shard_size, replicas);
  const double replicate = replicas > 1 ? 2.0 * 4.0 * static_cast<double>(psi) / shard_size : 0;
  return zero_traffic_bytes(stage, psi) + replicate;
}

HybridShardGroups make_hybrid_shard_groups(const std::shared_ptr<distributed::ProcessGroup>& pg,
                                           int shard_size) {
  COHORT_CHECK(pg != nullptr, "make_hybrid_shard_groups: the process group is null");
  const int n = pg->size();
  COHORT_CHECK(
      shard_size >= 1 && n % shard_size == 0,
      "ShardedDataParallel (rank {}): hybrid_shard_size {} does not divide the group of {} "
      "ranks (0: shard over the whole group)",
      pg->rank(), shard_size, n);
  if (shard_size == n) return {pg, nullptr};
  const int replicas = n / shard_size, r = pg->rank();
  HybridShardGroups out;
  // Every rank creates every group in the same order (new_group's contract).
  for (int g = 0; g < replicas; ++g) {
    std::vector<int> ranks;
    for (int i = 0; i < shard_size; ++i) ranks.push_back(g * shard_size + i);
    auto group = pg->new_group(ranks, {.name = pg->name() + "/shard" + std::to_string(g)});
    if (g == r / shard_size) out.shard = std::move(group);
  }
  for (int i = 0; i < shard_size; ++i) {
    std::vector<int> ranks;
    for (int g = 0; g < replicas; ++g) ranks.push_back(g * shard_size + i);
    auto group = pg->new_group(ranks, {.name = pg->name() + "/replicate" + std::to_string(i)});
    if (i == r % shard_size) out.replicate = std::move(group);
  }
  return out;
}

int choose_zero_stage(int64_t psi, int world, double bytes_per_rank, std::string* why) {
  COHORT_CHECK(psi > 0 && world >= 1 && bytes_per_rank > 0,
               "choose_zero_stage: needs parameters > 0, world >= 1 and a budget > 0, got {}, {}, "
               "{}",
               psi, world, bytes_per_rank);
  // Stages 1 and 2 move 2 psi per step, stage 3 3 psi: the first that fits.
  for (int stage = 1; stage <= 3; ++stage) {
    const double need = zero_model_state_bytes(stage, psi, world);
    if (need <= bytes_per_rank) {
      if (why != nullptr) {
        *why = fmt::format(
            "ZeRO stage {}: its model state, {:.1f} MB per rank for {} parameters over {} "
            "ranks, fits in {:.1f} MB{}",
            stage, need / 1e6, psi, world, bytes_per_rank / 1e6,
            stage == 1 ? " (the least traffic and memory work)"
                       : fmt::format("; stage {} would need {:.1f} MB", stage - 1,
                                     zero_model_state_bytes(stage - 1, psi, world) / 1e6));
      }
      return stage;
    }
  }
  const double per_param = 16.0 * static_cast<double>(psi);
  const auto smallest = static_cast<int64_t>(std::ceil(per_param / bytes_per_rank));
  throw InvalidArgument(fmt::format(
      "ZeRO: {:.1f} MB per rank is too small for {} parameters over {} ranks: even stage 3 keeps "
      "16 bytes per parameter / N = {:.1f} MB per rank (plus gathered units and activations); "
      "it would fit from {} ranks on",
      bytes_per_rank / 1e6, psi, world, zero_model_state_bytes(3, psi, world) / 1e6, smallest));
}

}  // namespace cohort::parallel
