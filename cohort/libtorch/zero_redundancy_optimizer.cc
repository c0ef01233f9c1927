// ZeRO stages 1 and 2 for torch::optim::Optimizer: the sharding, the
// gradient reduction to owners (stage 2; in step() or from backward's
// accumulator hooks) and the broadcast of each shard.
#include "cohort/libtorch/zero_redundancy_optimizer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <mutex>
#include <numeric>

#include "cohort/base/error.h"
#include "cohort/libtorch/ready_hook.h"
#include "cohort/parallel/join.h"

namespace cohort::libtorch {

// Stage 2's reductions launched from the gradient accumulators' post hooks,
// in reverse registration order on every rank.
struct ZeroRedundancyOptimizer::Overlap {
  std::vector<at::Tensor> params;
  std::vector<int> owner;
  ProcessGroup pg;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // null: no gradient
  std::vector<uintptr_t> hook_keys;
  std::mutex mu;
  std::vector<bool> ready;
  std::vector<Work> works;
  size_t next = 0;  // parameters [n - next, n) are launched
  size_t launched_in_backward = 0;

  Overlap(const std::vector<at::Tensor>& p, const std::vector<int>& own, ProcessGroup group)
      : params(p), owner(own), pg(std::move(group)) {
    accumulators.resize(params.size());
    hook_keys.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      accumulators[i] = torch::autograd::impl::grad_accumulator(params[i]);
      if (accumulators[i])
        hook_keys[i] = accumulators[i]->add_post_hook(
            std::make_unique<detail::ReadyHook>([this, i] { on_ready(i); }));
    }
    reset();
  }
  ~Overlap() {
    for (size_t i = 0; i < params.size(); ++i)
      if (accumulators[i]) accumulators[i]->del_post_hook(hook_keys[i]);
    for (Work& w : works) {
      if (!w.defined()) continue;
      try {
        w.wait();
      } catch (const std::exception&) {
        // Reported to whoever ran backward or step().
      }
    }
  }

  void reset() {
    // A parameter no backward reaches is ready from the start (zeros).
    ready.assign(params.size(), false);
    for (size_t i = 0; i < params.size(); ++i) ready[i] = accumulators[i] == nullptr;
    works.assign(params.size(), Work());
    next = 0;
    launched_in_backward = 0;
  }

  void launch(size_t i) {
    at::Tensor& g = params[i].mutable_grad();
    if (!g.defined()) g = at::zeros_like(params[i]);
    works[i] = pg.reduce(g, {.op = ReduceOp::kAvg, .root = owner[i]}, async_op);
    // Not ours: dropped now, freed once the reduction has sent it.
    if (owner[i] != pg.rank()) g.reset();
  }

  // Launches the ready parameters in order; returns how many.
  size_t launch_ready() {
    size_t count = 0;
    while (next < params.size() && ready[params.size() - 1 - next]) {
      launch(params.size() - 1 - next++);
      ++count;
    }
    return count;
  }

  void on_ready(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (ready[i]) {
      throw InvalidArgument(fmt::format(
          "ZeroRedundancyOptimizer (rank {}): parameter {} got a second gradient before step() "
          "(backward ran twice); with overlap_with_backward every backward reduces, so gradient "
          "accumulation over several backwards needs overlap_with_backward = false",
          pg.rank(), i));
    }
    ready[i] = true;
    try {
      launched_in_backward += launch_ready();
    } catch (...) {
      reset();
      throw;
    }
  }

