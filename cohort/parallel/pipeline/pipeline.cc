#include "cohort/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <unordered_set>

#include "cohort/autograd/engine.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/pipeline/partition.h"

namespace cohort::parallel::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Row ranges of m micro-batches over n rows: the first n % m get one more.
std::vector<std::pair<int64_t, int64_t>> split_rows(int64_t n, int m) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t off = 0;
  for (int i = 0; i < m; ++i) {
    const int64_t len = n / m + (i < n % m ? 1 : 0);
    out.push_back({off, len});
    off += len;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& t, int m) {
  std::vector<Tensor> out;
  if (!t.defined()) return out;
  for (auto [off, len] : split_rows(t.size(0), m)) out.push_back(t.narrow(0, off, len));
  return out;
}

distributed::ProcessGroup& checked_pp(const PipelineGrid& grid) {
  COHORT_CHECK(grid.pp != nullptr, "Pipeline: the grid has no pipeline group");
  return *grid.pp;
}

}  // namespace

Tensor nll_loss_fn(const Tensor& output, const Tensor& target) { return nll_loss(output, target); }
Tensor mse_loss_fn(const Tensor& output, const Tensor& target) { return mse_loss(output, target); }

// One (micro-batch, chunk) of a step.
struct Pipeline::MicroState {
  Tensor input;        // received activation (a leaf) or the micro-batch (first stage)
  Tensor output;       // the stage's output, with its graph (not on the last stage)
  Tensor loss;         // last stage: the scaled loss, with its graph
  Tensor grad_output;  // received gradient of output
  Tensor grad_input;   // gradient of input, to send
  autograd::DeferredGradients deferred;  // ZB: the W half
  int64_t bytes = 0;                     // layer outputs kept for backward
};

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, PipelineGrid grid,
                   PipelineOptions options)
    : grid_(std::move(grid)), options_(std::move(options)), channel_(checked_pp(grid_)) {
  COHORT_CHECK(model != nullptr, "Pipeline: the model is null");
  if (!grid_.world) grid_.world = grid_.pp;
  rank_ = grid_.pp->rank();
  const int p = grid_.pp->size();
  plan_ = make_schedule(options_.schedule, p, options_.micro_batches, options_.virtual_stages);
  validate_schedule(plan_);
  const int S = plan_.num_stages();
  const int64_t n = static_cast<int64_t>(model->size());
  COHORT_CHECK(n >= S,
               "Pipeline (rank {}): schedule {} cuts the model into {} stages ({} ranks x {} "
               "virtual stages) but the model has only {} children; use fewer stages or virtual "
               "stages",
               rank_, schedule_name(options_.schedule), S, p, plan_.chunks, n);
  if (!options_.cut_points.empty()) {
    starts_ = starts_from_cut_points(options_.cut_points, S, n);
  } else if (options_.sample_input.defined()) {
    // Timings differ between processes: world rank 0 decides for everyone.
    Tensor cuts = Tensor::zeros({S + 1}, kInt64);
    if (grid_.world->rank() == 0) {
      std::vector<int64_t> s = balanced_cuts(measure_layer_costs(*model, options_.sample_input), S);
      for (int i = 0; i <= S; ++i) cuts.data_ptr<int64_t>()[i] = s[static_cast<size_t>(i)];
    }
    grid_.world->broadcast(cuts, {.root = 0});
    starts_ = cuts.to_vector<int64_t>();
  } else {
    std::vector<double> costs;
    for (const auto& c : model->children()) costs.push_back(double(c->num_parameters()) + 1.0);
    starts_ = balanced_cuts(costs, S);
  }
  for (int c = 0; c < plan_.chunks; ++c)
    stages_.push_back(make_stage(*model, starts_, plan_.stage_of(rank_, c)));
  auto children = model->named_children();
  if (!options_.layer_names.empty()) {
    COHORT_CHECK(static_cast<int64_t>(options_.layer_names.size()) == n,
                 "Pipeline (rank {}): {} layer names for a model of {} children", rank_,
                 options_.layer_names.size(), n);
    for (int64_t i = 0; i < n; ++i)
      layer_names_[children[static_cast<size_t>(i)].first] =
          options_.layer_names[static_cast<size_t>(i)];
  }
  int stage = 0;
  for (int64_t i = 0; i < n; ++i) {
    while (i >= starts_[static_cast<size_t>(stage) + 1]) ++stage;
    const auto& [name, child] = children[static_cast<size_t>(i)];
    for (const auto& [key, t] : child->state_dict())
      layout_.push_back(
          {full_name(name + "." + key), t.sizes(), t.dtype(), plan_.rank_of_stage(stage)});
  }
  setup_tied(options_.tied_parameters);
  if (options_.zero_stage != 0) {
    setup_zero();
  } else if (grid_.dp) {
    broadcast_from_replica_zero();
  }
}

