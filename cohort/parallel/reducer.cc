#include "cohort/parallel/reducer.h"

#include <algorithm>
#include <unordered_map>

#include "cohort/autograd/engine.h"
#include "cohort/autograd/node.h"
#include "cohort/base/log.h"
#include "cohort/parallel/buckets.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/flat_layout.h"
#include "cohort/parallel/model_check.h"

namespace cohort::parallel {

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> params,
                 std::shared_ptr<distributed::ProcessGroup> pg, ReducerOptions options)
    : pg_(std::move(pg)), options_(std::move(options)) {
  COHORT_CHECK(pg_ != nullptr, "DistributedDataParallel: process group is null");
  COHORT_CHECK(options_.bucket_cap_bytes > 0, "DistributedDataParallel: bucket cap must be > 0");
  hook_registered_ = options_.comm_hook != nullptr;
  if (!options_.comm_hook) options_.comm_hook = allreduce_hook();
  for (auto& [name, t] : params) {
    if (!t.requires_grad()) continue;
    COHORT_CHECK(t.is_leaf(), "DistributedDataParallel: parameter '{}' is not a leaf", name);
    params_.push_back(Param{name, t, Tensor(), 0, GradHookHandle()});
  }
  build_buckets(options_.bucket_cap_bytes);
  had_grad_.assign(params_.size(), false);
  std::vector<std::string> names;
  for (const Param& p : params_) names.push_back(p.name);
  std::vector<std::vector<size_t>> groups;
  for (const Bucket& b : buckets_) groups.push_back(b.params);
  const size_t num_buckets = buckets_.size();
  scheduler_ = std::make_unique<ReductionScheduler>(
      std::move(names), std::move(groups),
      ReductionSchedulerOptions{
          .what = "DistributedDataParallel",
          .rank = pg_->rank(),
          .twice_hint = "backward ran twice through one forward, or a parameter is shared with "
                        "find_unused_parameters marking it unused",
          .unfinished_advice =
              "Construct DDP with find_unused_parameters = true when parts of the model take no "
              "part in some iterations, and make every output of forward take part in the loss"},
      ReductionCallbacks{.launch = [this](size_t i) { return launch(i); },
                         .on_ready = [this](size_t k) { restore_view(params_[k]); },
                         .describe =
                             [num_buckets](size_t i, int) {
                               return fmt::format(
                                   "DistributedDataParallel: gradient reduction of bucket {} of {}",
                                   i, num_buckets);
                             }});
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    // Keep whatever gradient the parameter already has; one without keeps
    // none until the first forward.
    Tensor g = p.tensor.grad();
    if (g.defined()) {
      p.view.copy_(g);
      p.tensor.set_grad(p.view);
    }
    p.hook = p.tensor.register_grad_ready_hook([this, i](Tensor&) { on_grad_ready(i); });
  }
}

Reducer::~Reducer() {
  for (Param& p : params_) p.hook.remove();
  // A reduction left half-way (an exception during backward): the scheduler
  // lets the launched ops end before their buffers go away.
  scheduler_.reset();
}

void Reducer::build_buckets(size_t cap_bytes) {
  std::vector<BucketParam> sizes;
  // A bucket holds one dtype on one device (a model split over two GPUs, as
  // the tutorials' ToyMpModel, reduces each device's gradients in its own
  // buckets, on that device).
  auto key = [](const Tensor& t) {
    const Device d = t.device();
    const int device = d.is_cpu() ? 0 : 1 + static_cast<int>(d.type()) * 64 + d.index();
    return static_cast<int>(t.dtype()) * 4096 + device;
  };
  for (const Param& p : params_) sizes.push_back({p.tensor.nbytes(), key(p.tensor)});
  std::vector<std::vector<size_t>> closed = assign_buckets(sizes, cap_bytes);
  for (auto& members : closed) {
    Bucket b;
    std::vector<int64_t> numels;
    for (size_t k : members) numels.push_back(params_[k].tensor.numel());
    // The unsharded form of ZeRO's flat layout: plain concatenation.
    FlatLayout layout(std::move(numels), 1);
    DType dtype = params_[members.front()].tensor.dtype();
    b.buffer =
        Tensor::zeros({layout.total_numel()}, dtype, params_[members.front()].tensor.device());
    for (size_t j = 0; j < members.size(); ++j) {
      Param& p = params_[members[j]];
      p.bucket = buckets_.size();
      p.view = layout.view(b.buffer, j, p.tensor.sizes());
    }
    b.params = std::move(members);
    buckets_.push_back(std::move(b));
  }
}

