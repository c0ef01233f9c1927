#include "cohort/parallel/parameter_server/parameter_server_service.h"

#include <fmt/format.h>

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/parallel/parameter_server/ps_protocol.h"
#include "cohort/parallel/parameter_server/tensor_message.h"

namespace cohort::parallel {

ParameterServerService::ParameterServerService(std::shared_ptr<rpc::RpcAgent> agent,
                                               std::shared_ptr<ParameterServer> server,
                                               std::vector<std::string> trainers,
                                               ParameterServerServiceOptions options)
    : agent_(std::move(agent)),
      server_(std::move(server)),
      trainers_(std::move(trainers)),
      options_(options) {
  COHORT_CHECK(agent_ != nullptr && server_ != nullptr,
               "ParameterServerService: null agent or server");
  COHORT_CHECK(trainers_.size() == static_cast<size_t>(server_->options().num_workers),
               "{}: {} trainer names for {} workers", server_->options().name, trainers_.size(),
               server_->options().num_workers);
  COHORT_CHECK(agent_->options().num_handler_threads > static_cast<int>(trainers_.size()),
               "{}: the RPC agent has {} handler threads for {} trainers; pulls that wait for "
               "slower trainers hold a handler thread each, so it needs more than {} "
               "(RpcOptions::num_handler_threads)",
               server_->options().name, agent_->options().num_handler_threads, trainers_.size(),
               trainers_.size());
  register_handlers();
  monitor_ = std::thread([this] { monitor(); });
}

ParameterServerService::~ParameterServerService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

bool ParameterServerService::wait_done(std::chrono::milliseconds timeout) {
  return server_->wait_done(timeout);
}

void ParameterServerService::register_handlers() {
  namespace p = ps_protocol;
  std::shared_ptr<ParameterServer> server = server_;
  const std::string name = server_->options().name;
  agent_->register_function(p::kPull, [server](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "ps.pull request");
    const int worker = static_cast<int>(r.u32());
    const int64_t clock = r.i64();
    r.expect_end();
    PullResult pulled = server->pull(worker, clock);
    TensorMessageWriter w;
    w.header().i64(pulled.version);
    w.add_all(pulled.weights);
    return w.finish();
  });
  agent_->register_function(p::kPush, [server](const rpc::CallContext&, rpc::Message m) {
    TensorMessageReader r(m, "ps.push request");
    const int worker = static_cast<int>(r.header().u32());
    const int64_t clock = r.header().i64();
    std::vector<Tensor> grads = r.next_all(server->param_names().size());
    r.expect_end();
    server->push(worker, clock, std::move(grads));
    return rpc::Message();
  });
  agent_->register_function(p::kFinish, [server](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "ps.finish request");
    server->finish(static_cast<int>(r.u32()));
    return rpc::Message();
  });
  agent_->register_function(p::kState, [server](const rpc::CallContext&, rpc::Message) {
    TensorMessageWriter w;
    w.add_dict(server->state_dict());
    return w.finish();
  });
  agent_->register_function(p::kLoad, [server](const rpc::CallContext&, rpc::Message m) {
    TensorMessageReader r(m, "ps.load request");
    TensorDict d = r.next_dict();
    r.expect_end();
    server->load_state_dict(d);
    return rpc::Message();
  });
  agent_->register_function(p::kOptim, [server](const rpc::CallContext&, rpc::Message) {
    TensorMessageWriter w;
    w.add_dict(server->optimizer_state_dict());
    return w.finish();
  });
  agent_->register_function(p::kLoadOptim, [server](const rpc::CallContext&, rpc::Message m) {
    TensorMessageReader r(m, "ps.load_optim request");
    TensorDict d = r.next_dict();
    r.expect_end();
    server->load_optimizer_state_dict(d);
    return rpc::Message();
  });
  agent_->register_function(p::kStats, [server](const rpc::CallContext&, rpc::Message) {
    WireWriter w;
    ps_protocol::write_stats(w, server->stats());
    return rpc::Message(w.take());
  });
}

