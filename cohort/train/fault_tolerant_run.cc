#include "cohort/train/fault_tolerant_run.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <map>
#include <optional>
#include <span>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/base/parallel.h"
#include "cohort/checkpoint/async_checkpoint.h"
#include "cohort/checkpoint/checkpoint.h"
#include "cohort/data/sampler.h"
#include "cohort/data/window_dataset.h"
#include "cohort/data/window_sampler.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/train/fault_tolerant_model.h"
#include "cohort/train/workload.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;

// SIGTERM / SIGINT: this replica leaves at the next step boundary (a node
// leaving an elastic job), so the others lose no step to it.
volatile std::sig_atomic_t leave_requested = 0;
extern "C" void request_leave(int) { leave_requested = 1; }

// The examples at global positions [begin, end) of the walk: position g is
// example order(g / N)[g % N].
class GlobalOrder {
 public:
  GlobalOrder(int64_t n, uint64_t seed) : n_(n), sampler_(n, seed) {}
  std::vector<int64_t> at(int64_t begin, int64_t end) {
    std::vector<int64_t> out;
    for (int64_t g = begin; g < end; ++g) out.push_back(epoch(g / n_)[static_cast<size_t>(g % n_)]);
    return out;
  }

 private:
  const std::vector<int64_t>& epoch(int64_t e) {
    auto it = orders_.find(e);
    if (it != orders_.end()) return it->second;
    if (orders_.size() > 2) orders_.erase(orders_.begin());
    return orders_[e] = sampler_.indices(e);
  }
  int64_t n_;
  data::RandomSampler sampler_;
  std::map<int64_t, std::vector<int64_t>> orders_;
};

}  // namespace

void check_fault_tolerant_options(const TrainOptions& o) {
  COHORT_CHECK(o.strategy == Strategy::kAuto || o.strategy == Strategy::kDdp ||
                   o.strategy == Strategy::kZero,
               "--fault-tolerant is data parallel over replicas (--strategy ddp or auto, or zero "
               "inside replicas of several processes), not --strategy {}",
               strategy_name(o.strategy));
  const int g = o.fault_tolerant_job.replica_size;
  COHORT_CHECK(o.strategy != Strategy::kZero || g > 1,
               "--fault-tolerant --strategy zero shards over a replica's processes: run it under "
               "`cohort run --fault-tolerant --replica-size N` with N > 1 (COHORT_FT_REPLICA_SIZE "
               "is {})",
               g);
  COHORT_CHECK(g >= 1 && o.fault_tolerant_job.world_size % g == 0,
               "--fault-tolerant: COHORT_FT_REPLICA_SIZE {} must divide WORLD_SIZE {}", g,
               o.fault_tolerant_job.world_size);
  COHORT_CHECK(o.zero_shard_size == 0,
               "--fault-tolerant --strategy zero shards over each replica's processes; "
               "--zero-shard-size (HSDP) does not apply: the replicas are its replicate dimension");
  COHORT_CHECK(o.resume.empty(),
               "--fault-tolerant with --resume: a replacement takes the state from a live "
               "replica, not from a checkpoint; start a new run, or resume without "
               "--fault-tolerant");
  COHORT_CHECK(o.device.is_cpu(),
               "--fault-tolerant trains on the CPU (the library's nccl form, "
               "ReplicaManagerOptions::backend, "
               "has never run on a GPU)");
  COHORT_CHECK(o.checkpoint_every == 0,
               "--fault-tolerant writes checkpoints at the end of each epoch and of the run "
               "(--checkpoint-every 0)");
  const bool plain = o.metrics_path.empty() && o.trace_path.empty() &&
                     o.precision == ComputePrecision::kFloat32 &&
                     o.grad_reduce == ComputePrecision::kFloat32 && !o.comm_hook &&
                     !o.bf16_weights && !o.sync_batchnorm && !o.bucket_cap_mb;
  COHORT_CHECK(plain,
               "--fault-tolerant trains in float32 with its replicas' plain gradient average and "
               "reports on stdout; --metrics, --trace, --precision bf16, --grad-reduce bf16, "
               "--comm-hook, --bf16-weights, --sync-batchnorm and --bucket-cap-mb are not "
               "supported with it yet");
  COHORT_CHECK(!o.drop_last.has_value(),
               "--fault-tolerant walks one global order and drops the tail that does not fill a "
               "step; --drop-last does not apply");
}