  // step(): launches what backward did not reach and waits for every reduction.
  void finish() {
    std::lock_guard<std::mutex> lock(mu);
    std::fill(ready.begin(), ready.end(), true);
    for (size_t k = 0; k < params.size(); ++k) {
      const size_t i = params.size() - 1 - k;
      try {
        if (k >= next) launch(params.size() - 1 - next++);
        works[i].wait();
      } catch (...) {
        std::exception_ptr e = distributed::detail::with_context(
            std::current_exception(),
            fmt::format("ZeroRedundancyOptimizer: gradient reduction of parameter {} to its owner "
                        "rank {}",
                        i, owner[i]));
        reset();  // the Works' destructors wait for what was launched
        std::rethrow_exception(e);
      }
    }
    reset();
  }
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params, ProcessGroup pg,
                                                 Factory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  COHORT_CHECK(pg_.defined(), "ZeroRedundancyOptimizer: process group is undefined");
  COHORT_CHECK(options_.stage == 1 || options_.stage == 2,
               "ZeroRedundancyOptimizer: stage must be 1 or 2, got {}", options_.stage);
  COHORT_CHECK(make_optimizer != nullptr, "ZeroRedundancyOptimizer: make_optimizer is empty");
  COHORT_CHECK(!options_.overlap_with_backward || options_.stage == 2,
               "ZeroRedundancyOptimizer: overlap_with_backward needs stage 2 (stage 1 takes the "
               "gradients DDP averaged), got stage {}",
               options_.stage);
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    COHORT_CHECK(p.defined() && (p.device().is_cpu() || p.device().is_cuda()) && p.is_contiguous(),
                 "ZeroRedundancyOptimizer: parameter {} must be a defined, contiguous CPU or CUDA "
                 "tensor",
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
  if (options_.overlap_with_backward) overlap_ = std::make_unique<Overlap>(params_, owner_, pg_);
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;
ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(ZeroRedundancyOptimizer&&) noexcept = default;
ZeroRedundancyOptimizer& ZeroRedundancyOptimizer::operator=(ZeroRedundancyOptimizer&&) noexcept =
    default;

size_t ZeroRedundancyOptimizer::reductions_launched_in_backward() const {
  if (!overlap_) return 0;
  std::lock_guard<std::mutex> lock(overlap_->mu);
  return overlap_->launched_in_backward;
}

void ZeroRedundancyOptimizer::reduce_gradients() {
  if (overlap_) {
    overlap_->finish();
    return;
  }
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
    if (owner_[i] != pg_.rank()) params_[i].mutable_grad().reset();  // stage 2: not kept
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

void ZeroRedundancyOptimizer::refuse_overlap_under_join() const {
  if (overlap_ && join_enabled()) {
    throw NotSupported(
        "ZeroRedundancyOptimizer: a Join with overlap_with_backward is not supported (its "
        "reductions start in backward, before step() can tell the Join that this rank still "
        "trains); construct it without overlap_with_backward");
  }
}

Device ZeroRedundancyOptimizer::join_device() const {
  if (pg_.group()->backend() == distributed::BackendKind::kNccl) {
    throw NotSupported(
        "ZeroRedundancyOptimizer: Join over an nccl group is not supported; its exchanges use "
        "CPU tensors (use a native group)");
  }
  return kCPU;
}

void ZeroRedundancyOptimizer::check_joinable(const parallel::JoinOptions&, size_t position,
                                             size_t count) const {
  COHORT_CHECK(position > 0 || count == 1,
               "ZeroRedundancyOptimizer: list it after the DistributedDataParallel in the Join "
               "(Join({{&ddp, &optimizer}})): the first joinable tells the Join, before its "
               "collectives, that its rank still trains, and DDP's come before step()'s");
}

void ZeroRedundancyOptimizer::join_shadow_iteration() {
  refuse_overlap_under_join();
  if (options_.stage == 2) {
    // This rank's share of the average is zero.
    at::NoGradGuard no_grad;
    for (at::Tensor& p : params_) {
      at::Tensor& g = p.mutable_grad();
      if (g.defined()) {
        g.zero_();
      } else {
        g = at::zeros_like(p);
      }
    }
  }
  step_shards();
}

void ZeroRedundancyOptimizer::step() {
  refuse_overlap_under_join();
  parallel::Join::notify_join_context(*this);
  step_shards();
}

void ZeroRedundancyOptimizer::step_shards() {
  const int rank = pg_.rank();
  if (options_.stage == 2) reduce_gradients();
  local_->step();
  // Each shard from its owner, one broadcast per shard, dtype and device.
  at::NoGradGuard no_grad;
  for (size_t r = 0; r < shards_.size(); ++r) {
    if (shards_[r].empty()) continue;
    std::vector<size_t> rest = shards_[r];
    while (!rest.empty()) {
      const auto dtype = params_[rest.front()].scalar_type();
      const c10::Device device = params_[rest.front()].device();
      std::vector<size_t> same, other;
      for (size_t i : rest) {
        const at::Tensor& p = params_[i];
        (p.scalar_type() == dtype && p.device() == device ? same : other).push_back(i);
      }
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