void ParameterServerService::monitor() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.probe_interval, [&] { return stop_; });
    if (stop_) break;
    if (server_->failure()) continue;  // nothing left to watch; wait to be stopped
    std::vector<int> workers = server_->awaited_workers();
    for (int w : server_->silent_workers(options_.probe_interval))
      if (std::find(workers.begin(), workers.end(), w) == workers.end()) workers.push_back(w);
    if (workers.empty()) continue;
    lock.unlock();
    try {
      probe(workers);
    } catch (const std::exception& e) {
      // The monitor never throws (a background thread); a failed probe round
      // is retried at the next interval.
      COHORT_WARN("{}: liveness probe failed: {}", server_->options().name, e.what());
    }
    lock.lock();
  }
}

void ParameterServerService::probe(const std::vector<int>& workers) {
  const auto& opts = server_->options();
  std::vector<rpc::Future> futures;
  for (int w : workers)
    futures.push_back(agent_->rpc_async(trainers_[static_cast<size_t>(w)], ps_protocol::kAlive,
                                        rpc::Message(), {.timeout = options_.probe_timeout}));
  // In ssp/async a trainer silent past the deadline is lost even if its
  // process still answers probes (hung in its loop); in sync the pulls'
  // own deadline reports it.
  std::vector<int> overdue;
  if (opts.mode != PsMode::kSync) overdue = server_->silent_workers(opts.timeout);
  for (size_t i = 0; i < workers.size(); ++i) {
    const int w = workers[i];
    try {
      futures[i].wait();
    } catch (const PeerLost& e) {
      server_->drop_worker(w, e.what());
      continue;
    } catch (const TimeoutError& e) {
      // A probe that times out says nothing certain (a loaded machine); the
      // silence rule below decides.
    } catch (const Error& e) {
      // The trainer answered with an error (e.g. ps.alive not registered
      // yet): it is alive.
    }
    if (std::find(overdue.begin(), overdue.end(), w) != overdue.end())
      server_->drop_worker(
          w, fmt::format("no pull or push for more than {} ms (the server's deadline)",
                         opts.timeout.count()));
  }
}

nn::NamedTensors shard_of(const nn::NamedTensors& params, const ShardAssignment& assignment,
                          int server) {
  COHORT_CHECK(assignment.num_params() == params.size(),
               "shard_of: the assignment covers {} parameters, the model has {}",
               assignment.num_params(), params.size());
  COHORT_CHECK(server >= 0 && server < assignment.num_servers(), "shard_of: server {} of {}",
               server, assignment.num_servers());
  nn::NamedTensors out;
  for (size_t i : assignment.params_of[static_cast<size_t>(server)]) out.push_back(params[i]);
  return out;
}

std::unique_ptr<ParameterServerService> serve_parameter_server(
    std::shared_ptr<rpc::RpcAgent> agent, const nn::Module& model,
    const std::vector<std::string>& servers, const std::vector<std::string>& trainers,
    int server_index, const OptimizerFactory& make_optimizer, ParameterServerOptions options,
    ParameterServerServiceOptions service_options) {
  COHORT_CHECK(server_index >= 0 && static_cast<size_t>(server_index) < servers.size(),
               "serve_parameter_server: server index {} of {} servers", server_index,
               servers.size());
  COHORT_CHECK(!trainers.empty(), "serve_parameter_server: no trainers");
  auto params = model.named_parameters();
  auto assignment = assign_shards(params, static_cast<int>(servers.size()));
  options.num_workers = static_cast<int>(trainers.size());
  options.worker_names = trainers;
  options.name = fmt::format("parameter server '{}'", servers[static_cast<size_t>(server_index)]);
  auto server = std::make_shared<ParameterServer>(shard_of(params, assignment, server_index),
                                                  make_optimizer, std::move(options));
  return std::make_unique<ParameterServerService>(std::move(agent), std::move(server), trainers,
                                                  service_options);
}

}  // namespace cohort::parallel