void Pipeline::setup_zero() {
  COHORT_CHECK(options_.zero_stage == 1 || options_.zero_stage == 2,
               "Pipeline (rank {}): zero_stage {} is not supported under the pipeline; use 1 "
               "(optimizer state sharded over each stage's replicas) or 2 (+ gradients), or 0 "
               "(plain data parallel); stage 3 (parameters sharded) runs with "
               "ShardedDataParallel without a pipeline",
               rank_, options_.zero_stage);
  COHORT_CHECK(grid_.dp != nullptr,
               "Pipeline (rank {}): zero_stage {} shards each stage over its data-parallel "
               "replicas, but the grid has 1 replica ({} ranks in {} stages); use more ranks "
               "than stages, or zero_stage 0",
               rank_, options_.zero_stage, grid_.world->size(), grid_.stages);
  // This rank's stages (chunks) as one module, each layer (a stage's child)
  // a unit: the reduce_scatters and all_gathers go layer by layer.
  auto holder = std::make_shared<nn::Sequential>();
  for (const auto& s : stages_) holder->push_back(s);
  ZeroOptions zo;
  zo.stage = options_.zero_stage;
  zo.unit_policy = [](const std::string& path, const nn::Module&) {
    return std::count(path.begin(), path.end(), '.') == 1;
  };
  zo.broadcast_buffers = false;  // as without ZeRO: buffers only at construction
  // Collective over dp: verifies the replicas hold the same stages and
  // broadcasts replica 0's state (broadcast_from_replica_zero's part).
  zero_ = std::make_shared<ShardedDataParallel>(holder, grid_.dp, std::move(zo));
}

std::string Pipeline::full_name(const std::string& stage_key) const {
  if (layer_names_.empty()) return stage_key;
  const size_t dot = stage_key.find('.');
  auto it = layer_names_.find(stage_key.substr(0, dot));
  if (it == layer_names_.end()) return stage_key;
  return dot == std::string::npos ? it->second : it->second + stage_key.substr(dot);
}

void Pipeline::setup_tied(const std::vector<std::vector<std::string>>& groups) {
  const nn::NamedTensors mine = named_parameters();
  for (size_t k = 0; k < groups.size(); ++k) {
    std::vector<int> holders;
    for (const std::string& name : groups[k]) {
      auto it = std::find_if(layout_.begin(), layout_.end(),
                             [&](const Entry& e) { return e.name == name; });
      COHORT_CHECK(it != layout_.end(),
                   "Pipeline (rank {}): tied parameter '{}' is not in the model's state (the "
                   "first key is '{}')",
                   rank_, name, layout_.empty() ? std::string() : layout_.front().name);
      holders.push_back(it->rank);
    }
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    // This rank's copy: every member held here must be the same tensor.
    Tensor local;
    for (const auto& [name, t] : mine) {
      if (std::find(groups[k].begin(), groups[k].end(), name) == groups[k].end()) continue;
      COHORT_CHECK(!local.defined() || local.unsafe_impl() == t.unsafe_impl(),
                   "Pipeline (rank {}): tied parameters {} are held on this rank as different "
                   "tensors; tie them in the model (one tensor)",
                   rank_, fmt::join(groups[k], ", "));
      local = t;
    }
    // Tied members that are buffers or parameters outside this rank's
    // named_parameters (deduplicated away) need no copy of their own here.
    if (holders.size() < 2) continue;
    auto group =
        grid_.pp->new_group(holders, {.name = fmt::format("{}/tied{}", grid_.pp->name(), k)});
    if (group == nullptr) continue;
    COHORT_CHECK(local.defined(), "Pipeline (rank {}): tied parameters {} hold no tensor here",
                 rank_, fmt::join(groups[k], ", "));
    NoGradGuard no_grad;
    COHORT_CHECK(local.is_contiguous(), "Pipeline: tied parameter {} is not contiguous",
                 groups[k].front());
    group->broadcast(local, {.root = 0});
    if (rank_ != holders.front()) tied_copies_.push_back(local.unsafe_impl());
    tied_.push_back({std::move(group), local});
  }
}

