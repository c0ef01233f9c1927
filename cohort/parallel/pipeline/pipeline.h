// Pipeline parallelism: consecutive layers of an nn::Sequential on different
// ranks (stages); each step's batch is cut into micro-batches so that the
// stages work at the same time, forward and backward, in the order a schedule
// gives (schedule.h: GPipe, 1F1B, interleaved 1F1B, ZB-H1). Combined with
// data parallelism through a PipelineGrid (replicas x stages).
//
//   auto world = distributed::init_process_group("native", "env://");
//   auto grid = make_pipeline_grid(world, /*stages=*/2);  // pp group, dp group (null when dp == 1)
//   auto model = nn::make_mlp(gen);                       // the whole model, on every rank
//   Pipeline pipe(model, grid, {.schedule = Schedule::k1F1B, .micro_batches = 8});
//   optim::SGD opt(pipe.parameters(), {.lr = 0.01});      // this rank's parameters only
//   opt.zero_grad();
//   double loss = pipe.step(x, y, nll_loss_fn);  // x used on the first stage, y on the last
//   pipe.clip_grad_norm(10);                     // over the whole pipeline
//   opt.step();
//   Tensor out = pipe.forward(x);                // inference; defined on the last stage
//
// Partition: S = p * v stages (v virtual stages per rank for interleaved,
// default 2; one otherwise); rank r holds stages r, r+p, ... Cut points are
// the user's (options.cut_points) or chosen to balance the cost of forward +
// backward of each child measured on options.sample_input on world rank 0
// and broadcast to every rank (so every replica cuts alike); without a sample
// each child counts as its parameter count + 1 (give sample_input on every
// rank or on none). A stage may hold only parameter-free layers (a flatten):
// parameters() is then empty there; skip the optimizer on that rank (SGD
// rejects an empty list). Stages hold the original
// children (shared), so parameters keep the full model's names and tensors.
// Ranks keep references only to their own stages' children.
//
// Step semantics: the batch is split along dim 0 into m micro-batches of
// sizes differing by at most one (the first N % m get one more row, as
// torch.tensor_split; N >= m). The loss of micro-batch i is loss_fn(output_i,
// target_i) * n_i / N, so with a mean-reducing loss the gradients summed over
// micro-batches are the gradients of the full batch's mean loss; they
// accumulate into each parameter's .grad (call zero_grad between steps, as
// without a pipeline). With replicas, each stage's gradients are then
// averaged over its replicas (bucketed all_reduce) and the returned loss is
// the mean over replicas too: the step equals one process training on the
// concatenation of the replicas' batches. The loss is returned on every rank.
// With PipelineOptions::zero_stage 1 or 2 (ZeRO over the replicas) the
// averaging is a reduce_scatter instead: each replica keeps 1/R of its
// stage's gradients and optimizer state (zero(), ShardedOptimizer).
//
// The schedule is validated (validate_schedule) at construction: a plan that
// could deadlock or mismatch a transfer is rejected before it runs.
//
// Failure: any error during a step (a lost peer, a timeout, a message whose
// header is not what the schedule expects) is rethrown as the same Error
// class with a message naming this rank, its stage, the failing action and
// the last actions run; the pipeline group is then aborted so that the other
// ranks fail at once instead of waiting out the group timeout (the groups
// and the Pipeline cannot be used after that).
//
// Thread safety: one thread drives a Pipeline; ranks call step/forward and
// the collective helpers in the same order.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/tensor_dict.h"
#include "cohort/nn/sequential.h"
#include "cohort/parallel/pipeline/pipeline_grid.h"
#include "cohort/parallel/pipeline/schedule.h"
#include "cohort/parallel/pipeline/stage_channel.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel::pipeline {

// loss_fn(output of the last stage for one micro-batch, its targets): the mean loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;
Tensor nll_loss_fn(const Tensor& output, const Tensor& target);
Tensor mse_loss_fn(const Tensor& output, const Tensor& target);

