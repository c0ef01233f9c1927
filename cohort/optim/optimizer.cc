#include "cohort/optim/optimizer.h"

#include <algorithm>
#include <set>

#include "cohort/autograd/grad_mode.h"

namespace cohort::optim {

double ParamGroup::option(std::string_view name) const {
  for (const auto& [n, v] : options)
    if (n == name) return v;
  throw InvalidArgument(fmt::format("optimizer: param group has no option '{}'", name));
}

void ParamGroup::set_option(std::string_view name, double value) {
  for (auto& [n, v] : options)
    if (n == name) {
      v = value;
      return;
    }
  throw InvalidArgument(fmt::format("optimizer: param group has no option '{}'", name));
}

Optimizer::Optimizer(std::string name, Options defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::add_param_group(std::vector<Tensor> params, const Options& overrides) {
  COHORT_CHECK(!params.empty(), "{}: a param group needs at least one parameter", name_);
  ParamGroup group;
  group.options = defaults_;
  for (const auto& [n, v] : overrides) {
    bool found = false;
    for (auto& [dn, dv] : group.options)
      if (dn == n) dv = v, found = true;
    COHORT_CHECK(found, "{}: unknown option '{}'", name_, n);
  }
  check_options(group.options);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    COHORT_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()),
                 "{}: parameter {} of the group must be a defined floating leaf tensor", name_, i);
    for (const auto& g : groups_)
      for (const auto& q : g.params)
        COHORT_CHECK(!q.is_same(p), "{}: a parameter appears in more than one param group", name_);
    for (size_t j = 0; j < i; ++j)
      COHORT_CHECK(!params[j].is_same(p), "{}: parameter {} appears twice in the group", name_, i);
  }
  state_.resize(state_.size() + params.size());
  group.params = std::move(params);
  groups_.push_back(std::move(group));
}

ParamGroup& Optimizer::param_group(size_t g) {
  COHORT_CHECK(g < groups_.size(), "{}: no param group {} (have {})", name_, g, groups_.size());
  return groups_[g];
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.set_option("lr", lr);
}

size_t Optimizer::group_offset(size_t g) const {
  size_t off = 0;
  for (size_t i = 0; i < g; ++i) off += groups_[i].params.size();
  return off;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        p.mutable_grad().zero_();
    }
}

TensorDict Optimizer::state_dict() const {
  TensorDict out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [key, t] : state_[i]) out.insert(fmt::format("state.{}.{}", i, key), t);
  size_t offset = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [n, v] : groups_[g].options)
      out.insert(fmt::format("param_groups.{}.{}", g, n), Tensor::scalar(v, kFloat64));
    std::vector<int64_t> idx(groups_[g].params.size());
    for (size_t j = 0; j < idx.size(); ++j) idx[j] = static_cast<int64_t>(offset + j);
    offset += idx.size();
    out.insert(fmt::format("param_groups.{}.params", g), Tensor::from_vector(idx));
  }
  return out;
}

void Optimizer::load_state_dict(const TensorDict& dict) {
  std::set<std::string> used;
  auto need = [&](const std::string& key) -> const Tensor& {
    const Tensor* t = dict.find(key);
    COHORT_CHECK(t != nullptr, "{}: load_state_dict: missing key '{}'", name_, key);
    used.insert(key);
    return *t;
  };
  // Check everything first.
  std::vector<Options> new_options(groups_.size());
  size_t offset = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Tensor& idx = need(fmt::format("param_groups.{}.params", g));
    COHORT_CHECK(idx.dim() == 1 && idx.numel() == static_cast<int64_t>(groups_[g].params.size()),
                 "{}: load_state_dict: param group {} has {} parameters in the state dict and {} "
                 "in the optimizer",
                 name_, g, idx.numel(), groups_[g].params.size());
    std::vector<int64_t> want(groups_[g].params.size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = static_cast<int64_t>(offset + j);
    COHORT_CHECK(idx.to_vector<int64_t>() == want,
                 "{}: load_state_dict: param group {} numbers its parameters differently", name_,
                 g);
    offset += want.size();
    new_options[g] = groups_[g].options;
    for (auto& [n, v] : new_options[g]) {
      const Tensor& t = need(fmt::format("param_groups.{}.{}", g, n));
      COHORT_CHECK(t.numel() == 1,
                   "{}: load_state_dict: param_groups.{}.{} must be a scalar, got {}", name_, g, n,
                   shape_str(t.sizes()));
      v = t.item<double>();
    }
    check_options(new_options[g]);
  }
  std::vector<TensorDict> new_state(state_.size());
  offset = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<std::string> keys = state_keys(groups_[g]);
    for (size_t j = 0; j < groups_[g].params.size(); ++j) {
      size_t i = offset + j;
      const Tensor& p = groups_[g].params[j];
      for (const auto& key : keys) {
        std::string full = fmt::format("state.{}.{}", i, key);
        const Tensor* t = dict.find(full);
        if (t == nullptr) continue;
        used.insert(full);
        bool scalar = key == "step";
        COHORT_CHECK(scalar ? t->numel() == 1 : t->sizes() == p.sizes(),
                     "{}: load_state_dict: size mismatch for {}: the state dict has {}, the "
                     "parameter needs {}",
                     name_, full, shape_str(t->sizes()), scalar ? "[]" : shape_str(p.sizes()));
        // State lives with its parameter (a checkpoint written on a GPU loads
        // on the CPU and back); the step count stays a host scalar.
        Tensor c =
            scalar ? Tensor::empty({}, kFloat32) : Tensor::empty(p.sizes(), p.dtype(), p.device());
        new_state[i].insert(key, c.copy_(*t));
      }
    }
    offset += groups_[g].params.size();
  }
  for (const auto& [key, t] : dict)
    COHORT_CHECK(used.count(key), "{}: load_state_dict: unexpected key '{}'", name_, key);
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(new_options[g]);
  state_ = std::move(new_state);
}

int64_t state_key_param_index(std::string_view key) {
  constexpr std::string_view kPrefix = "state.";
  if (key.substr(0, kPrefix.size()) != kPrefix) return -1;
  const size_t dot = key.find('.', kPrefix.size());
  return std::stoll(std::string(key.substr(kPrefix.size(), dot - kPrefix.size())));
}

}  // namespace cohort::optim