void Pipeline::sum_tied_gradients() {
  for (Tied& t : tied_) {
    if (!t.tensor.grad().defined()) t.tensor.set_grad(zeros_like(t.tensor));
    Tensor g = t.tensor.grad();
    if (g.is_contiguous()) {
      t.group->all_reduce(g, {.op = distributed::ReduceOp::kSum});
    } else {
      Tensor c = g.contiguous();
      t.group->all_reduce(c, {.op = distributed::ReduceOp::kSum});
      g.copy_(c);
    }
  }
}

Pipeline::~Pipeline() = default;

std::vector<Tensor> Pipeline::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

nn::NamedTensors Pipeline::named_parameters() const {
  nn::NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;  // a tensor tied across this rank's stages once
  for (const auto& s : stages_)
    for (auto& [name, t] : s->named_parameters())
      if (seen.insert(t.unsafe_impl()).second) out.push_back({full_name(name), t});
  return out;
}

void Pipeline::zero_grad(bool set_to_none) {
  if (zero_) {
    zero_->zero_grad_shards();
    return;
  }
  for (const auto& s : stages_) s->zero_grad(set_to_none);
}

void Pipeline::train(bool on) {
  for (const auto& s : stages_) s->train(on);
}

double Pipeline::step(const Tensor& input, const Tensor& target, const LossFn& loss_fn) {
  COHORT_CHECK(!broken_, "Pipeline (rank {}): a previous step failed; the pipeline is unusable",
               rank_);
  const int m = plan_.micro_batches;
  COHORT_CHECK(!is_first() || input.defined(),
               "Pipeline::step (rank {}): the first stage needs "
               "the input",
               rank_);
  COHORT_CHECK(!is_last() || target.defined(),
               "Pipeline::step (rank {}): the last stage needs "
               "the target",
               rank_);
  COHORT_CHECK(!is_last() || loss_fn, "Pipeline::step (rank {}): no loss function", rank_);
  int64_t batch = 0;
  if (is_last())
    batch = target.size(0);
  else if (is_first())
    batch = input.size(0);
  COHORT_CHECK(batch == 0 || batch >= m,
               "Pipeline::step (rank {}): a batch of {} rows cannot make {} micro-batches", rank_,
               batch, m);
  COHORT_CHECK(!(is_first() && is_last()) || input.size(0) == target.size(0),
               "Pipeline::step (rank {}): input has {} rows, target {}", rank_, input.size(0),
               target.size(0));
  std::vector<Tensor> inputs = is_first() ? split(input, m) : std::vector<Tensor>{};
  std::vector<Tensor> targets = is_last() ? split(target, m) : std::vector<Tensor>{};
  run_plan(plan_, inputs, targets, &loss_fn, nullptr, batch);
  // The loss, from the last stage to every rank (and averaged over replicas).
  Tensor loss = Tensor::scalar(stats_loss_, kFloat64);
  try {
    sum_tied_gradients();
    grid_.pp->broadcast(loss, {.root = plan_.ranks - 1});
    if (grid_.dp) {
      grid_.dp->all_reduce(loss, {.op = distributed::ReduceOp::kAvg});
      if (zero_) {
        zero_->reduce_gradients();
      } else {
        average_over_replicas();
      }
    }
  } catch (const std::exception& e) {
    fail(e, Action{ActionKind::kForward, -1, -1, -1}, SIZE_MAX);
  }
  return loss.item<double>();
}

Tensor Pipeline::forward(const Tensor& input) {
  COHORT_CHECK(!broken_, "Pipeline (rank {}): a previous step failed; the pipeline is unusable",
               rank_);
  COHORT_CHECK(input.defined() && input.dim() >= 1,
               "Pipeline::forward (rank {}): pass the batch (or a tensor of its rows) on every "
               "rank: its size decides the micro-batches",
               rank_);
  const int m = static_cast<int>(std::min<int64_t>(plan_.micro_batches, input.size(0)));
  auto it = forward_plans_.find(m);
  if (it == forward_plans_.end()) {
    SchedulePlan plan = make_forward_schedule(plan_.ranks, m, plan_.chunks);
    validate_schedule(plan);
    it = forward_plans_.emplace(m, std::move(plan)).first;
  }
  std::vector<Tensor> inputs = is_first() ? split(input, m) : std::vector<Tensor>{};
  std::vector<Tensor> outputs(static_cast<size_t>(m));
  NoGradGuard no_grad;
  run_plan(it->second, inputs, {}, nullptr, &outputs, input.size(0));
  if (!is_last()) return Tensor();
  return m == 1 ? outputs[0] : cat(outputs, 0);
}

