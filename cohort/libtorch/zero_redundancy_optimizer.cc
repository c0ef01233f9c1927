// ZeRO stages 1 and 2 for torch::optim::Optimizer: the sharding, the
// gradient reduction to owners (stage 2) and the broadcast of each shard.
#include "cohort/libtorch/zero_redundancy_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <numeric>

#include "cohort/base/error.h"

namespace cohort::libtorch {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params, ProcessGroup pg,
                                                 Factory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  COHORT_CHECK(pg_.defined(), "ZeroRedundancyOptimizer: process group is undefined");
  COHORT_CHECK(options_.stage == 1 || options_.stage == 2,
               "ZeroRedundancyOptimizer: stage must be 1 or 2, got {}", options_.stage);
  COHORT_CHECK(make_optimizer != nullptr, "ZeroRedundancyOptimizer: make_optimizer is empty");
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    COHORT_CHECK(p.defined() && p.device().is_cpu() && p.is_contiguous(),
                 "ZeroRedundancyOptimizer: parameter {} must be a defined, contiguous CPU tensor",
                 i);
    to_data_type(p.scalar_type(), "ZeroRedundancyOptimizer", "parameter " + std::to_string(i));
  }
  const int n = pg_.size();
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(n), 0);
  owner_.assign(params_.size(), 0);
  for (size_t i : order) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = static_cast<int>(r);
    load[r] += params_[i].numel();
  }
  shards_.assign(static_cast<size_t>(n), {});
  for (size_t i = 0; i < params_.size(); ++i) shards_[static_cast<size_t>(owner_[i])].push_back(i);
  std::vector<at::Tensor> mine;
  for (size_t i : shards_[static_cast<size_t>(pg_.rank())]) mine.push_back(params_[i]);
  local_ = make_optimizer(std::move(mine));
  COHORT_CHECK(local_ != nullptr, "ZeroRedundancyOptimizer: make_optimizer returned null");
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (at::Tensor& p : params_) {
    at::Tensor& g = p.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g.reset();
    } else {
      g = g.detach();
      g.zero_();
    }
  }
}

void ZeroRedundancyOptimizer::step() {
  const int rank = pg_.rank();
  if (options_.stage == 2) {
    // Average every gradient onto its owner; a parameter without a gradient
    // here (unused on this rank) takes part with zeros.
    std::vector<Work> works;
    works.reserve(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& g = params_[i].mutable_grad();
      if (!g.defined()) g = at::zeros_like(params_[i]);
      works.push_back(pg_.reduce(g, {.op = ReduceOp::kAvg, .root = owner_[i]}, async_op));
    }
    for (Work& w : works) w.wait();
    for (size_t i = 0; i < params_.size(); ++i)
      if (owner_[i] != rank) params_[i].mutable_grad().reset();  // stage 2: not kept
  }
  local_->step();
  // Each shard from its owner, one broadcast per shard and dtype.
  at::NoGradGuard no_grad;
  for (size_t r = 0; r < shards_.size(); ++r) {
    if (shards_[r].empty()) continue;
    std::vector<size_t> rest = shards_[r];
    while (!rest.empty()) {
      const auto dtype = params_[rest.front()].scalar_type();
      std::vector<size_t> same, other;
      for (size_t i : rest) (params_[i].scalar_type() == dtype ? same : other).push_back(i);
      std::vector<at::Tensor> parts;
      for (size_t i : same) parts.push_back(params_[i].reshape({-1}));
      at::Tensor flat = at::cat(parts);
      pg_.broadcast(flat, {.root = static_cast<int>(r)});
      if (static_cast<int>(r) != rank) {
        int64_t off = 0;
        for (size_t i : same) {
          params_[i].copy_(flat.narrow(0, off, params_[i].numel()).view(params_[i].sizes()));
          off += params_[i].numel();
        }
      }
      rest = std::move(other);
    }
  }
}

}  // namespace cohort::libtorch
