#include "cohort/parallel/distributed_optimizer/distributed_optimizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/parallel/parameter_server/rpc_fanout.h"
#include "cohort/parallel/parameter_server/tensor_message.h"
#include "cohort/parallel/parameter_server/wire_format.h"

namespace cohort::parallel {

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<rpc::RpcAgent> agent,
                                           std::vector<ParamRef> params,
                                           DistributedOptimizerOptions options)
    : agent_(std::move(agent)), params_(std::move(params)), options_(options) {
  COHORT_CHECK(agent_ != nullptr, "DistributedOptimizer: null agent");
  COHORT_CHECK(!params_.empty(), "DistributedOptimizer on '{}': no parameters", agent_->name());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto it = std::find(owners_.begin(), owners_.end(), params_[i].owner);
    if (it == owners_.end()) {
      owners_.push_back(params_[i].owner);
      refs_of_.emplace_back();
      it = owners_.end() - 1;
    }
    refs_of_[static_cast<size_t>(it - owners_.begin())].push_back(i);
  }
  // Unique without global state: this worker's name and this object's address
  // (distinct among live optimizers of this worker) and the creation time
  // (distinct from a released one that lived at the same address).
  id_ = fmt::format("{}/{}/{}", agent_->name(), static_cast<const void*>(this),
                    std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<rpc::Message> msgs;
  for (const auto& refs : refs_of_) {
    WireWriter w;
    w.str(id_);
    w.u32(static_cast<uint32_t>(refs.size()));
    for (size_t i : refs) w.str(params_[i].name);
    msgs.emplace_back(w.take());
  }
  call_owners("dist_optim.create", std::move(msgs), "create optimizer");
}

DistributedOptimizer::~DistributedOptimizer() {
  try {
    std::vector<rpc::Message> msgs;
    for (size_t o = 0; o < owners_.size(); ++o) {
      WireWriter w;
      w.str(id_);
      msgs.emplace_back(w.take());
    }
    call_owners("dist_optim.release", std::move(msgs), "release optimizer");
  } catch (const std::exception& e) {
    // An owner that died or an agent already shut down: nothing to release.
    COHORT_DEBUG("DistributedOptimizer '{}': release failed: {}", id_, e.what());
  }
}

std::vector<rpc::Message> DistributedOptimizer::call_owners(const char* fn,
                                                            std::vector<rpc::Message> msgs,
                                                            const char* op) {
  std::vector<rpc::Future> futures;
  for (size_t o = 0; o < owners_.size(); ++o) {
    try {
      futures.push_back(
          agent_->rpc_async(owners_[o], fn, std::move(msgs[o]), {.timeout = options_.timeout}));
    } catch (...) {
      rethrow_with_context(std::current_exception(),
                           fmt::format("DistributedOptimizer on '{}': {} on owner '{}' failed",
                                       agent_->name(), op, owners_[o]));
    }
  }
  return wait_all_or_first_error(futures, options_.timeout, [&](size_t o) {
    return fmt::format("DistributedOptimizer on '{}': {} on owner '{}'", agent_->name(), op,
                       owners_[o]);
  });
}

void DistributedOptimizer::step() {
  std::vector<rpc::Message> msgs;
  for (size_t o = 0; o < owners_.size(); ++o) {
    WireWriter w;
    w.str(id_);
    msgs.emplace_back(w.take());
  }
  call_owners("dist_optim.step", std::move(msgs), "step");
}

void DistributedOptimizer::zero_grad() {
  std::vector<rpc::Message> msgs;
  for (size_t o = 0; o < owners_.size(); ++o) {
    WireWriter w;
    w.str(id_);
    msgs.emplace_back(w.take());
  }
  call_owners("dist_optim.zero", std::move(msgs), "zero_grad");
}

std::vector<Tensor> DistributedOptimizer::fetch() {
  std::vector<rpc::Message> msgs;
  for (const auto& refs : refs_of_) {
    WireWriter w;
    w.u32(static_cast<uint32_t>(refs.size()));
    for (size_t i : refs) w.str(params_[i].name);
    msgs.emplace_back(w.take());
  }
  auto replies = call_owners("dist_optim.fetch", std::move(msgs), "fetch");
  std::vector<Tensor> out(params_.size());
  for (size_t o = 0; o < owners_.size(); ++o) {
    TensorMessageReader r(replies[o], "dist_optim.fetch reply");
    auto ts = r.next_all(refs_of_[o].size());
    for (size_t k = 0; k < ts.size(); ++k) out[refs_of_[o][k]] = ts[k];
  }
  return out;
}

}  // namespace cohort::parallel