std::vector<std::vector<std::string>> Reducer::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(params_[k].name);
  }
  return out;
}

void Reducer::set_comm_hook(CommHookPtr hook) {
  std::lock_guard<std::mutex> lock(mu_);
  COHORT_CHECK(hook != nullptr, "DistributedDataParallel: register_comm_hook with a null hook");
  if (hook_registered_)
    throw_hook_registered_twice("DistributedDataParallel", *options_.comm_hook, *hook);
  COHORT_CHECK(!scheduler_->armed(),
               "DistributedDataParallel: register_comm_hook between forward and backward");
  options_.comm_hook = std::move(hook);
  hook_registered_ = true;
}

void Reducer::restore_view(Param& p) {
  Tensor g = p.tensor.grad();
  if (g.defined() && g.is_same(p.view)) return;
  if (g.defined()) {
    p.view.copy_(g);
  } else {
    p.view.zero_();
  }
  p.tensor.set_grad(p.view);
}

void Reducer::begin_iteration() {
  std::lock_guard<std::mutex> lock(mu_);
  scheduler_->throw_if_unfinished();
  scheduler_->reset();
  if (!window_open_) {
    // What "keeps the .grad it had" means for this step's unused parameters.
    for (size_t i = 0; i < params_.size(); ++i) had_grad_[i] = params_[i].tensor.grad().defined();
    kept_.clear();
    window_open_ = true;
  }
  for (Param& p : params_) restore_view(p);
}

void Reducer::keep_grad_if_unused(size_t index) {
  if (!had_grad_[index] || scheduler_->locally_used()[index]) return;
  for (const auto& [k, t] : kept_)
    if (k == index) return;
  kept_.emplace_back(index, params_[index].view.clone());
}

void Reducer::restore_unused_grads(const std::vector<uint8_t>& global_used) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (global_used[i] != 0) continue;
    Param& p = params_[i];
    if (!had_grad_[i]) {
      p.tensor.set_grad(Tensor());
      continue;
    }
    for (const auto& [k, t] : kept_) {
      if (k != i) continue;
      p.view.copy_(t);
      p.tensor.set_grad(p.view);
    }
  }
}

void Reducer::set_join_count(JoinCount count) {
  std::lock_guard<std::mutex> lock(mu_);
  join_count_ = std::move(count);
}

void Reducer::shadow_reduction() {
  std::lock_guard<std::mutex> lock(mu_);
  scheduler_->reset();
  for (Bucket& b : buckets_) b.buffer.zero_();
  shadowing_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{shadowing_};
  scheduler_->arm();
  if (scheduler_->mark_all_ready()) finalize();
}

void Reducer::skip_sync() {
  std::lock_guard<std::mutex> lock(mu_);
  scheduler_->disarm();
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.find_unused_parameters) {
    scheduler_->arm();
    return;
  }
  // Walk the graph from the outputs; parameters whose AccumulateGrad is not
  // reached will get no gradient in this backward.
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].tensor.unsafe_impl()] = i;
  std::vector<bool> used(params_.size(), false);
  std::vector<autograd::Node*> stack;
  std::unordered_map<autograd::Node*, bool> seen;
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    autograd::Edge e = autograd::gradient_edge(out);
    if (e.valid() && !seen[e.node.get()]) {
      seen[e.node.get()] = true;
      stack.push_back(e.node.get());
    }
  }
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    if (auto* acc = dynamic_cast<autograd::AccumulateGrad*>(n)) {
      auto it = index.find(acc->variable().unsafe_impl());
      if (it != index.end()) used[it->second] = true;
    }
    for (const autograd::Edge& e : n->next_edges()) {
      if (e.valid() && !seen[e.node.get()]) {
        seen[e.node.get()] = true;
        stack.push_back(e.node.get());
      }
    }
  }
  std::vector<size_t> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (used[i]) continue;
    unused.push_back(i);
    keep_grad_if_unused(i);
  }
  end_queued_ = false;
  // Marked at the first hook, not now, so that a forward without a backward
  // (evaluation with grad mode on) launches nothing.
  scheduler_->arm(std::move(unused));
}

