// The loop of one process of a replica of several (ReplicaGroupSpec): ZeRO
// (stage 0: DDP; -1: a tensor-parallel MLP; -2: a pipeline of two stages)
// over the replica's processes
// (replica_group()), its gradients averaged across replicas by the manager's
// (sharded) hook or all_reduce_average; each committed step takes
// the next n x B samples for its n replicas, B per replica split evenly
// among its processes.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/parallel/pipeline/pipeline.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"
#include "cohort/parallel/zero/sharded_optimizer.h"
#include "tests/fault_tolerance/replica_harness.h"
#include "tests/fault_tolerance/replica_model.h"

namespace cohort::parallel::ft_testing {

using namespace std::chrono_literals;

namespace {

int train_process(const ReplicaGroupSpec& spec, uint16_t port, const fs::path& dir) {
  const std::string name = fmt::format("{}.{}", spec.id, spec.group_rank);
  std::ofstream log(dir / (name + ".log"));
  int64_t cursor = 0;
  std::vector<int> committed;
  std::unique_ptr<ShardedDataParallel> zero;
  std::unique_ptr<DistributedDataParallel> ddp;  // zero_stage 0: DDP over the replica
  nn::ModulePtr tp;
  // zero_stage -2: every process holds the whole model and trains its stage.
  nn::ModulePtr pipe_model;
  std::unique_ptr<pipeline::Pipeline> pipe;
  // What a process keeps and trains: the full model, or its tensor-parallel part.
  auto own = [&]() -> nn::Module& {
    return zero ? zero->module() : tp ? *tp : pipe ? *pipe_model : ddp->module();
  };
  std::unique_ptr<ShardedOptimizer> opt;
  std::unique_ptr<optim::Optimizer> dense_opt;  // DDP's (zero_stage 0)
  // Process g of the source replica sends to process g of the one behind:
  // the full parameters (stage 3 gathers them: every process of the source
  // sends at once), its shard's optimizer state, the cursor.
  auto state = [&] {
    TensorDict s;
    if (zero) zero->summon_full_params();
    for (const auto& [n, p] : own().named_parameters()) s.insert("model." + n, p.detach());
    s.merge(zero ? opt->optimizer().state_dict() : dense_opt->state_dict(), "optim.");
    s.insert("cursor", Tensor::from_vector<int64_t>({cursor}));
    return s;
  };
  auto load = [&](const TensorDict& s) {
    if (zero) zero->summon_full_params();
    {
      NoGradGuard no_grad;
      for (const auto& [n, p] : own().named_parameters())
        const_cast<Tensor&>(p).copy_(s.at("model." + n));
    }
    if (zero) zero->load_full_params();
    (zero ? opt->optimizer() : *dense_opt).load_state_dict(s.sub("optim."));
    cursor = s.at("cursor").to_vector<int64_t>()[0];
  };
  ReplicaManager m({.replica_id = spec.id,
                    .group_size = spec.group_size,
                    .group_rank = spec.group_rank,
                    .store_port = port,
                    .token = std::string(kToken),
                    .initial_replicas = spec.initial_replicas,
                    .replacement = spec.replacement,
                    .quorum_timeout = 20s,
                    .join_timeout = 300ms,
                    .op_timeout = 3s,
                    .heartbeat_interval = 50ms,
                    .heartbeat_timeout = 500ms,
                    .state_dict = state,
                    .load_state_dict = load,
                    .log = [&](const std::string& line) { log << line << std::endl; }});
  if (spec.zero_stage == -1) {
    Generator gen(spec.seed);
    // The same full weights as make_model draws, each process keeping its part.
    tp = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<ColumnParallelLinear>(4, 8, m.replica_group(), gen,
                                               ColumnParallelOptions{.gather_output = false}),
        std::make_shared<nn::Tanh>(),
        std::make_shared<RowParallelLinear>(8, 1, m.replica_group(), gen)});
    dense_opt = std::make_unique<optim::SGD>(tp->parameters(), sgd());
  } else if (spec.zero_stage == -2) {
    pipe_model = make_model(spec.seed);
    pipe = std::make_unique<pipeline::Pipeline>(
        std::dynamic_pointer_cast<nn::Sequential>(pipe_model),
        pipeline::make_pipeline_grid(m.replica_group(), spec.group_size),
        pipeline::PipelineOptions{.micro_batches = 2, .cut_points = {2}});
    dense_opt = std::make_unique<optim::SGD>(pipe->parameters(), sgd());
  } else if (spec.zero_stage == 0) {
    ddp = std::make_unique<DistributedDataParallel>(
        make_model(spec.seed), m.replica_group(),
        DistributedDataParallelOptions{.bucket_cap_mb = 0.0001, .comm_hook = m.comm_hook()});
    dense_opt = std::make_unique<optim::SGD>(ddp->module().parameters(), sgd());
  } else {
    zero = std::make_unique<ShardedDataParallel>(make_model(spec.seed), m.replica_group(),
                                                 ZeroOptions{.stage = spec.zero_stage});
    zero->register_comm_hook(m.sharded_comm_hook());
    opt = std::make_unique<ShardedOptimizer>(
        *zero, std::make_unique<optim::SGD>(zero->shard_parameters(), sgd()));
  }
  nn::Module* net = tp ? tp.get() : ddp ? static_cast<nn::Module*>(ddp.get()) : zero.get();
  optim::Optimizer& inner = zero ? opt->optimizer() : *dense_opt;
  // Data parallel inside the replica: each process a part of its batch;
  // tensor parallel and pipeline: each the whole batch.
  const bool model_parallel = tp || pipe;
  const int64_t share = model_parallel ? kBatch : kBatch / spec.group_size;
  while (m.step() < spec.steps) {
    m.start_step();
    const int n = m.num_participants();
    const int64_t begin =
        cursor + m.rank() * kBatch + (model_parallel ? 0 : spec.group_rank * share);
    auto [x, y] = samples(begin, begin + share);
    auto found = spec.faults.find(m.step());
    const Fault fault = found == spec.faults.end() ? Fault::kNone : found->second;
    if (opt) opt->zero_grad();
    inner.zero_grad();
    if (fault == Fault::kKillInForward) ::raise(SIGKILL);
    if (pipe) {
      // The stages' forward and backward in one (its partner waits on it).
      if (fault == Fault::kKillBeforeAllReduce) ::raise(SIGKILL);
      if (fault == Fault::kStop) ::raise(SIGSTOP);
      pipe->step(x, y, pipeline::mse_loss_fn);
    } else {
      Tensor loss = mse_loss(net->forward(x), y);
      if (fault == Fault::kKillBeforeAllReduce) ::raise(SIGKILL);
      if (fault == Fault::kStop) ::raise(SIGSTOP);
      loss.backward();
    }
    if (model_parallel) {
      // A tensor-parallel part's or a stage's own gradients, over process g
      // of each replica.
      std::vector<Tensor> grads;
      for (Tensor& p : tp ? tp->parameters() : pipe->parameters()) grads.push_back(p.grad());
      m.all_reduce_average(grads);
    }
    std::this_thread::sleep_for(n == 1 ? spec.step_time_alone : spec.step_time);
    if (!m.should_commit()) continue;
    if (opt) {
      opt->step();
    } else {
      inner.step();
    }
    cursor += n * kBatch;
    committed.push_back(n);
  }
  if (zero) zero->summon_full_params();
  std::vector<Tensor> full;
  if (tp) {
    const TensorDict whole = full_state_dict(*tp, *m.replica_group());
    for (const auto& [n, p] : make_model(0)->named_parameters()) full.push_back(whole.at(n));
  } else if (pipe) {
    // Each stage's parameters, the others' zero, summed over the replica.
    const std::vector<Tensor> mine = pipe->parameters();
    for (const Tensor& p : pipe_model->parameters()) {
      const bool owned = std::any_of(mine.begin(), mine.end(),
                                     [&](const Tensor& q) { return q.raw_data() == p.raw_data(); });
      Tensor t = owned ? p.detach().clone() : Tensor::zeros(p.sizes());
      m.replica_group()->all_reduce(t, {.op = distributed::ReduceOp::kSum});
      full.push_back(t);
    }
  } else {
    full = own().parameters();
  }
  std::ofstream params(dir / (name + ".params"), std::ios::binary);
  for (const Tensor& p : full) {
    Tensor c = p.contiguous();
    params.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.nbytes()));
  }
  std::ofstream steps(dir / (name + ".steps"));
  steps << m.step() << " " << cursor;
  for (int k : committed) steps << " " << k;
  return 0;
}

}  // namespace

int run_replica_process(const ReplicaGroupSpec& spec, uint16_t port, const fs::path& dir) {
  try {
    return train_process(spec, port, dir);
  } catch (const std::exception& e) {
    std::ofstream(dir / fmt::format("{}.{}.err", spec.id, spec.group_rank)) << e.what();
    return 3;
  }
}

}  // namespace cohort::parallel::ft_testing