struct PipelineOptions {
  Schedule schedule = Schedule::k1F1B;
  int micro_batches = 4;
  int virtual_stages = 0;                // per rank; 0 = 2 for interleaved, 1 otherwise
  std::vector<int64_t> cut_points = {};  // first child of stages 1..S-1; empty = balanced
  Tensor sample_input = {};              // one micro-batch, to measure each child's cost
  double bucket_cap_mb = 25.0;           // gradient all_reduce over replicas, per call
  // The name under which each child's state appears in named_parameters()
  // and the state dicts, one per child of the model (dots allowed): a
  // pipeline form built from a plain model's children keeps the plain
  // model's keys ("transformer.h.0" for a GPT block, gpt_pipeline.h).
  // Empty: the children's own names.
  std::vector<std::string> layer_names = {};
  // Groups of parameter names (as named above) that are one tensor in the
  // plain model but may live on several pipeline ranks, as a GPT's token
  // embedding and its tied head: at construction the copies are set to the
  // first holder's; after each step's backward their gradients are summed
  // over the ranks holding them (an all_reduce over a group of those ranks,
  // Megatron's embedding group), so every copy takes the same update;
  // grad_norm counts the tensor once. Members on one rank must be one tensor.
  std::vector<std::vector<std::string>> tied_parameters = {};
  // ZeRO over each stage's replicas (the grid's dp group, replicas >= 2):
  // 0 off (the bucketed all_reduce above); 1 shards the optimizer state, 2
  // also the gradients. This rank's stages become one ShardedDataParallel
  // over dp (zero()), each layer a unit: after the schedule the
  // accumulated gradients are reduce-scattered over dp instead of
  // all-reduced; build the optimizer over zero()->shard_parameters() (or
  // shard_of per group) inside a ShardedOptimizer, whose step() updates this
  // rank's 1/R of every tensor and all-gathers the parameters over dp.
  // Stage 3 (parameters sharded) is not supported under the pipeline.
  int zero_stage = 0;
};

// Measures of the last step() on this rank (the benchmark's hooks).
struct PipelineStats {
  double step_seconds = 0;       // the whole step, this rank
  double compute_seconds = 0;    // F, B, W, BW and the loss
  double recv_seconds = 0;       // blocked receiving (waiting for a peer, and the copy)
  double send_wait_seconds = 0;  // waiting for the step's sends to complete
  double bubble_fraction = 0;    // idle share: 1 - compute / step
  int peak_in_flight = 0;        // micro-batches forwarded whose backward (BW or W) had not run
  int64_t peak_activation_bytes = 0;  // most bytes of layer outputs kept for backward at once
  int actions = 0;                    // actions run
};

