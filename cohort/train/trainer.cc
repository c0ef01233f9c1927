#include "cohort/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/base/parallel.h"
#include "cohort/checkpoint/distributed_checkpoint.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/distributed_sampler.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/data_parallel.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/train/metrics_writer.h"
#include "cohort/train/workload.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Keys of TrainingState::extra.
constexpr const char* kLossSum = "epoch_loss_sum";
constexpr const char* kLossCount = "epoch_loss_count";
constexpr const char* kSamples = "epoch_samples";
constexpr const char* kSeconds = "epoch_seconds";
constexpr const char* kWorldSize = "world_size";
constexpr const char* kModel = "model";

// The running totals of the epoch in progress. Between reductions each rank
// holds its own share; after reduce() rank 0 holds the totals, the others 0.
struct EpochTotals {
  double loss_sum = 0;
  double loss_count = 0;  // steps x ranks
  double samples = 0;
  double seconds = 0;  // before the current stretch (from a checkpoint)

  void reduce(distributed::ProcessGroup* pg) {
    if (pg == nullptr || pg->size() == 1) return;
    double v[3] = {loss_sum, loss_count, samples};
    pg->all_reduce(v, 3, distributed::DataType::kFloat64).wait();
    bool main = pg->rank() == 0;
    loss_sum = main ? v[0] : 0;
    loss_count = main ? v[1] : 0;
    samples = main ? v[2] : 0;
  }
};

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

std::string rank_suffix(distributed::ProcessGroup* pg) {
  return pg != nullptr ? fmt::format(", rank {}", pg->rank()) : std::string();
}

}  // namespace

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  const bool has_master = std::getenv("MASTER_ADDR") != nullptr;
  if (under_mpirun && !has_master &&
      distributed::backend_available(distributed::BackendKind::kMpi)) {
    return "mpi";
  }
  return "native";
}

Strategy resolve_strategy(Strategy requested) {
  if (requested != Strategy::kAuto) return requested;
  return env_world_size() > 1 ? Strategy::kDdp : Strategy::kSingle;
}

Trainer::Trainer(TrainOptions options, std::shared_ptr<distributed::ProcessGroup> pg)
    : options_(std::move(options)), pg_(std::move(pg)) {
  options_.validate();
}

Trainer::~Trainer() = default;

