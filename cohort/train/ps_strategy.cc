#include "cohort/train/ps_strategy.h"

#include <map>
#include <string>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/base/parallel.h"
#include "cohort/optim/clip_grad.h"

namespace cohort::train {
namespace {

std::string server_name(int i) { return "ps" + std::to_string(i); }
std::string trainer_name(int i) { return "trainer" + std::to_string(i); }

parallel::PsMode ps_mode(const std::string& name) { return parallel::parse_ps_mode(name); }

}  // namespace

PsStrategy::PsStrategy(const TrainOptions& options,
                       std::shared_ptr<distributed::ProcessGroup> world, Generator& gen)
    : TrainStrategy(world),
      options_(options),
      world_(std::move(world)),
      servers_(options.ps_servers) {
  COHORT_CHECK(world_ != nullptr, "--strategy ps needs a process group (run under cohort run)");
  COHORT_CHECK(world_->size() > servers_,
               "--ps-servers {} leaves no trainer in a world of {} ranks (the first "
               "--ps-servers ranks serve, the others train)",
               servers_, world_->size());
  trainers_ = world_->size() - servers_;
  model_ = make_model(options, gen);
  params_ = model_->parameters();
  full_opt_ = make_optimizer(options, params_);

  std::vector<int> trainer_ranks;
  for (int r = servers_; r < world_->size(); ++r) trainer_ranks.push_back(r);
  trainer_group_ = world_->new_group(trainer_ranks);

  std::vector<std::string> servers, trainers;
  for (int i = 0; i < servers_; ++i) servers.push_back(server_name(i));
  for (int i = 0; i < trainers_; ++i) trainers.push_back(trainer_name(i));
  rpc::RpcOptions ro;
  // A server's pulls may wait in handlers (sync, ssp): more handler threads
  // than trainers, so the push that releases them finds one.
  ro.num_handler_threads = trainers_ + 2;
  // Servers register the ps.* functions after init_rpc: a trainer's first
  // pull may come first, and on a loaded host by more than the default grace.
  ro.unregistered_grace = std::chrono::seconds(30);
  ro.force_tcp = options.rpc_force_tcp;
  const int rank = world_->rank();
  agent_ = rpc::init_rpc(rank < servers_ ? server_name(rank) : trainer_name(rank - servers_), ro);

  if (rank < servers_) {
    parallel::ParameterServerOptions po;
    po.mode = ps_mode(options.ps_mode);
    po.staleness = options.ps_staleness;
    const TrainOptions o = options;
    service_ = parallel::serve_parameter_server(
        agent_, *model_, servers, trainers, rank,
        [o](std::vector<Tensor> p) { return make_optimizer(o, std::move(p)); }, po);
  } else {
    client_ =
        std::make_unique<parallel::ParameterServerClient>(agent_, model_, servers, rank - servers_);
  }
}

PsStrategy::~PsStrategy() = default;

double PsStrategy::step(const data::Batch& batch, const std::function<void(double)>& check) {
  client_->pull();
  model_->zero_grad();
  Tensor loss = compute_loss(options_.model, model_->forward(batch.input), batch.target);
  const double l = loss.item<double>();
  check(l);
  loss.backward();
  if (const double clip = clip_max_norm(options_.model); clip > 0) {
    optim::clip_grad_norm(params_, clip);
  }
  client_->push();
  return l;
}

void PsStrategy::sync_full_model(bool optimizer) {
  model_->load_state_dict(client_->full_state_dict());
  if (!optimizer || trainer_group_->rank() != 0) return;
  const std::vector<std::vector<size_t>> orders = server_orders();
  std::vector<TensorDict> parts = client_->optimizer_state_dicts();
  TensorDict merged = full_opt_->state_dict();
  for (size_t s = 0; s < parts.size(); ++s) {
    for (const auto& [key, t] : parts[s]) {
      const int64_t local = optim::state_key_param_index(key);
      if (local < 0) continue;
      const size_t global = orders[s].at(static_cast<size_t>(local));
      const std::string rest = key.substr(key.find('.', 6));
      merged.insert_or_assign("state." + std::to_string(global) + rest, t);
    }
  }
  full_opt_->load_state_dict(merged);
}

std::vector<std::vector<size_t>> PsStrategy::server_orders() const {
  // Each server numbers its state by its own optimizer's parameters (its
  // shard, grouped by make_optimizer: a GPT's decay groups reorder them);
  // the checkpoint by full_opt_'s. Map through the tensors: the same rule
  // over the same shard here gives the server's order.
  const parallel::ShardAssignment& a = client_->assignment();
  std::unordered_map<const TensorImpl*, size_t> full_index;
  for (const optim::ParamGroup& g : full_opt_->param_groups())
    for (const Tensor& p : g.params) full_index.emplace(p.unsafe_impl(), full_index.size());
  std::vector<std::vector<size_t>> orders(a.params_of.size());
  for (size_t s = 0; s < a.params_of.size(); ++s) {
    std::vector<Tensor> shard;
    for (size_t i : a.params_of[s]) shard.push_back(params_.at(i));
    const auto probe = make_optimizer(options_, shard);
    for (const optim::ParamGroup& g : probe->param_groups())
      for (const Tensor& p : g.params) orders[s].push_back(full_index.at(p.unsafe_impl()));
  }
  return orders;
}

void PsStrategy::after_resume() {
  if (trainer_group_->rank() == 0) {
    client_->load_full_state_dict(model_->state_dict());
    // The checkpoint's optimizer state, each server's share renumbered in
    // its order (the servers keep their own group options).
    const std::vector<std::vector<size_t>> orders = server_orders();
    std::map<size_t, std::vector<std::pair<std::string, Tensor>>> by_param;
    for (const auto& [key, t] : full_opt_->state_dict()) {
      const int64_t i = optim::state_key_param_index(key);
      if (i >= 0) by_param[static_cast<size_t>(i)].push_back({key.substr(key.find('.', 6)), t});
    }
    std::vector<TensorDict> parts = client_->optimizer_state_dicts();
    for (size_t s = 0; s < parts.size(); ++s) {
      TensorDict d;
      for (const auto& [key, t] : parts[s])
        if (optim::state_key_param_index(key) < 0) d.insert(key, t);
      for (size_t j = 0; j < orders[s].size(); ++j)
        for (const auto& [rest, t] : by_param[orders[s][j]])
          d.insert("state." + std::to_string(j) + rest, t);
      parts[s] = std::move(d);
    }
    client_->load_optimizer_state_dicts(parts);
  }
  trainer_group_->barrier({});
}

void PsStrategy::serve() {
  // Until every trainer finished (or, async and ssp, was lost); a sync
  // server whose trainer is lost throws naming it.
  service_->wait_done(std::chrono::hours(24 * 365));
  for (const parallel::LostWorker& w : service_->server().stats().lost) {
    log(LogLevel::kWarn, "parameter server {}: trainer '{}' was lost: {}",
        server_name(world_->rank()), w.name, w.reason);
  }
  agent_->shutdown();
}

void PsStrategy::on_train_end() {
  client_->finish();
  agent_->shutdown();
}

distributed::ProcessGroup* PsStrategy::loop_group() {
  return options_.ps_mode == "sync" ? trainer_group_.get() : nullptr;
}

int PsStrategy::threads() const { return num_threads(); }

std::string PsStrategy::layout() const {
  std::string mode = options_.ps_mode;
  if (mode == "ssp") mode += fmt::format(" (staleness {})", options_.ps_staleness);
  return fmt::format("parameter server {}: {} server{} + {} trainer{}", mode, servers_,
                     servers_ == 1 ? "" : "s", trainers_, trainers_ == 1 ? "" : "s");
}

}  // namespace cohort::train
