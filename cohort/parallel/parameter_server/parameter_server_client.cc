#include "cohort/parallel/parameter_server/parameter_server_client.h"

#include <unordered_map>

#include <fmt/format.h>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/parallel/parameter_server/ps_protocol.h"
#include "cohort/parallel/parameter_server/rpc_fanout.h"
#include "cohort/parallel/parameter_server/tensor_message.h"

namespace cohort::parallel {

ParameterServerClient::ParameterServerClient(std::shared_ptr<rpc::RpcAgent> agent,
                                             std::shared_ptr<nn::Module> model,
                                             std::vector<std::string> servers, int worker,
                                             ParameterServerClientOptions options)
    : agent_(std::move(agent)),
      model_(std::move(model)),
      servers_(std::move(servers)),
      worker_(worker),
      options_(options) {
  COHORT_CHECK(agent_ != nullptr && model_ != nullptr,
               "ParameterServerClient: null agent or model");
  COHORT_CHECK(!servers_.empty(), "ParameterServerClient: no servers");
  COHORT_CHECK(worker_ >= 0, "ParameterServerClient: worker index {} < 0", worker_);
  COHORT_CHECK(options_.timeout.count() > 0, "ParameterServerClient: timeout must be positive");
  params_ = model_->named_parameters();
  assignment_ = assign_shards(params_, static_cast<int>(servers_.size()));
  versions_.assign(servers_.size(), 0);
  // The servers' liveness probe (parameter_server_service.h). Several clients
  // in one process (tests) share the one function.
  if (!agent_->has_function(ps_protocol::kAlive))
    agent_->register_function(ps_protocol::kAlive,
                              [](const rpc::CallContext&, rpc::Message) { return rpc::Message(); });
}

std::string ParameterServerClient::who() const {
  return fmt::format("trainer '{}' (worker {})", agent_->name(), worker_);
}

std::vector<rpc::Message> ParameterServerClient::call_all(const char* fn,
                                                          std::vector<rpc::Message> msgs,
                                                          const std::string& op) {
  const size_t n = servers_.size();
  std::vector<rpc::Future> futures(n);
  std::vector<size_t> started;
  try {
    for (size_t s = 0; s < n; ++s) {
      futures[s] =
          agent_->rpc_async(servers_[s], fn, std::move(msgs[s]), {.timeout = options_.timeout});
      started.push_back(s);
    }
  } catch (...) {
    rethrow_with_context(
        std::current_exception(),
        fmt::format("{}: {} to server '{}' failed", who(), op, servers_[started.size()]));
  }
  return wait_all_or_first_error(futures, options_.timeout, [&](size_t s) {
    return fmt::format("{}: {} from server '{}'", who(), op, servers_[s]);
  });
}

void ParameterServerClient::pull() {
  COHORT_CHECK(!finished_, "{}: pull after finish()", who());
  std::vector<rpc::Message> msgs(servers_.size());
  for (auto& m : msgs) {
    WireWriter w;
    w.u32(static_cast<uint32_t>(worker_));
    w.i64(clock_);
    m.set_header(w.take());
  }
  auto replies =
      call_all(ps_protocol::kPull, std::move(msgs), fmt::format("pull of step {}", clock_));
  NoGradGuard no_grad;
  for (size_t s = 0; s < servers_.size(); ++s) {
    try {
      TensorMessageReader r(replies[s], "ps.pull reply");
      versions_[s] = r.header().i64();
      const auto& mine = assignment_.params_of[s];
      const uint32_t count = r.header().u32();
      COHORT_CHECK(count == mine.size(), "{} tensors for a shard of {}", count, mine.size());
      for (size_t i : mine) r.next_into(params_[i].second, params_[i].first);
      r.expect_end();
    } catch (...) {
      rethrow_with_context(
          std::current_exception(),
          fmt::format("{}: pull of step {} from server '{}'", who(), clock_, servers_[s]));
    }
  }
}

void ParameterServerClient::push() {
  COHORT_CHECK(!finished_, "{}: push after finish()", who());
  std::vector<rpc::Message> msgs;
  msgs.reserve(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    TensorMessageWriter w;
    w.header().u32(static_cast<uint32_t>(worker_));
    w.header().i64(clock_);
    std::vector<Tensor> grads;
    for (size_t i : assignment_.params_of[s]) grads.push_back(params_[i].second.grad());
    w.add_all(grads);  // borrowed: the gradients stay untouched until the replies are in
    msgs.push_back(w.finish());
  }
  call_all(ps_protocol::kPush, std::move(msgs), fmt::format("push of step {}", clock_));
  ++clock_;
}

void ParameterServerClient::finish() {
  if (finished_) return;
  std::vector<rpc::Message> msgs(servers_.size());
  for (auto& m : msgs) {
    WireWriter w;
    w.u32(static_cast<uint32_t>(worker_));
    m.set_header(w.take());
  }
  call_all(ps_protocol::kFinish, std::move(msgs), "finish");
  finished_ = true;
}

TensorDict ParameterServerClient::full_state_dict() {
  TensorDict weights;
  if (!finished_) {
    // As a pull of the next step: in sync mode that waits until every
    // trainer's last push has been applied on every server, so the state is
    // that of one completed step on all shards (a plain read could catch one
    // server before and another after the step).
    std::vector<rpc::Message> msgs(servers_.size());
    for (auto& m : msgs) {
      WireWriter w;
      w.u32(static_cast<uint32_t>(worker_));
      w.i64(clock_);
      m.set_header(w.take());
    }
    auto replies = call_all(ps_protocol::kPull, std::move(msgs),
                            fmt::format("full_state_dict at step {}", clock_));
    for (size_t s = 0; s < servers_.size(); ++s) {
      TensorMessageReader r(replies[s], "ps.pull reply");
      r.header().i64();
      const auto& mine = assignment_.params_of[s];
      auto ts = r.next_all(mine.size());
      for (size_t k = 0; k < mine.size(); ++k) weights.insert(params_[mine[k]].first, ts[k]);
    }
  } else {
    auto replies = call_all(ps_protocol::kState, std::vector<rpc::Message>(servers_.size()),
                            "full_state_dict");
    for (size_t s = 0; s < servers_.size(); ++s) {
      TensorMessageReader r(replies[s], "ps.state reply");
      for (auto& [name, t] : r.next_dict()) weights.insert(name, t);
      r.expect_end();
    }
  }
  // The model's own order and buffers, with the servers' weights for the
  // parameters, also under a second name of a tied parameter (a GPT's
  // lm_head.weight is its transformer.wte.weight: the same data).
  std::unordered_map<const void*, const std::string*> param_at;
  for (const auto& [name, t] : params_) param_at.emplace(t.raw_data(), &name);
  TensorDict out;
  for (const auto& [name, t] : model_->state_dict()) {
    const Tensor* w = weights.find(name);
    if (w == nullptr) {
      auto it = param_at.find(t.raw_data());
      if (it != param_at.end() && weights.find(*it->second) != nullptr &&
          weights.find(*it->second)->sizes() == t.sizes())
        w = weights.find(*it->second);
    }
    out.insert(name, w != nullptr ? *w : t.detach().clone());
  }
  for (const auto& [name, t] : params_)
    COHORT_CHECK(weights.contains(name), "{}: full_state_dict: no server holds '{}'", who(), name);
  return out;
}

void ParameterServerClient::load_full_state_dict(const TensorDict& state) {
  // Check and load locally first: a bad state fails before any server changed.
  model_->load_state_dict(state);
  std::vector<rpc::Message> msgs;
  for (size_t s = 0; s < servers_.size(); ++s) {
    TensorDict shard;
    for (size_t i : assignment_.params_of[s])
      shard.insert(params_[i].first, state.at(params_[i].first));
    TensorMessageWriter w;
    w.add_dict(shard);
    msgs.push_back(w.finish());
  }
  call_all(ps_protocol::kLoad, std::move(msgs), "load_full_state_dict");
}

void ParameterServerClient::load_optimizer_state_dicts(const std::vector<TensorDict>& states) {
  COHORT_CHECK(states.size() == servers_.size(),
               "{}: load_optimizer_state_dicts: {} states for {} servers", who(), states.size(),
               servers_.size());
  std::vector<rpc::Message> msgs;
  for (const TensorDict& d : states) {
    TensorMessageWriter w;
    w.add_dict(d);
    msgs.push_back(w.finish());
  }
  call_all(ps_protocol::kLoadOptim, std::move(msgs), "load_optimizer_state_dicts");
}

std::vector<TensorDict> ParameterServerClient::optimizer_state_dicts() {
  auto replies = call_all(ps_protocol::kOptim, std::vector<rpc::Message>(servers_.size()),
                          "optimizer_state_dicts");
  std::vector<TensorDict> out;
  for (auto& m : replies) {
    TensorMessageReader r(m, "ps.optim reply");
    out.push_back(r.next_dict());
  }
  return out;
}

std::vector<ParameterServerStats> ParameterServerClient::server_stats() {
  auto replies =
      call_all(ps_protocol::kStats, std::vector<rpc::Message>(servers_.size()), "server_stats");
  std::vector<ParameterServerStats> out;
  for (auto& m : replies) {
    WireReader r(m.header(), "ps.stats reply");
    out.push_back(ps_protocol::read_stats(r));
  }
  return out;
}

}  // namespace cohort::parallel