void Pipeline::run_plan(const SchedulePlan& plan, const std::vector<Tensor>& inputs,
                        const std::vector<Tensor>& targets, const LossFn* loss_fn,
                        std::vector<Tensor>* outputs, int64_t batch) {
  ++step_count_;
  const auto t0 = Clock::now();
  stats_ = PipelineStats{};
  stats_loss_ = 0;
  in_flight_ = 0;
  in_flight_bytes_ = 0;
  channel_.reset_timers();
  std::vector<MicroState> st(static_cast<size_t>(plan.micro_batches * plan.chunks));
  const auto& list = plan.actions[static_cast<size_t>(rank_)];
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    try {
      run_action(plan, a, st, inputs, targets, loss_fn, outputs, batch);
    } catch (const std::exception& e) {
      fail(e, a, i);
    }
    recent_[recent_count_++ % recent_.size()] = {step_count_, i, a};
    ++stats_.actions;
  }
  try {
    channel_.wait_sends();
  } catch (const std::exception& e) {
    fail(e, Action{ActionKind::kSendForward, -1, -1, -1}, list.size());
  }
  stats_.step_seconds = seconds_since(t0);
  stats_.recv_seconds = channel_.recv_seconds();
  stats_.send_wait_seconds = channel_.send_wait_seconds();
  stats_.bubble_fraction =
      stats_.step_seconds > 0 ? 1.0 - stats_.compute_seconds / stats_.step_seconds : 0.0;
}

void Pipeline::run_action(const SchedulePlan& plan, const Action& a, std::vector<MicroState>& st,
                          const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
                          const LossFn* loss_fn, std::vector<Tensor>* outputs, int64_t batch) {
  const int S = plan.num_stages();
  const int s = plan.stage_of(rank_, a.chunk);
  auto at = [&](int mb, int chunk) -> MicroState& {
    return st[static_cast<size_t>(mb * plan.chunks + chunk)];
  };
  MicroState& ms = at(a.mb, a.chunk);
  const bool training = outputs == nullptr;
  auto backward_roots = [&](std::vector<Tensor>& roots, std::vector<Tensor>& grads) {
    if (s == S - 1) {
      roots = {ms.loss};
      grads = {Tensor()};
    } else {
      COHORT_CHECK(ms.grad_output.defined(), "no gradient for the output of micro-batch {}", a.mb);
      roots = {ms.output};
      grads = {ms.grad_output};
    }
  };
  // After B or BW: the input's gradient, handed to a local previous stage.
  auto take_input_grad = [&]() {
    if (s > 0 && ms.input.defined() && ms.input.requires_grad()) ms.grad_input = ms.input.grad();
    if (s > 0 && plan.rank_of_stage(s - 1) == rank_)
      at(a.mb, plan.chunk_of_stage(s - 1)).grad_output = ms.grad_input;
    ms.grad_output = Tensor();
  };
  auto release = [&]() {
    ms.output = Tensor();
    ms.loss = Tensor();
    ms.input = Tensor();
    --in_flight_;
    in_flight_bytes_ -= ms.bytes;
  };
  const auto t0 = Clock::now();
  switch (a.kind) {
    case ActionKind::kForward: {
      Tensor x = s == 0 ? inputs[static_cast<size_t>(a.mb)] : ms.input;
      COHORT_CHECK(x.defined(), "no input for micro-batch {}", a.mb);
      std::optional<EnableGradGuard> grad_on;
      if (training) grad_on.emplace();
      int64_t bytes = x.nbytes();
      for (const auto& child : stages_[static_cast<size_t>(a.chunk)]->children()) {
        x = child->forward(x);
        bytes += static_cast<int64_t>(x.nbytes());
      }
      if (s + 1 < S) {
        ms.output = x;
        if (plan.rank_of_stage(s + 1) == rank_) {
          Tensor next = x.detach();
          if (training) next.set_requires_grad(true);
          at(a.mb, plan.chunk_of_stage(s + 1)).input = next;
        }
      } else if (training) {
        const Tensor& y = targets[static_cast<size_t>(a.mb)];
        Tensor loss = (*loss_fn)(x, y);
        COHORT_CHECK(loss.numel() == 1, "the loss function returned {} elements, not 1",
                     loss.numel());
        ms.loss = mul(loss, double(y.size(0)) / double(batch));
        stats_loss_ += ms.loss.item<double>();
      } else {
        (*outputs)[static_cast<size_t>(a.mb)] = x;
      }
      if (training) {
        ms.bytes = bytes;
        stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++in_flight_);
        in_flight_bytes_ += bytes;
        stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, in_flight_bytes_);
      }
      stats_.compute_seconds += seconds_since(t0);
      break;
    }
    case ActionKind::kBackward: {
      std::vector<Tensor> roots, grads;
      backward_roots(roots, grads);
      if (roots[0].requires_grad()) autograd::run_backward(roots, grads);
      take_input_grad();
      release();
      stats_.compute_seconds += seconds_since(t0);
      break;
    }
    case ActionKind::kBackwardInput: {
      std::vector<Tensor> roots, grads;
      backward_roots(roots, grads);
      std::vector<Tensor> wrt;
      if (s > 0 && ms.input.requires_grad()) wrt.push_back(ms.input);
      if (roots[0].requires_grad()) ms.deferred = autograd::run_backward_split(roots, grads, wrt);
      take_input_grad();
      // The graph lives on in `deferred` until W; drop the handles now.
      ms.output = Tensor();
      ms.loss = Tensor();
      ms.input = Tensor();
      stats_.compute_seconds += seconds_since(t0);
      break;
    }
    case ActionKind::kBackwardWeight:
      ms.deferred.run();
      ms.deferred = autograd::DeferredGradients();
      release();
      stats_.compute_seconds += seconds_since(t0);
      break;
    case ActionKind::kSendForward:
      channel_.send(ms.output.detach(), {false, a.mb, s + 1, step_count_}, a.peer);
      break;
    case ActionKind::kRecvForward: {
      Tensor t = channel_.recv({false, a.mb, s, step_count_}, a.peer);
      if (training) t.set_requires_grad(true);
      ms.input = t;
      break;
    }
    case ActionKind::kSendBackward:
      COHORT_CHECK(ms.grad_input.defined(),
                   "no input gradient for micro-batch {} (does the "
                   "stage's output depend on its input?)",
                   a.mb);
      channel_.send(ms.grad_input, {true, a.mb, s - 1, step_count_}, a.peer);
      ms.grad_input = Tensor();
      break;
    case ActionKind::kRecvBackward: {
      Shape shape = ms.output.defined() ? ms.output.sizes() : Shape{};
      ms.grad_output = channel_.recv({true, a.mb, s, step_count_}, a.peer,
                                     ms.output.defined() ? &shape : nullptr);
      break;
    }
  }
}