class Pipeline {
 public:
  // Collective over grid.world (cut points broadcast, parameters broadcast
  // from replica 0 over dp). `model` is the whole model, the same
  // architecture on every rank. InvalidArgument for a model with fewer
  // children than stages, bad cut points, or a schedule that does not fit
  // (e.g. interleaved with micro_batches % p != 0).
  Pipeline(std::shared_ptr<nn::Sequential> model, PipelineGrid grid, PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // One training step (see the header); returns the batch's mean loss.
  double step(const Tensor& input, const Tensor& target, const LossFn& loss_fn);
  // Inference, no grad, micro-batched: the model's output for input on the
  // last stage (rank p-1); an undefined Tensor on the other ranks.
  Tensor forward(const Tensor& input);

  // This rank's parameters (all its stages, a tensor held twice listed
  // once), for the optimizer.
  std::vector<Tensor> parameters() const;
  nn::NamedTensors named_parameters() const;  // full model's names (layer_names)
  void zero_grad(bool set_to_none = false);
  void train(bool on = true);
  void eval() { train(false); }

  // Total 2-norm of the gradients of the whole pipeline (sum of squares
  // all-reduced over pp): the same on every rank. Collective over pp (with
  // zero_stage: over the world, the sum of squares of the gradient shards).
  double grad_norm();
  // clip_grad_norm over the whole model (torch.nn.utils.clip_grad_norm_ on
  // the unsplit model): scales this rank's gradients (with zero_stage: its
  // gradient shards) by max_norm / (total + 1e-6) when that is < 1; returns
  // the total. Collective as grad_norm.
  double clip_grad_norm(double max_norm);

  // ---- checkpoints (full model names) ----
  // This rank's part of the state (shares storage, as Module::state_dict).
  TensorDict state_dict() const;
  // Takes this rank's keys from a full or partial dict (others are ignored);
  // missing keys of this rank are an InvalidArgument naming them.
  void load_state_dict(const TensorDict& dict);
  // Collective over pp: the whole model's state on pipeline rank 0 (in the
  // model's state_dict order, copies), empty on the other ranks.
  TensorDict full_state_dict();

  // ---- layout ----
  const SchedulePlan& plan() const { return plan_; }
  const std::vector<int64_t>& stage_starts() const { return starts_; }
  int rank() const { return rank_; }
  int num_ranks() const { return plan_.ranks; }
  int chunks() const { return plan_.chunks; }
  bool is_first() const { return rank_ == 0; }
  bool is_last() const { return rank_ == plan_.ranks - 1; }
  // This rank's stage modules, by chunk.
  const std::vector<std::shared_ptr<nn::Sequential>>& stages() const { return stages_; }
  const PipelineGrid& grid() const { return grid_; }
  // With options.zero_stage 1 or 2: this rank's stages sharded over dp (see
  // PipelineOptions::zero_stage); null otherwise.
  ShardedDataParallel* zero() const { return zero_.get(); }

  const PipelineStats& last_stats() const { return stats_; }

 private:
  struct MicroState;
  void run_plan(const SchedulePlan& plan, const std::vector<Tensor>& inputs,
                const std::vector<Tensor>& targets, const LossFn* loss_fn,
                std::vector<Tensor>* outputs, int64_t batch);
  void run_action(const SchedulePlan& plan, const Action& a, std::vector<MicroState>& st,
                  const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                  const LossFn* loss_fn, std::vector<Tensor>* outputs, int64_t batch);
  // From the catch block handling e (schedule_interpreter.cc): breaks the
  // pipeline, aborts the group and rethrows e with its type and context.
  [[noreturn]] void fail(const std::exception& e, const Action& a, size_t index);
  void average_over_replicas();
  void setup_zero();
  // What holds each gradient the norm counts, in parameters() order: the
  // parameters, or with ZeRO the shards of the trainable ones.
  std::vector<Tensor> gradient_holders() const;
  void broadcast_from_replica_zero();
  void setup_tied(const std::vector<std::vector<std::string>>& groups);
  void sum_tied_gradients();
  // A stage's key ("3.weight") under the layer names ("transformer.h.0.weight").
  std::string full_name(const std::string& stage_key) const;

  PipelineGrid grid_;
  PipelineOptions options_;
  SchedulePlan plan_;
  int rank_ = 0;
  Device device_ = kCPU;  // the model's: micro-batches and received messages go there
  std::vector<int64_t> starts_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;  // by chunk
  // The full model's state layout: name, shape, dtype, owning pipeline rank.
  struct Entry {
    std::string name;
    Shape shape;
    DType dtype;
    int rank;
  };
  std::vector<Entry> layout_;
  std::map<std::string, std::string> layer_names_;  // child name -> layer name, when renamed
  // Tied parameters held here whose group spans several ranks.
  struct Tied {
    std::shared_ptr<distributed::ProcessGroup> group;  // the holders; rank 0 is the first
    Tensor tensor;                                     // this rank's copy
  };
  std::vector<Tied> tied_;
  std::vector<const TensorImpl*> tied_copies_;  // held here but counted by another rank
  std::shared_ptr<ShardedDataParallel> zero_;   // zero_stage 1, 2
  StageChannel channel_;
  int64_t step_count_ = 0;
  std::map<int, SchedulePlan> forward_plans_;  // by micro-batch count
  PipelineStats stats_;
  double stats_loss_ = 0;  // last stage: the step's loss so far
  // The last actions run, for error messages.
  struct Ran {
    int64_t call = 0;  // step_count_ when it ran
    size_t index = 0;  // in that call's list
    Action action;
  };
  std::array<Ran, 16> recent_{};
  size_t recent_count_ = 0;
  int in_flight_ = 0;
  int64_t in_flight_bytes_ = 0;
  bool broken_ = false;
};

}  // namespace cohort::parallel::pipeline