TrainResult run_fault_tolerant(const TrainOptions& o, TrainObserver* observer) {
  check_fault_tolerant_options(o);
  const TrainOptions::FaultTolerantJob& job = o.fault_tolerant_job;
  COHORT_CHECK(job.rank >= 0 && job.master_port > 0,
               "cohort train --fault-tolerant: RANK and MASTER_PORT are not set; run it under "
               "`cohort run --fault-tolerant`, whose store hosts the quorum service (or give "
               "them, with `cohort lighthouse` serving it)");
  if (o.threads > 0) set_num_threads(o.threads);
  Splits splits = make_splits(o);
  Generator gen(o.seed);
  FaultTolerantModel model(o, gen);
  const int64_t batch = o.batch_size;
  // A replica of g processes takes g x batch examples a step, batch each.
  const int g = job.replica_size;
  const int group_rank = job.rank % g;
  const int64_t replica_batch = batch * g;
  // A language model's examples are windows: an epoch is what the job at its
  // initial size trains in its steps per epoch (as a run without faults).
  const bool lm = o.is_language_model();
  const int64_t block = lm ? gpt_config(o).block_size : 0;
  const int64_t n_train =
      lm ? (o.steps_per_epoch > 0 ? o.steps_per_epoch
                                  : data::default_steps_per_epoch(splits.train_tokens->size(),
                                                                  job.world_size, batch, block)) *
               job.world_size * batch
         : splits.train->size();
  const int64_t total = o.epochs * n_train;
  int64_t cursor = 0;
  std::optional<GlobalOrder> order;
  if (!lm) order.emplace(n_train, o.seed);

  parallel::ReplicaManagerOptions mo;
  mo.replica_id = g == 1 ? fmt::format("rank{}", job.rank) : fmt::format("replica{}", job.rank / g);
  mo.group_size = g;
  mo.group_rank = group_rank;
  mo.store_host = job.master_addr;
  mo.store_port = static_cast<uint16_t>(job.master_port);
  mo.initial_replicas = job.replacement ? 0 : job.world_size / g;
  mo.replacement = job.replacement;
  mo.state_dict = [&] { return model.state_dict(cursor, gen); };
  mo.load_state_dict = [&](const TensorDict& s) { cursor = model.load_state_dict(s, gen); };
  mo.log = [](const std::string& line) { COHORT_WARN("{}", line); };
  parallel::ReplicaManager m(mo);
  model.attach(m);
  // Rank 0's duties (progress, checkpoints) go to process 0 of the
  // participant of rank 0; a checkpoint is that replica's (collective).
  auto leads = [&] { return m.rank() == 0 && group_rank == 0; };

  TrainResult result;
  RunInfo& info = result.info;
  info.strategy = o.strategy == Strategy::kZero ? Strategy::kZero : Strategy::kDdp;
  info.rank = job.rank;
  info.world_size = job.world_size;
  info.threads = o.threads > 0 ? o.threads : num_threads();
  info.layout = model.layout();
  // A language model reports tokens, as without faults.
  info.train_examples = lm ? splits.train_tokens->size() : n_train;
  info.tokens_per_example = block;
  info.test_examples = splits.test->size();
  info.data_description = splits.description;
  info.steps_per_epoch = n_train / (batch * job.world_size);
  info.global_batch_size = batch * job.world_size;
  // --checkpoint-async: the participant of rank 0 writes in the background.
  std::optional<checkpoint::AsyncCheckpointWriter> writer;
  if (o.checkpoint_async) writer.emplace();
  bool started = false;
  int64_t epoch_steps = 0;
  double epoch_loss = 0, epoch_samples = 0;
  auto epoch_start = Clock::now();
  auto finish_epoch = [&](int64_t epoch, bool complete) {
    EpochStats e;
    e.epoch = epoch + 1;
    e.steps = epoch_steps;
    e.samples = static_cast<int64_t>(epoch_samples);
    e.train_loss = epoch_steps > 0 ? epoch_loss / static_cast<double>(epoch_steps) : 0;
    e.seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    e.samples_per_second = e.seconds > 0 ? epoch_samples / e.seconds : 0;
    e.complete = complete;
    e.test_accuracy = NAN;
    try {
      // Language models evaluate in batches of --batch-size windows, as without faults.
      Evaluation ev =
          evaluate(model.full_model(), o.model, *splits.test, m.group(), lm ? batch : 1000);
      e.test_loss = ev.loss;
      e.test_accuracy = ev.accuracy;
    } catch (const std::exception& ex) {
      // A member lost during the evaluation: the next step's quorum drops it.
      COHORT_WARN(
          "cohort train --fault-tolerant: the evaluation at the end of epoch {} failed ({}); "
          "training goes on",
          epoch + 1, ex.what());
      e.test_loss = NAN;
    }
    if (leads() && observer != nullptr) observer->on_epoch_end(e);
    if (m.rank() == 0 && !o.checkpoint_dir.empty()) {
      checkpoint::TrainingState ts{.epoch = cursor / n_train, .step = m.step()};
      result.last_checkpoint =
          model.save_checkpoint(o.checkpoint_dir, ts, writer ? &*writer : nullptr);
      if (leads() && observer != nullptr) observer->on_checkpoint(result.last_checkpoint, m.step());
    }
    result.epochs.push_back(e);
    epoch_steps = 0;
    epoch_loss = epoch_samples = 0;
    epoch_start = Clock::now();
  };

  struct sigaction leave {};
  leave.sa_handler = request_leave;
  leave.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &leave, nullptr);
  sigaction(SIGINT, &leave, nullptr);
  while (true) {
    if (leave_requested) {
      COHORT_WARN(
          "cohort train --fault-tolerant (replica rank{}): leaving at step {} (asked to "
          "stop); the others go on without it",
          job.rank, m.step());
      result.steps = m.step();
      return result;
    }
    m.start_step();
    if (!started && leads() && observer != nullptr) observer->on_start(info);
    started = true;
    const int n = m.num_participants();
    if (cursor + n * replica_batch > total || (o.max_steps > 0 && m.step() >= o.max_steps)) break;
    // This process's examples: the next ones of the global order, or, for a
    // language model, its slice of the step's random windows drawn for n x g
    // ranks (WindowSampler's draw: a pure function of the step and the
    // participants, the same on every one).
    const int64_t first = m.rank() * replica_batch + group_rank * batch;
    data::Batch b;
    if (lm) {
      const std::vector<int64_t> offsets =
          data::torch_cpu_randint(splits.train_tokens->size() - block, n * replica_batch,
                                  o.seed + static_cast<uint64_t>(m.step()));
      b = data::window_batch(*splits.train_tokens,
                             std::span<const int64_t>(offsets).subspan(static_cast<size_t>(first),
                                                                       static_cast<size_t>(batch)),
                             block);
    } else {
      b = splits.train->get_batch(order->at(cursor + first, cursor + first + batch));
    }
    Tensor loss = model.forward_backward(b);
    model.average_gradients(m);
    if (!m.should_commit()) continue;
    // Every participant holds the same averaged gradients: the same clip.
    model.step();
    const int64_t epoch_before = cursor / n_train;
    cursor += n * replica_batch;
    const double l = loss.item<double>();
    COHORT_CHECK(std::isfinite(l),
                 "cohort train: loss is {} at step {} (replica rank{}); training "
                 "diverged -- try a lower --lr",
                 l, m.step(), job.rank);
    ++epoch_steps;
    epoch_loss += l;
    epoch_samples += static_cast<double>(n * replica_batch);
    const int64_t in_epoch = epoch_steps;
    if (leads() && observer != nullptr &&
        (o.log_every > 0 ? in_epoch % o.log_every == 0 : in_epoch % 10 == 0)) {
      StepInfo s;
      s.epoch = epoch_before;
      s.step = m.step();
      s.step_in_epoch = in_epoch;
      s.steps_in_epoch = n_train / (n * replica_batch);
      s.loss = l;
      s.elapsed_seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      s.samples_per_second = s.elapsed_seconds > 0 ? epoch_samples / s.elapsed_seconds : 0;
      observer->on_step(s);
    }
    if (cursor / n_train > epoch_before) finish_epoch(epoch_before, true);
  }
  if (epoch_steps > 0)
    finish_epoch(cursor / n_train, !(o.max_steps > 0 && m.step() >= o.max_steps));
  if (writer) writer->wait();
  result.steps = m.step();
  return result;
}

}  // namespace cohort::train