void Pipeline::fail(const std::exception& e, const Action& a, size_t index) {
  broken_ = true;
  channel_.drop_sends();
  std::string what = index == SIZE_MAX ? "the loss/gradient exchange after the schedule"
                     : a.mb < 0        ? "waiting for the step's sends"
                                       : fmt::format("action {} {}", index, to_string(a));
  std::string recent;
  const size_t n = std::min(recent_count_, recent_.size());
  for (size_t k = recent_count_ - n; k < recent_count_; ++k) {
    const auto& [call, i, act] = recent_[k % recent_.size()];
    recent += fmt::format("{}{}:{} {}", recent.empty() ? "" : ", ", call, i, to_string(act));
  }
  std::string stages;
  for (int c = 0; c < plan_.chunks; ++c)
    stages += fmt::format("{}{}", c ? "," : "", plan_.stage_of(rank_, c));
  const std::string msg = fmt::format(
      "pipeline {} rank {} (stage {}, step {}): {} failed: {} [last actions: {}]", plan_.describe(),
      rank_, stages, step_count_, what, e.what(), recent.empty() ? "none" : recent);
  // The peers may wait on this rank: fail their ops now, not at the timeout.
  try {
    grid_.pp->abort(msg);
  } catch (...) {
  }
  if (dynamic_cast<const PeerLost*>(&e)) throw PeerLost(msg);
  if (dynamic_cast<const IoError*>(&e)) throw IoError(msg);
  if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(msg);
  if (dynamic_cast<const InvalidArgument*>(&e)) throw InvalidArgument(msg);
  if (dynamic_cast<const NotSupported*>(&e)) throw NotSupported(msg);
  throw Error(msg);
}