TrainResult Trainer::run(TrainObserver* observer) {
  const TrainOptions& o = options_;
  TrainResult result;
  RunInfo& info = result.info;
  info.strategy = resolve_strategy(o.strategy);
  if (o.threads > 0) {
    set_default_num_threads(o.threads);
    set_num_threads(o.threads);
  }
  if (info.strategy == Strategy::kDdp && pg_ == nullptr) {
    pg_ = distributed::init_process_group(resolve_backend(o.backend), "env://");
  }
  distributed::ProcessGroup* pg = info.strategy == Strategy::kDdp ? pg_.get() : nullptr;
  info.rank = pg != nullptr ? pg->rank() : 0;
  info.world_size = pg != nullptr ? pg->size() : 1;
  const bool main = info.rank == 0;

  // Everything that can fail on bad input fails here, before the first step.
  if (!o.checkpoint_dir.empty()) {
    if (pg != nullptr) {
      checkpoint::check_writable_dir(*pg, o.checkpoint_dir);
    } else {
      checkpoint::check_writable_dir(o.checkpoint_dir);
    }
  }
  MetricsWriter metrics(o.metrics_path);
  if (main && !o.metrics_path.empty()) metrics.check_writable();
  Splits splits = make_splits(o);

  Generator gen(o.seed);
  nn::ModulePtr model = make_model(o.model, gen);
  std::vector<Tensor> params = model->parameters();
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(o, params);

  std::optional<checkpoint::TrainingState> resumed;
  if (!o.resume.empty()) {
    auto path = pg != nullptr ? checkpoint::resolve_resume(*pg, o.resume, o.checkpoint_dir)
                              : checkpoint::resolve_resume(o.resume, o.checkpoint_dir);
    if (path) {
      resumed = checkpoint::load_checkpoint(*path, *model, opt.get());
      if (!resumed->rng_state.empty()) gen.set_state(resumed->rng_state);
      auto it = resumed->extra.find(kModel);
      COHORT_CHECK(it == resumed->extra.end() || it->second == model_name(o.model),
                   "--resume {}: checkpoint is of model '{}', not '{}'", *path, it->second,
                   model_name(o.model));
      info.resumed_from = *path;
    }
  }

  // The model as the loop calls it; `model` stays the bare one (saved,
  // evaluated).
  std::shared_ptr<nn::Module> wrapper;
  if (info.strategy == Strategy::kDdp) {
    wrapper = std::make_shared<parallel::DistributedDataParallel>(model, pg_);
  } else if (info.strategy == Strategy::kDp) {
    wrapper = std::make_shared<parallel::DataParallel>(model, o.replicas);
    info.replicas = o.replicas;
  }
  nn::Module& net = wrapper ? *wrapper : *model;
  info.threads = info.strategy == Strategy::kDp
                     ? static_cast<parallel::DataParallel&>(net).replica_threads(0)
                     : num_threads();

  data::DistributedSampler::Options so;
  so.num_replicas = info.world_size;
  so.rank = info.rank;
  so.shuffle = true;
  so.seed = o.seed;
  auto sampler = std::make_shared<data::DistributedSampler>(splits.train->size(), so);
  data::DataLoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.prefetch = o.prefetch;
  data::DataLoader loader(splits.train, lo, sampler);

  info.train_examples = splits.train->size();
  info.test_examples = splits.test->size();
  info.steps_per_epoch = loader.num_batches();
  info.global_batch_size = o.batch_size * info.world_size;

  int64_t step = 0;
  int64_t start_epoch = 0;
  EpochTotals totals;
  if (resumed) {
    step = resumed->step;
    data::SamplerState s = resumed->sampler;
    int64_t saved_world =
        static_cast<int64_t>(parse_double(resumed->extra, kWorldSize, info.world_size));
    if (saved_world != info.world_size && saved_world > 0) {
      // Same share of the epoch, counted in this job's per-rank positions.
      s.position = std::min(sampler->size(), s.position * saved_world / info.world_size);
    }
    s.position = std::min(s.position, sampler->size());
    loader.load_state(s);
    start_epoch = s.epoch;
    totals.seconds = parse_double(resumed->extra, kSeconds, 0);
    if (main) {
      totals.loss_sum = parse_double(resumed->extra, kLossSum, 0);
      totals.loss_count = parse_double(resumed->extra, kLossCount, 0);
      totals.samples = parse_double(resumed->extra, kSamples, 0);
    }
  }
  info.start_step = step;
  info.start_epoch = start_epoch;
  if (main && observer != nullptr) observer->on_start(info);

  const double clip = clip_max_norm(o.model);
  const int64_t log_every =
      o.log_every > 0 ? o.log_every : std::max<int64_t>(1, info.steps_per_epoch / 10);

  // carry: the checkpoint is inside an epoch, whose running totals it keeps
  // (at an epoch's end the next epoch starts from zero).
  auto save = [&](const data::SamplerState& sampler_state, double epoch_seconds, bool carry) {
    totals.reduce(pg);
    EpochTotals saved = carry ? totals : EpochTotals{};
    checkpoint::TrainingState st;
    st.epoch = sampler_state.epoch;
    st.step = step;
    st.rng_state = gen.get_state();
    st.sampler = sampler_state;
    st.extra[kLossSum] = fmt::format("{:.17g}", saved.loss_sum);
    st.extra[kLossCount] = fmt::format("{:.17g}", saved.loss_count);
    st.extra[kSamples] = fmt::format("{:.17g}", saved.samples);
    st.extra[kSeconds] = fmt::format("{:.17g}", carry ? epoch_seconds : 0.0);
    st.extra[kWorldSize] = std::to_string(info.world_size);
    st.extra[kModel] = std::string(model_name(o.model));
    checkpoint::SaveOptions so2;
    so2.keep_last = o.keep_last;
    // With a group: rank 0 writes, every rank learns the outcome (a barrier).
    result.last_checkpoint =
        pg != nullptr
            ? checkpoint::save_checkpoint(*pg, o.checkpoint_dir, *model, opt.get(), st, so2)
            : checkpoint::save_checkpoint(o.checkpoint_dir, *model, opt.get(), st, so2);
    if (main && observer != nullptr) observer->on_checkpoint(result.last_checkpoint, step);
  };

  for (int64_t epoch = start_epoch; epoch < o.epochs; ++epoch) {
    if (o.max_steps > 0 && step >= o.max_steps) break;
    loader.set_epoch(epoch);
    int64_t step_in_epoch = (sampler->position() + o.batch_size - 1) / o.batch_size;
    if (sampler->epoch() != epoch) step_in_epoch = 0;
    const auto t0 = Clock::now();
    double local_samples_run = 0;  // this stretch, this rank
    bool stopped = false;
    for (data::Batch& b : loader) {
      opt->zero_grad();
      Tensor out = net.forward(b.input);
      Tensor loss = compute_loss(o.model, out, b.target);
      const double l = loss.item<double>();
      if (!std::isfinite(l)) {
        throw Error(fmt::format(
            "cohort train: loss is {} at step {} (epoch {}, step {} of the epoch{}); training "
            "diverged -- try a lower --lr",
            l, step + 1, epoch + 1, step_in_epoch + 1, rank_suffix(pg)));
      }
      loss.backward();
      if (clip > 0) optim::clip_grad_norm(params, clip);
      opt->step();
      ++step;
      ++step_in_epoch;
      totals.loss_sum += l;
      totals.loss_count += 1;
      totals.samples += static_cast<double>(b.size());
      local_samples_run += static_cast<double>(b.size());

      const bool last =
          step_in_epoch == info.steps_per_epoch || (o.max_steps > 0 && step >= o.max_steps);
      if (main && observer != nullptr && (step_in_epoch % log_every == 0 || last)) {
        StepInfo si;
        si.epoch = epoch;
        si.step = step;
        si.step_in_epoch = step_in_epoch;
        si.steps_in_epoch = info.steps_per_epoch;
        si.loss = l;
        si.last = last;
        si.elapsed_seconds = seconds_since(t0);
        si.samples_per_second =
            si.elapsed_seconds > 0 ? local_samples_run * info.world_size / si.elapsed_seconds : 0;
        double per_step = si.elapsed_seconds /
                          static_cast<double>(std::max<double>(1.0, local_samples_run)) *
                          static_cast<double>(o.batch_size);
        si.eta_seconds = per_step * static_cast<double>(
                                        std::max<int64_t>(0, info.steps_per_epoch - step_in_epoch));
        observer->on_step(si);
      }
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && !last) {
        save(loader.state(), totals.seconds + seconds_since(t0), true);
      }
      if (o.max_steps > 0 && step >= o.max_steps) {
        stopped = true;
        break;
      }
    }
    const double seconds = totals.seconds + seconds_since(t0);
    const data::SamplerState position = loader.state();
    const bool complete = !stopped || position.position >= sampler->size();
    // Saved before the totals are reduced and cleared (save reduces them).
    if (!o.checkpoint_dir.empty()) {
      save(complete ? data::SamplerState{epoch + 1, 0} : position, seconds, !complete);
    } else {
      totals.reduce(pg);
    }
    Evaluation ev = evaluate(*model, o.model, *splits.test, pg);
    EpochStats es;
    es.epoch = epoch + 1;
    es.steps = step_in_epoch;
    es.samples = static_cast<int64_t>(totals.samples);
    es.train_loss = totals.loss_count > 0 ? totals.loss_sum / totals.loss_count : std::nan("");
    es.test_loss = ev.loss;
    es.test_accuracy = ev.accuracy;
    es.seconds = seconds;
    es.samples_per_second = seconds > 0 ? totals.samples / seconds : 0;
    es.complete = complete;
    if (main) {
      if (observer != nullptr) observer->on_epoch_end(es);
      if (!o.metrics_path.empty()) {
        nlohmann::json rec;
        rec["epoch"] = es.epoch;
        rec["train_loss"] = json_number(es.train_loss);
        rec["test_accuracy"] = json_number(es.test_accuracy);
        rec["seconds"] = json_number(es.seconds);
        rec["samples_per_second"] = json_number(es.samples_per_second);
        rec["test_loss"] = json_number(es.test_loss);
        rec["step"] = step;
        rec["complete"] = es.complete;
        metrics.append(rec);
      }
    }
    result.epochs.push_back(es);
    totals = EpochTotals{};
  }
  result.steps = step;
  return result;
}

}  // namespace cohort::train