void Reducer::on_grad_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.find_unused_parameters && scheduler_->armed() && !end_queued_ &&
      autograd::in_backward()) {
    end_queued_ = true;
    autograd::queue_callback([this] { on_backward_end(); });
  }
  if (scheduler_->mark_ready(index)) finalize();
}

void Reducer::on_backward_end() {
  std::lock_guard<std::mutex> lock(mu_);
  end_queued_ = false;
  if (!scheduler_->unfinished()) return;  // every parameter got its gradient
  for (size_t i = 0; i < params_.size(); ++i)
    if (!scheduler_->is_ready(i)) keep_grad_if_unused(i);
  if (scheduler_->mark_rest_unused()) finalize();
}

BucketReduction Reducer::launch(size_t i) {
  Bucket& b = buckets_[i];
  GradBucket view{i, b.buffer, {}, i + 1 == buckets_.size()};
  int64_t offset = 0;  // the buckets are plain concatenations (build_buckets)
  for (size_t k : b.params) {
    const Param& p = params_[k];
    view.params.push_back({p.name, p.tensor, p.view, offset});
    offset += p.tensor.numel();
  }
  // A hook's second stage (PowerSGD's Q) is the scheduler's follow-up.
  auto run = [&] {
    return chain_stages(options_.comm_hook->run(*pg_, view),
                        [this, i](BucketReduction next) { scheduler_->then(i, std::move(next)); });
  };
  if (options_.tracer == nullptr) return run();
  b.launched = Tracer::Clock::now();
  BucketReduction r = run();
  r.finish = [this, i, work = r.work, bytes = r.bytes, finish = std::move(r.finish)] {
    trace_bucket(i, work, bytes);
    if (finish) finish();
  };
  return r;
}

void Reducer::finalize() {
  // Backward's gradients are all computed once the last bucket is launched:
  // from then on backward only waits, whichever thread had the CPU.
  const auto all_launched = buckets_.empty() ? Tracer::Clock::now() : buckets_.back().launched;
  // Which parameters some rank used: launched after the last bucket, as
  // every rank does, and waited for after them.
  Tensor used;
  distributed::Work used_work;
  if (options_.find_unused_parameters) {
    const std::vector<uint8_t>& local = scheduler_->locally_used();
    used = Tensor::zeros({static_cast<int64_t>(local.size())}, DType::kUInt8);
    if (!shadowing_) std::copy(local.begin(), local.end(), used.data_ptr<uint8_t>());
    const Device dev = params_.empty() ? kCPU : exchange_device(*pg_, params_[0].tensor.device());
    if (!dev.is_cpu()) used = used.to(dev);
    used_work = pg_->all_reduce(used, {.op = distributed::ReduceOp::kMax}, distributed::async_op);
  }
  std::optional<JoinCount> count = std::move(join_count_);
  join_count_.reset();
  scheduler_->wait_all();
  if (count) {
    count->work.wait();
    const double training = count->count.cpu().item<float>();
    if (training > 0 && training != pg_->size()) {
      for (Bucket& b : buckets_) b.buffer.mul_(pg_->size() / training);
    }
  }
  if (used_work.defined()) {
    used_work.wait();
    used = used.to(kCPU);
    const uint8_t* u = used.data_ptr<uint8_t>();
    if (!shadowing_) restore_unused_grads(std::vector<uint8_t>(u, u + used.numel()));
  }
  window_open_ = false;
  kept_.clear();
  if (options_.tracer != nullptr) {
    options_.tracer->span("main", "wait for gradient reduction", "comm", all_launched,
                          Tracer::Clock::now());
  }
}

void Reducer::trace_bucket(size_t i, const distributed::Work& w, size_t wire_bytes) {
  const Bucket& b = buckets_[i];
  // An op the waiting thread ran itself has no times of its own: it ran
  // between the launch and now.
  const auto now = Tracer::Clock::now();
  const auto start = w.started_at().value_or(b.launched);
  const auto end = w.finished_at().value_or(now);
  options_.tracer->span(
      "comm", fmt::format("{} bucket {}", w.op(), i), "comm", start, end,
      fmt::format(
          "\"bucket\":{},\"bytes\":{},\"wire_bytes\":{},\"params\":{},\"queued_us\":{}", i,
          b.buffer.nbytes(), wire_bytes, b.params.size(),
          std::chrono::duration_cast<std::chrono::microseconds>(start - b.launched).count()));
}

}  // namespace cohort::parallel
