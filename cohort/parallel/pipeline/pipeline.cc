#include "cohort/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/buckets.h"
#include "cohort/parallel/model_check.h"
#include "cohort/parallel/pipeline/partition.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::parallel::pipeline {

namespace {

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

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, PipelineGrid grid,
                   PipelineOptions options)
    : grid_(std::move(grid)), options_(std::move(options)), channel_(checked_pp(grid_)) {
  COHORT_CHECK(model != nullptr, "Pipeline: the model is null");
  if (!grid_.world) grid_.world = grid_.pp;
  rank_ = grid_.pp->rank();
  device_ = module_device(*model);
  channel_.set_device(device_);
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
    cuts = cuts.to(exchange_device(*grid_.world, device_));
    grid_.world->broadcast(cuts, {.root = 0});
    starts_ = cuts.cpu().to_vector<int64_t>();
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
  std::vector<Tensor> inputs = is_first() ? split(input.to(device_), m) : std::vector<Tensor>{};
  std::vector<Tensor> targets = is_last() ? split(target.to(device_), m) : std::vector<Tensor>{};
  run_plan(plan_, inputs, targets, &loss_fn, nullptr, batch);
  // The loss, from the last stage to every rank (and averaged over replicas).
  Tensor loss = Tensor::scalar(stats_loss_, kFloat64).to(exchange_device(*grid_.pp, device_));
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
  return loss.cpu().item<double>();
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
  std::vector<Tensor> inputs = is_first() ? split(input.to(device_), m) : std::vector<Tensor>{};
  std::vector<Tensor> outputs(static_cast<size_t>(m));
  NoGradGuard no_grad;
  run_plan(it->second, inputs, {}, nullptr, &outputs, input.size(0));
  if (!is_last()) return Tensor();
  return m == 1 ? outputs[0] : cat(outputs, 0);
}

void Pipeline::average_over_replicas() {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, t] : named_parameters()) {
    if (!t.grad().defined()) t.set_grad(zeros_like(t));
    params.push_back(t);
    names.push_back(name);
  }
  const size_t cap = std::max<size_t>(1, static_cast<size_t>(options_.bucket_cap_mb * 1024 * 1024));
  // DDP's buckets (buckets.h) over the parameters in reverse, so that they
  // come out in registration order: the first bucket holds the first
  // parameters, as the replicas' stages hold them.
  std::vector<BucketParam> sizes;
  for (size_t k = params.size(); k-- > 0;)
    sizes.push_back({params[k].nbytes(), static_cast<int>(params[k].dtype())});
  std::vector<std::vector<size_t>> groups = assign_buckets(sizes, cap);
  for (auto& g : groups)
    for (size_t& k : g) k = params.size() - 1 - k;
  // One bucket in flight: its flat copy is the only extra memory, and the
  // gradients are all there already (no backward to overlap).
  ReductionScheduler scheduler(
      std::move(names), groups,
      ReductionSchedulerOptions{.what = "Pipeline", .rank = rank_, .max_in_flight = 1},
      ReductionCallbacks{.launch = [&](size_t g) {
        const std::vector<size_t>& members = groups[g];
        int64_t numel = 0;
        for (size_t k : members) numel += params[k].numel();
        Tensor flat = Tensor::empty({numel}, params[members.front()].dtype(),
                                    params[members.front()].device());
        int64_t off = 0;
        for (size_t k : members) {
          const int64_t n = params[k].numel();
          flat.narrow(0, off, n).copy_(params[k].grad().reshape({n}));
          off += n;
        }
        distributed::Work work =
            grid_.dp->all_reduce(flat, {.op = distributed::ReduceOp::kAvg}, distributed::async_op);
        return BucketReduction{
            std::move(work),
            [&params, &members, flat] {
              int64_t at = 0;
              for (size_t k : members) {
                const int64_t n = params[k].numel();
                params[k].grad().copy_(flat.narrow(0, at, n).view(params[k].sizes()));
                at += n;
              }
            },
            flat.nbytes()};
      }});
  scheduler.arm();
  if (scheduler.mark_all_ready()) scheduler.wait_all();
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
  // With ZeRO each rank holds 1/R of its stage's gradients: the sum runs
  // over every rank.
  distributed::ProcessGroup& over = *(zero_ ? grid_.world : grid_.pp);
  Tensor sq = Tensor::scalar(local * local, kFloat64).to(exchange_device(over, device_));
  over.all_reduce(sq, {.op = distributed::ReduceOp::kSum});
  return std::sqrt(sq.cpu().item<double>());
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
      Tensor t = Tensor::empty(e.shape, e.dtype, device_);
      grid_.pp->recv(t, e.rank, {});
      out.insert(e.name, t);
    }
  }
  return out;
}

}  // namespace cohort::parallel::pipeline
