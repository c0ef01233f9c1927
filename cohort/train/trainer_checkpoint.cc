#include "cohort/train/trainer_checkpoint.h"

#include <algorithm>
#include <memory>

#include "cohort/base/error.h"
#include "cohort/checkpoint/distributed_checkpoint.h"
#include "cohort/checkpoint/sharded_checkpoint.h"
#include "cohort/train/workload.h"

namespace cohort::train {
namespace {

// Keys of TrainingState::extra.
constexpr const char* kLossSum = "epoch_loss_sum";
constexpr const char* kLossCount = "epoch_loss_count";
constexpr const char* kSamples = "epoch_samples";
constexpr const char* kSeconds = "epoch_seconds";
constexpr const char* kWorldSize = "world_size";
constexpr const char* kBatchSize = "batch_size";  // per rank
constexpr const char* kModel = "model";
constexpr const char* kDataset = "dataset";

double parse_double(const checkpoint::Metadata& m, const char* key, double fallback) {
  auto it = m.find(key);
  if (it == m.end()) return fallback;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    throw IoError(
        fmt::format("checkpoint: training state key '{}' is not a number: '{}'", key, it->second));
  }
}

}  // namespace

void EpochTotals::reduce(distributed::ProcessGroup* pg) {
  if (pg == nullptr || pg->size() == 1) return;
  double v[3] = {loss_sum, loss_count, samples};
  pg->all_reduce(v, 3, distributed::DataType::kFloat64);
  bool main = pg->rank() == 0;
  loss_sum = main ? v[0] : 0;
  loss_count = main ? v[1] : 0;
  samples = main ? v[2] : 0;
}

std::string save_run_checkpoint(const TrainOptions& o, Strategy resolved, TrainStrategy& strategy,
                                distributed::ProcessGroup* pg, const Generator& gen,
                                const LoopPosition& position,
                                checkpoint::AsyncCheckpointWriter* async) {
  // Sharded: every rank writes its own pieces, nothing is gathered.
  const bool sharded =
      o.checkpoint_format == "sharded" && pg != nullptr && strategy.writes_sharded_checkpoints();
  if (!sharded) strategy.sync_full_model(true);
  const EpochTotals& saved = position.totals;
  checkpoint::TrainingState st;
  st.epoch = position.sampler.epoch;
  st.step = position.step;
  st.rng_state = gen.get_state();
  st.sampler = position.sampler;
  st.extra[kLossSum] = fmt::format("{:.17g}", saved.loss_sum);
  st.extra[kLossCount] = fmt::format("{:.17g}", saved.loss_count);
  st.extra[kSamples] = fmt::format("{:.17g}", saved.samples);
  st.extra[kSeconds] = fmt::format("{:.17g}", saved.seconds);
  // The sampler's replicas: what a resumed run rescales its position by.
  st.extra[kWorldSize] = std::to_string(strategy.data_replicas());
  st.extra[kBatchSize] = std::to_string(o.batch_size);
  st.extra[kModel] = std::string(model_name(o.model));
  // What the model was trained on: `cohort predict` names classes by it.
  st.extra[kDataset] = std::string(dataset_name(o.dataset));
  // A language model's shape: what `cohort eval` / `generate` rebuild it from.
  if (o.is_language_model()) {
    write_gpt_config(gpt_config(o), st.extra);
    st.extra["data_file"] = o.data_file;
    st.extra["val_fraction"] = fmt::format("{:.17g}", o.val_fraction);
  }
  checkpoint::SaveOptions so;
  so.keep_last = o.keep_last;
  if (sharded) {
    const checkpoint::Metadata info{
        {"cohort.sharded.strategy", std::string(strategy_name(resolved))}};
    if (async != nullptr)
      return async->save_sharded(*pg, o.checkpoint_dir, strategy.checkpoint_pieces(), st, info, so);
    return checkpoint::save_sharded_checkpoint(*pg, o.checkpoint_dir, strategy.checkpoint_pieces(),
                                               st, info, so);
  }
  // With a group: rank 0 writes, every rank learns the outcome (a barrier).
  nn::Module& model = strategy.full_model();
  optim::Optimizer* opt = &strategy.full_optimizer();
  if (async != nullptr)
    return pg != nullptr ? async->save(*pg, o.checkpoint_dir, model, opt, st, so)
                         : async->save(o.checkpoint_dir, model, opt, st, so);
  return pg != nullptr ? checkpoint::save_checkpoint(*pg, o.checkpoint_dir, model, opt, st, so)
                       : checkpoint::save_checkpoint(o.checkpoint_dir, model, opt, st, so);
}

std::optional<ResumedRun> resume_run(const TrainOptions& o, TrainStrategy& strategy,
                                     distributed::ProcessGroup* pg, Generator& gen,
                                     int64_t sampler_size) {
  if (o.resume.empty()) return std::nullopt;
  auto path = pg != nullptr ? checkpoint::resolve_resume(*pg, o.resume, o.checkpoint_dir)
                            : checkpoint::resolve_resume(o.resume, o.checkpoint_dir);
  if (!path) return std::nullopt;
  // A sharded checkpoint goes straight to a strategy that reads its own
  // ranges; anything else loads whole into full_model() (any strategy).
  checkpoint::TrainingState resumed;
  std::unique_ptr<checkpoint::CheckpointSource> source;
  if (checkpoint::is_sharded_checkpoint(*path)) source = checkpoint::open_checkpoint(*path);
  if (source != nullptr && strategy.load_checkpoint_part(*source)) {
    resumed = source->state();
  } else {
    resumed = checkpoint::load_checkpoint(*path, strategy.full_model(), &strategy.full_optimizer());
    strategy.after_resume();
  }
  if (!resumed.rng_state.empty()) gen.set_state(resumed.rng_state);
  auto it = resumed.extra.find(kModel);
  COHORT_CHECK(it == resumed.extra.end() || it->second == model_name(o.model),
               "--resume {}: checkpoint is of model '{}', not '{}'", *path, it->second,
               model_name(o.model));

  ResumedRun r{.path = *path, .position = {.step = resumed.step, .sampler = resumed.sampler}};
  data::SamplerState& s = r.position.sampler;
  const int64_t replicas = strategy.data_replicas();
  int64_t saved_world = static_cast<int64_t>(parse_double(resumed.extra, kWorldSize, replicas));
  if (saved_world != replicas && saved_world > 0 && !o.is_language_model()) {
    // Same share of the epoch, counted in this job's per-replica positions.
    s.position = std::min(sampler_size, s.position * saved_world / replicas);
  }
  const auto saved_batch =
      static_cast<int64_t>(parse_double(resumed.extra, kBatchSize, double(o.batch_size)));
  if (o.is_language_model() && saved_batch > 0 && saved_batch != o.batch_size) {
    // A language model's position is steps x B per rank (the window
    // sampler's global step): the same steps in this job's B, so a run of
    // R x B resumed as R' x B' with R B = R' B' draws the same windows.
    s.position = s.position / saved_batch * o.batch_size;
  }
  s.position = std::min(s.position, sampler_size);
  EpochTotals& t = r.position.totals;
  t.seconds = parse_double(resumed.extra, kSeconds, 0);
  t.loss_sum = parse_double(resumed.extra, kLossSum, 0);
  t.loss_count = parse_double(resumed.extra, kLossCount, 0);
  t.samples = parse_double(resumed.extra, kSamples, 0);
  return r;
}

}  // namespace cohort::train
