#include "cohort/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/base/parallel.h"
#include "cohort/checkpoint/distributed_checkpoint.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/distributed_sampler.h"
#include "cohort/data/window_dataset.h"
#include "cohort/distributed/backend_choice.h"
#include "cohort/parallel/join.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/train/fault_tolerant_run.h"
#include "cohort/train/metrics_writer.h"
#include "cohort/train/run_trace.h"
#include "cohort/train/train_strategy.h"
#include "cohort/train/trainer_checkpoint.h"
#include "cohort/train/workload.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string rank_suffix(distributed::ProcessGroup* pg) {
  return pg != nullptr ? fmt::format(", rank {}", pg->rank()) : std::string();
}

}  // namespace

std::string resolve_backend(const std::string& requested, bool mpirun_without_master) {
  if (requested != "auto") return requested;
  if (mpirun_without_master && distributed::backend_available(distributed::BackendKind::kMpi)) {
    return "mpi";
  }
  return "auto";
}

bool is_distributed(Strategy strategy) {
  return strategy == Strategy::kDdp || strategy == Strategy::kPipeline ||
         strategy == Strategy::kTensor || strategy == Strategy::kPs || strategy == Strategy::kZero;
}

Strategy resolve_strategy(Strategy requested) {
  if (requested != Strategy::kAuto) return requested;
  return rendezvous::env_world_size().value_or(1) > 1 ? Strategy::kDdp : Strategy::kSingle;
}

Trainer::Trainer(TrainOptions options, std::shared_ptr<distributed::ProcessGroup> pg)
    : options_(std::move(options)), pg_(std::move(pg)) {
  options_.validate();
}

Trainer::~Trainer() = default;

namespace {

// One run of the loop: the pieces Trainer::run strings together (set-up,
// resume, the epochs, evaluation), sharing the run's state.
class Run {
 public:
  Run(const TrainOptions& o, std::shared_ptr<distributed::ProcessGroup>& pg_slot,
      TrainObserver* observer, TrainResult& result)
      : o_(o), observer_(observer), result_(result), info_(result.info), gen_(o.seed) {
    set_up(pg_slot);
  }

  void resume();
  void train();
  // Collective: the run's trace, merged on rank 0 (cohort/train/run_trace.h).
  void write_trace();
  // After a failure: this rank's own events to FILE.rank<R>.json; never throws.
  void write_trace_part() noexcept;

 private:
  void set_up(std::shared_ptr<distributed::ProcessGroup>& pg_slot);
  // One epoch, or its rest after a resume; ends it with the evaluation.
  void run_epoch(int64_t epoch);
  // --bf16-weights: rounds the parameters to bf16 (optim/bf16_weights.h).
  void round_weights();
  void save(const data::SamplerState& sampler_state, double epoch_seconds, bool carry);
  // --checkpoint-async: waits for the background checkpoint in flight on
  // every rank (collective) and reports it once it is committed.
  void confirm_checkpoint();
  void end_epoch(int64_t epoch, int64_t step_in_epoch, double seconds, bool complete);
  bool is_main() const { return strategy_->is_main_rank(); }
  void write_step_metrics(int64_t epoch, double loss, Clock::time_point t0);
  void report_step(int64_t epoch, int64_t step_in_epoch, double l, bool last, Clock::time_point t0,
                   double local_samples_run);

