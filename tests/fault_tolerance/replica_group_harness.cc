// The loop of one process of a replica of several (ReplicaGroupSpec): ZeRO
// (or, at stage 0, DDP) over the replica's processes (replica_group()), its
// gradients averaged across replicas by the manager's (sharded) hook; each committed step takes
// the next n x B samples for its n replicas, B per replica split evenly
// among its processes.
#include <signal.h>

#include <fstream>
#include <thread>

#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
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
  auto ddp_module = [&]() -> nn::Module& { return ddp->module(); };
  std::unique_ptr<ShardedOptimizer> opt;
  std::unique_ptr<optim::Optimizer> dense_opt;  // DDP's (zero_stage 0)
  // Process g of the source replica sends to process g of the one behind:
  // the full parameters (stage 3 gathers them: every process of the source
  // sends at once), its shard's optimizer state, the cursor.
  auto state = [&] {
    TensorDict s;
    if (zero) zero->summon_full_params();
    nn::Module& full = zero ? zero->module() : ddp_module();
    for (const auto& [n, p] : full.named_parameters()) s.insert("model." + n, p.detach());
    s.merge(zero ? opt->optimizer().state_dict() : dense_opt->state_dict(), "optim.");
    s.insert("cursor", Tensor::from_vector<int64_t>({cursor}));
    return s;
  };
  auto load = [&](const TensorDict& s) {
    if (zero) zero->summon_full_params();
    {
      NoGradGuard no_grad;
      nn::Module& full = zero ? zero->module() : ddp_module();
      for (const auto& [n, p] : full.named_parameters())
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
  if (spec.zero_stage == 0) {
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
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *zero;
  nn::Module& full = ddp ? ddp->module() : zero->module();
  optim::Optimizer& inner = ddp ? *dense_opt : opt->optimizer();
  const int64_t share = kBatch / spec.group_size;
  while (m.step() < spec.steps) {
    m.start_step();
    const int n = m.num_participants();
    const int64_t begin = cursor + m.rank() * kBatch + spec.group_rank * share;
    auto [x, y] = samples(begin, begin + share);
    auto found = spec.faults.find(m.step());
    const Fault fault = found == spec.faults.end() ? Fault::kNone : found->second;
    if (opt) opt->zero_grad();
    inner.zero_grad();
    if (fault == Fault::kKillInForward) ::raise(SIGKILL);
    Tensor loss = mse_loss(net.forward(x), y);
    if (fault == Fault::kKillBeforeAllReduce) ::raise(SIGKILL);
    if (fault == Fault::kStop) ::raise(SIGSTOP);
    loss.backward();
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
  std::ofstream params(dir / (name + ".params"), std::ios::binary);
  for (const Tensor& p : full.parameters()) {
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