void Pipeline::average_over_replicas() {
  std::vector<Tensor> params = parameters();
  for (Tensor& p : params)
    if (!p.grad().defined()) p.set_grad(zeros_like(p));
  const size_t cap = std::max<size_t>(1, static_cast<size_t>(options_.bucket_cap_mb * 1024 * 1024));
  size_t begin = 0;
  while (begin < params.size()) {
    size_t end = begin, bytes = 0;
    int64_t numel = 0;
    while (end < params.size() && (end == begin || bytes + params[end].nbytes() <= cap)) {
      bytes += params[end].nbytes();
      numel += params[end].numel();
      ++end;
    }
    Tensor flat = Tensor::empty({numel}, params[begin].dtype());
    int64_t off = 0;
    for (size_t k = begin; k < end; ++k) {
      const int64_t n = params[k].numel();
      flat.narrow(0, off, n).copy_(params[k].grad().reshape({n}));
      off += n;
    }
    grid_.dp->all_reduce(flat, {.op = distributed::ReduceOp::kAvg});
    off = 0;
    for (size_t k = begin; k < end; ++k) {
      const int64_t n = params[k].numel();
      params[k].grad().copy_(flat.narrow(0, off, n).view(params[k].sizes()));
      off += n;
    }
    begin = end;
  }
}

void Pipeline::broadcast_from_replica_zero() {
  NoGradGuard no_grad;
  for (const auto& [name, t] : state_dict()) {
    COHORT_CHECK(t.is_contiguous(), "Pipeline: {} is not contiguous", name);
    grid_.dp->broadcast(t, {.root = 0});
  }
}

std::vector<Tensor> Pipeline::gradient_holders() const {
  std::vector<Tensor> out;
  for (Tensor& t : parameters()) {
    if (!zero_) {
      out.push_back(t);
    } else if (t.requires_grad()) {
      out.push_back(zero_->shard_of(t));  // its .grad: this rank's averaged chunk
    }
  }
  return out;
}

double Pipeline::grad_norm() {
  // A tied tensor's copies hold one gradient: only its first holder counts it.
  std::vector<Tensor> counted;
  const std::vector<Tensor> params = parameters();
  const std::vector<Tensor> holders = gradient_holders();
  size_t h = 0;
  for (const Tensor& t : params) {
    if (zero_ && !t.requires_grad()) continue;
    const Tensor& g = holders[h++];
    if (std::find(tied_copies_.begin(), tied_copies_.end(), t.unsafe_impl()) == tied_copies_.end())
      counted.push_back(g);
  }
  const double local = optim::grad_norm(counted);
  Tensor sq = Tensor::scalar(local * local, kFloat64);
  // With ZeRO each rank holds 1/R of its stage's gradients: the sum runs
  // over every rank.
  (zero_ ? grid_.world : grid_.pp)->all_reduce(sq, {.op = distributed::ReduceOp::kSum});
  return std::sqrt(sq.item<double>());
}

double Pipeline::clip_grad_norm(double max_norm) {
  const double total = grad_norm();
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (const Tensor& p : gradient_holders())
      if (p.grad().defined()) p.mutable_grad().mul_(coef);
  }
  return total;
}

TensorDict Pipeline::state_dict() const {
  TensorDict out;
  for (const auto& s : stages_)
    for (const auto& [key, t] : s->state_dict()) out.insert_or_assign(full_name(key), t);
  return out;
}

void Pipeline::load_state_dict(const TensorDict& dict) {
  std::vector<TensorDict> parts(stages_.size());
  std::string missing;
  for (size_t c = 0; c < stages_.size(); ++c) {
    for (const auto& [name, t] : stages_[c]->state_dict()) {
      const Tensor* v = dict.find(full_name(name));
      if (v == nullptr)
        missing += (missing.empty() ? "" : ", ") + full_name(name);
      else
        parts[c].insert(name, *v);
    }
  }
  COHORT_CHECK(missing.empty(),
               "Pipeline::load_state_dict (rank {}): missing keys of this rank's "
               "stages: {}",
               rank_, missing);
  for (size_t c = 0; c < stages_.size(); ++c) stages_[c]->load_state_dict(parts[c], true);
}

TensorDict Pipeline::full_state_dict() {
  TensorDict mine = state_dict();
  TensorDict out;
  for (const Entry& e : layout_) {
    if (e.rank == rank_) {
      const Tensor& t = mine.at(e.name);
      if (rank_ == 0)
        out.insert(e.name, t.clone());
      else
        grid_.pp->send(t.contiguous(), 0, {});
    } else if (rank_ == 0) {
      Tensor t = Tensor::empty(e.shape, e.dtype);
      grid_.pp->recv(t, e.rank, {});
      out.insert(e.name, t);
    }
  }
  return out;
}

}  // namespace cohort::parallel::pipeline