  // The run's options: the Trainer's, with the device resolved to this
  // worker's in a job (set_up).
  TrainOptions o_;
  const PrecisionPolicy precision_ = o_.precision_policy();  // each training step's
  TrainObserver* observer_;
  TrainResult& result_;
  RunInfo& info_;
  // The group of the ranks that run the loop (the world, or the trainers of
  // a parameter-server job): totals, evaluation and checkpoints go over it.
  distributed::ProcessGroup* pg_ = nullptr;
  std::shared_ptr<distributed::ProcessGroup> world_;
  Generator gen_;
  Splits splits_;
  std::unique_ptr<TrainStrategy> strategy_;
  std::shared_ptr<data::Sampler> sampler_;
  std::unique_ptr<data::DataLoader> loader_;
  MetricsWriter metrics_{""};
  int64_t step_ = 0;
  int64_t start_epoch_ = 0;
  int64_t log_every_ = 1;
  EpochTotals totals_;
  std::unique_ptr<Tracer> tracer_;  // --trace
  // --checkpoint-async: the writer and the step of its checkpoint in flight.
  // Last, so that a run ended by an error waits for its write (bounded)
  // before anything else goes.
  std::unique_ptr<checkpoint::AsyncCheckpointWriter> async_writer_;
  int64_t async_step_ = -1;
};

void Run::set_up(std::shared_ptr<distributed::ProcessGroup>& pg_slot) {
  info_.strategy = resolve_strategy(o_.strategy);
  if (!o_.device.is_cpu() && !runs_on_gpus(info_.strategy)) {
    throw NotSupported(fmt::format(
        "--device {}: {} workers with --strategy {} on GPUs are not implemented yet (on GPUs: "
        "single, ddp, zero): train on the CPU, or pick one of those",
        o_.device.str(), rendezvous::env_world_size().value_or(1), strategy_name(info_.strategy)));
  }
  if (is_distributed(info_.strategy) && pg_slot == nullptr) {
    const std::string backend =
        resolve_backend(o_.backend, rendezvous::env_mpirun_without_master());
    distributed::WorkerGroup w = distributed::init_worker_group(backend, o_.device, "env://");
    pg_slot = w.group;
    // Every part below (model, batches, evaluation) trains on the worker's device.
    o_.device = w.device;
    info_.backend = distributed::backend_name(w.backend.kind);
    info_.backend_reason =
        backend == o_.backend
            ? w.backend.reason
            : fmt::format(
                  "auto: mpirun without MASTER_ADDR{}",
                  o_.device.is_cpu() ? "" : "; mpi stages CUDA tensors through host memory");
  } else if (is_distributed(info_.strategy)) {
    info_.backend = distributed::backend_name(pg_slot->backend());
    info_.backend_reason = "the group given";
  }
  info_.device = o_.device;
  if (is_distributed(info_.strategy)) world_ = pg_slot;
  pg_ = world_.get();
  info_.rank = pg_ != nullptr ? pg_->rank() : 0;
  info_.world_size = pg_ != nullptr ? pg_->size() : 1;

  // Everything that can fail on bad input fails here, before the first step.
  if (!o_.checkpoint_dir.empty()) {
    if (pg_ != nullptr) {
      checkpoint::check_writable_dir(*pg_, o_.checkpoint_dir);
    } else {
      checkpoint::check_writable_dir(o_.checkpoint_dir);
    }
  }
  if (!o_.checkpoint_dir.empty() && o_.checkpoint_async)
    async_writer_ = std::make_unique<checkpoint::AsyncCheckpointWriter>();
  metrics_ = MetricsWriter(o_.metrics_path);
  splits_ = make_splits(o_);

  if (!o_.trace_path.empty()) {
    const auto dir = std::filesystem::absolute(o_.trace_path).parent_path();
    if (!std::filesystem::is_directory(dir)) {
      throw InvalidArgument(
          fmt::format("--trace {}: directory {} does not exist", o_.trace_path, dir.string()));
    }
    tracer_ = std::make_unique<Tracer>(info_.rank, fmt::format("rank {}", info_.rank));
  }
  strategy_ = make_strategy(o_, info_.strategy, world_, gen_, tracer_.get());
  if (!strategy_->runs_loop()) return;  // a server: train() serves
  pg_ = strategy_->loop_group();
  if (is_main() && !o_.metrics_path.empty()) metrics_.check_writable();
  info_.threads = strategy_->threads();
  info_.replicas = strategy_->replicas();
  info_.layout = strategy_->layout();

  if (splits_.train_tokens) {
    // A language model: nanoGPT's random windows, rank r's slice of each
    // step's global draw (data/window_dataset.h).
    data::WindowSampler::Options wo;
    wo.batch_size = o_.batch_size;
    wo.block_size = gpt_config(o_).block_size;
    wo.seed = o_.seed;
    wo.num_replicas = strategy_->data_replicas();
    wo.rank = strategy_->data_rank();
    const int64_t steps =
        o_.steps_per_epoch > 0
            ? o_.steps_per_epoch
            : data::default_steps_per_epoch(splits_.train_tokens->size(), wo.num_replicas,
                                            wo.batch_size, wo.block_size);
    sampler_ = std::make_shared<data::RandomWindowSampler>(*splits_.train_tokens, wo, steps);
  } else {
    data::DistributedSampler::Options so;
    so.num_replicas = strategy_->data_replicas();
    so.rank = strategy_->data_rank();
    so.shuffle = true;
    so.seed = o_.seed;
    so.drop_last = o_.drop_last.value_or(false);
    so.pad = !o_.drop_last.has_value();
    sampler_ = std::make_shared<data::DistributedSampler>(splits_.train->size(), so);
  }
  data::DataLoaderOptions lo;
  lo.batch_size = o_.batch_size;
  lo.drop_last = o_.drop_last.value_or(false);
  lo.prefetch = o_.prefetch;
  // On a GPU, batches cross on the loader's thread and side stream while the
  // step computes: prefetch at least two.
  lo.device = o_.device;
  if (!o_.device.is_cpu()) lo.prefetch = std::max<int64_t>(lo.prefetch, 2);
  loader_ = std::make_unique<data::DataLoader>(splits_.train, lo, sampler_);

  info_.train_examples =
      splits_.train_tokens ? splits_.train_tokens->size() : splits_.train->size();
  info_.test_examples = splits_.test->size();
  info_.data_description = splits_.description;
  info_.tokens_per_example = splits_.train_tokens ? gpt_config(o_).block_size : 0;
  info_.steps_per_epoch = loader_->num_batches();
  info_.global_batch_size = o_.batch_size * strategy_->data_replicas();
}

void Run::resume() {
  if (!strategy_->runs_loop()) return;
  if (std::optional<ResumedRun> r = resume_run(o_, *strategy_, pg_, gen_, sampler_->size())) {
    info_.resumed_from = r->path;
    step_ = r->position.step;
    loader_->load_state(r->position.sampler);
    start_epoch_ = r->position.sampler.epoch;
    // The epoch's totals so far live on the main rank (EpochTotals::reduce).
    totals_ = is_main() ? r->position.totals : EpochTotals{.seconds = r->position.totals.seconds};
  }
  info_.start_step = step_;
  info_.start_epoch = start_epoch_;
}

// carry: the checkpoint is inside an epoch, whose running totals it keeps
// (at an epoch's end the next epoch starts from zero).
void Run::save(const data::SamplerState& sampler_state, double epoch_seconds, bool carry) {
  TraceSpan span(tracer_.get(), "main", "checkpoint", "io");
  totals_.reduce(pg_);
  // A rank that runs the loop on its own (pg_ null) but does not report
  // leaves the checkpoint to the one that does.
  if (pg_ == nullptr && !is_main()) return;
  LoopPosition position{.step = step_, .sampler = sampler_state};
  if (carry) {
    position.totals = totals_;
    position.totals.seconds = epoch_seconds;
  }
  if (async_writer_ != nullptr) {
    confirm_checkpoint();  // the previous one: every rank learns its outcome
    save_run_checkpoint(o_, info_.strategy, *strategy_, pg_, gen_, position, async_writer_.get());
    async_step_ = step_;
    return;
  }
  result_.last_checkpoint =
      save_run_checkpoint(o_, info_.strategy, *strategy_, pg_, gen_, position);
  if (is_main() && observer_ != nullptr) observer_->on_checkpoint(result_.last_checkpoint, step_);
}

void Run::confirm_checkpoint() {
  if (async_writer_ == nullptr || async_step_ < 0) return;
  TraceSpan span(tracer_.get(), "main", "checkpoint wait", "io");
  std::optional<std::string> path =
      pg_ != nullptr ? async_writer_->wait(*pg_) : async_writer_->wait();
  const int64_t step = std::exchange(async_step_, -1);
  if (!path) return;
  result_.last_checkpoint = *path;
  if (is_main() && observer_ != nullptr) observer_->on_checkpoint(*path, step);
}

void Run::report_step(int64_t epoch, int64_t step_in_epoch, double l, bool last,
                      Clock::time_point t0, double local_samples_run) {
  StepInfo si;
  si.epoch = epoch;
  si.step = step_;
  si.step_in_epoch = step_in_epoch;
  si.steps_in_epoch = info_.steps_per_epoch;
  si.loss = l;
  si.last = last;
  si.elapsed_seconds = seconds_since(t0);
  const double replicas = strategy_->data_replicas();
  si.samples_per_second =
      si.elapsed_seconds > 0 ? local_samples_run * replicas / si.elapsed_seconds : 0;
  double per_step = si.elapsed_seconds /
                    static_cast<double>(std::max<double>(1.0, local_samples_run)) *
                    static_cast<double>(o_.batch_size);
  si.eta_seconds =
      per_step * static_cast<double>(std::max<int64_t>(0, info_.steps_per_epoch - step_in_epoch));
  observer_->on_step(si);
}

// Every step's loss (this rank's, which under DDP is what PyTorch's loop
// prints too): `cohort plot` draws the training curve from these lines.
void Run::write_step_metrics(int64_t epoch, double loss, Clock::time_point t0) {
  nlohmann::json rec;
  rec["type"] = "step";
  rec["epoch"] = epoch + 1;
  rec["step"] = step_;
  rec["loss"] = json_number(loss);
  rec["seconds"] = json_number(totals_.seconds + seconds_since(t0));
  metrics_.append(rec);
}

void Run::round_weights() {
  if (!o_.bf16_weights) return;
  optim::round_weights_to_bf16(strategy_->full_model().parameters(), *o_.bf16_weights, o_.seed,
                               step_);
}

void Run::run_epoch(int64_t epoch) {
  loader_->set_epoch(epoch);
  round_weights();  // the initial (or resumed) weights; exact when they are bf16 already
  int64_t step_in_epoch = (sampler_->position() + o_.batch_size - 1) / o_.batch_size;
  if (sampler_->epoch() != epoch) step_in_epoch = 0;
  const auto t0 = Clock::now();
  double local_samples_run = 0;  // this stretch, this rank
  bool stopped = false;
  // --drop-last false: ranks may hold different numbers of batches; a rank
  // out of them shadows the others' steps until all are.
  std::optional<parallel::Join> join;
  if (o_.drop_last == false && pg_ != nullptr && pg_->size() > 1) {
    std::vector<parallel::Joinable*> joinables = strategy_->joinables();
    COHORT_CHECK(!joinables.empty(),
                 "cohort train: --drop-last false needs a strategy that trains uneven inputs "
                 "(ddp or zero), not {}",
                 strategy_name(info_.strategy));
    join.emplace(std::move(joinables));
  }
  // The loader produces the next batch between two loop bodies.
  Tracer::Clock::time_point fetch_start = Tracer::Clock::now();
  for (data::Batch& b : *loader_) {
    if (tracer_) tracer_->span("main", "data", "data", fetch_start, Tracer::Clock::now());
    auto check = [&](double l) {
      if (std::isfinite(l)) return;
      throw Error(fmt::format(
          "cohort train: loss is {} at step {} (epoch {}, step {} of the epoch{}); training "
          "diverged -- try a lower --lr",
          l, step_ + 1, epoch + 1, step_in_epoch + 1, rank_suffix(pg_)));
    };
    double l = 0;
    {
      TraceSpan span(tracer_.get(), "main", "step", "compute");
      PrecisionScope precision(precision_);  // forward and backward; the update is float32 anyway
      l = strategy_->step(b, check);
      round_weights();
    }
    ++step_;
    ++step_in_epoch;
    // Replicas that hold one batch between several ranks count it once.
    const double share = strategy_->data_rank_counts() ? 1.0 : 0.0;
    totals_.loss_sum += l * share;
    totals_.loss_count += share;
    totals_.samples += static_cast<double>(b.size()) * share;
    local_samples_run += static_cast<double>(b.size());

    const bool last =
        step_in_epoch == info_.steps_per_epoch || (o_.max_steps > 0 && step_ >= o_.max_steps);
    if (is_main() && observer_ != nullptr && (step_in_epoch % log_every_ == 0 || last)) {
      report_step(epoch, step_in_epoch, l, last, t0, local_samples_run);
    }
    if (is_main() && !o_.metrics_path.empty()) write_step_metrics(epoch, l, t0);
    if (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0 && !last) {
      save(loader_->state(), totals_.seconds + seconds_since(t0), true);
    }
    if (o_.max_steps > 0 && step_ >= o_.max_steps) {
      stopped = true;
      break;
    }
    fetch_start = Tracer::Clock::now();
  }
  if (join) {
    join->finish();
    // Every rank counts the steps of the longest.
    Tensor steps = Tensor::from_vector(std::vector<int64_t>{step_, step_in_epoch});
    pg_->all_reduce(steps, {.op = distributed::ReduceOp::kMax});
    step_ = steps.to_vector<int64_t>()[0];
    step_in_epoch = steps.to_vector<int64_t>()[1];
  }
  const double seconds = totals_.seconds + seconds_since(t0);
  const data::SamplerState position = loader_->state();
  const bool complete = !stopped || position.position >= sampler_->size();
  // Saved before the totals are reduced and cleared (save reduces them).
  if (!o_.checkpoint_dir.empty()) {
    save(complete ? data::SamplerState{epoch + 1, 0} : position, seconds, !complete);
  } else {
    totals_.reduce(pg_);
  }
  end_epoch(epoch, step_in_epoch, seconds, complete);
}

void Run::end_epoch(int64_t epoch, int64_t step_in_epoch, double seconds, bool complete) {
  Evaluation ev;
  ev.loss = ev.accuracy = std::nan("");
  if (pg_ != nullptr || is_main()) {
    TraceSpan span(tracer_.get(), "main", "evaluate", "compute");
    strategy_->sync_full_model(false);
    // Language models evaluate in batches of --batch-size windows (a batch of
    // 1000 windows' logits would take gigabytes).
    ev = evaluate(strategy_->full_model(), o_.model, *splits_.test, pg_,
                  o_.is_language_model() ? o_.batch_size : 1000);
  }
  EpochStats es;
  es.epoch = epoch + 1;
  es.steps = step_in_epoch;
  es.samples = static_cast<int64_t>(totals_.samples);
  es.train_loss = totals_.loss_count > 0 ? totals_.loss_sum / totals_.loss_count : std::nan("");
  es.test_loss = ev.loss;
  es.test_accuracy = ev.accuracy;
  es.seconds = seconds;
  es.samples_per_second = seconds > 0 ? totals_.samples / seconds : 0;
  es.complete = complete;
  if (is_main()) {
    if (observer_ != nullptr) observer_->on_epoch_end(es);
    if (!o_.metrics_path.empty()) {
      nlohmann::json rec;
      rec["type"] = "epoch";
      rec["epoch"] = es.epoch;
      rec["train_loss"] = json_number(es.train_loss);
      rec["test_accuracy"] = json_number(es.test_accuracy);
      rec["seconds"] = json_number(es.seconds);
      rec["samples_per_second"] = json_number(es.samples_per_second);
      rec["test_loss"] = json_number(es.test_loss);
      rec["step"] = step_;
      rec["complete"] = es.complete;
      metrics_.append(rec);
    }
  }
  result_.epochs.push_back(es);
  totals_ = EpochTotals{};
}

void Run::train() {
  if (!strategy_->runs_loop()) {
    strategy_->serve();
    return;
  }
  if (is_main() && observer_ != nullptr) observer_->on_start(info_);
  log_every_ = o_.log_every > 0 ? o_.log_every : std::max<int64_t>(1, info_.steps_per_epoch / 10);
  for (int64_t epoch = start_epoch_; epoch < o_.epochs; ++epoch) {
    if (o_.max_steps > 0 && step_ >= o_.max_steps) break;
    run_epoch(epoch);
  }
  confirm_checkpoint();  // the last checkpoint is on disk before the run ends
  strategy_->on_train_end();
  result_.steps = step_;
}

void Run::write_trace() {
  if (tracer_) write_run_trace(*tracer_, world_.get(), o_.trace_path);
}

void Run::write_trace_part() noexcept {
  if (!tracer_) return;
  try {
    tracer_->write(trace_part_path(o_.trace_path, info_.rank));
  } catch (const std::exception& e) {
    COHORT_WARN("cohort train: rank {} could not write its trace: {}", info_.rank, e.what());
  }
}

}  // namespace

TrainResult Trainer::run(TrainObserver* observer) {
  TrainResult result;
  // The run's own thread budget, on this thread only: the process default
  // (the threads the run starts draw on) is the caller's to set.
  std::optional<ThreadBudgetGuard> budget;
  if (options_.threads > 0) budget.emplace(options_.threads);
  if (options_.fault_tolerant) return run_fault_tolerant(options_, observer);
  Run run(options_, pg_, observer, result);
  try {
    run.resume();
    run.train();
  } catch (...) {
    run.write_trace_part();
    throw;
  }
  run.write_trace();
  return result;
}

}  // namespace cohort::train
