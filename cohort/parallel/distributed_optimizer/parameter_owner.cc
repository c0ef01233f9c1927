#include "cohort/parallel/distributed_optimizer/parameter_owner.h"

#include <fmt/format.h>

#include "cohort/base/error.h"
#include "cohort/parallel/parameter_server/tensor_message.h"
#include "cohort/parallel/parameter_server/wire_format.h"

namespace cohort::parallel {

struct ParameterOwner::State {
  std::string name;
  nn::NamedTensors params;
  OptimizerFactory make_optimizer;
  mutable std::mutex mu;
  std::map<std::string, std::unique_ptr<optim::Optimizer>> optimizers;
  int64_t steps = 0;

  const Tensor& param(const std::string& n) const {
    for (const auto& [pn, t] : params)
      if (pn == n) return t;
    throw InvalidArgument(
        fmt::format("parameter owner '{}': no parameter '{}' registered here", name, n));
  }
  optim::Optimizer& optimizer(const std::string& id) {
    auto it = optimizers.find(id);
    if (it == optimizers.end())
      throw InvalidArgument(fmt::format(
          "parameter owner '{}': no optimizer '{}' (never created, or released)", name, id));
    return *it->second;
  }
};

ParameterOwner::ParameterOwner(std::shared_ptr<rpc::RpcAgent> agent, nn::NamedTensors params,
                               OptimizerFactory make_optimizer)
    : state_(std::make_shared<State>()) {
  COHORT_CHECK(agent != nullptr, "ParameterOwner: null agent");
  COHORT_CHECK(make_optimizer != nullptr, "ParameterOwner '{}': no optimizer factory",
               agent->name());
  state_->name = agent->name();
  state_->params = std::move(params);
  state_->make_optimizer = std::move(make_optimizer);
  std::shared_ptr<State> st = state_;
  agent->register_function("dist_optim.create", [st](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "dist_optim.create request");
    std::string id = r.str();
    const uint32_t n = r.u32();
    std::vector<Tensor> ps;
    std::lock_guard<std::mutex> lock(st->mu);
    for (uint32_t i = 0; i < n; ++i) ps.push_back(st->param(r.str()));
    r.expect_end();
    COHORT_CHECK(st->optimizers.count(id) == 0, "parameter owner '{}': optimizer '{}' exists",
                 st->name, id);
    st->optimizers[id] = st->make_optimizer(std::move(ps));
    return rpc::Message();
  });
  agent->register_function("dist_optim.step", [st](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "dist_optim.step request");
    std::string id = r.str();
    std::lock_guard<std::mutex> lock(st->mu);
    st->optimizer(id).step();
    ++st->steps;
    return rpc::Message();
  });
  agent->register_function("dist_optim.zero", [st](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "dist_optim.zero request");
    std::string id = r.str();
    std::lock_guard<std::mutex> lock(st->mu);
    st->optimizer(id).zero_grad();
    return rpc::Message();
  });
  agent->register_function("dist_optim.release", [st](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "dist_optim.release request");
    std::string id = r.str();
    std::lock_guard<std::mutex> lock(st->mu);
    st->optimizers.erase(id);
    return rpc::Message();
  });
  agent->register_function("dist_optim.fetch", [st](const rpc::CallContext&, rpc::Message m) {
    WireReader r(m.header(), "dist_optim.fetch request");
    const uint32_t n = r.u32();
    std::vector<Tensor> out;
    std::lock_guard<std::mutex> lock(st->mu);
    for (uint32_t i = 0; i < n; ++i) out.push_back(st->param(r.str()).detach().clone());
    TensorMessageWriter w;
    w.add_all(out);
    return w.finish();
  });
}

size_t ParameterOwner::num_optimizers() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->optimizers.size();
}

int64_t ParameterOwner::num_steps() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->steps;
}

}  // namespace cohort::parallel
