// DistributedDataParallel for torch::nn::Module: model check and broadcast at
// construction (parallel/model_check.h), then buckets over LibTorch's tensors
// and accumulator post hooks driving the ReductionScheduler that cohort's own
// reducer uses (parallel/reduction_scheduler.h: launch in bucket order,
// finalize in the last hook, name what got no gradient).
#include "cohort/libtorch/distributed_data_parallel.h"

#include "cohort/libtorch/distributed_data_parallel_impl.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "cohort/base/error.h"
#include "cohort/libtorch/cuda_tensors.h"
#include "cohort/libtorch/ready_hook.h"
#include "cohort/parallel/buckets.h"
#include "cohort/parallel/join.h"
#include "cohort/parallel/model_check.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::libtorch {

namespace detail {

bool ignored(const std::vector<std::string>& ignore, const std::string& name) {
  return std::find(ignore.begin(), ignore.end(), name) != ignore.end();
}

std::vector<std::string> model_entries(const torch::nn::Module& module,
                                       const std::vector<std::string>& ignore) {
  auto entry = [](const char* kind, const std::string& name, const at::Tensor& t) {
    std::ostringstream s;
    s << kind << " '" << name << "' " << c10::toString(t.scalar_type()) << " " << t.sizes();
    return s.str();
  };
  std::vector<std::string> out;
  for (const auto& p : module.named_parameters())
    if (!ignored(ignore, p.key())) out.push_back(entry("parameter", p.key(), p.value()));
  for (const auto& b : module.named_buffers())
    if (!ignored(ignore, b.key())) out.push_back(entry("buffer", b.key(), b.value()));
  return out;
}

void broadcast_coalesced(const ProcessGroup& pg, const std::vector<at::Tensor>& tensors, int root) {
  at::NoGradGuard no_grad;
  std::map<std::pair<int, std::string>, std::vector<at::Tensor>> by_dtype;
  for (const at::Tensor& t : tensors)
    by_dtype[{static_cast<int>(t.scalar_type()), t.device().str()}].push_back(t);
  for (auto& [key, list] : by_dtype) {
    std::vector<at::Tensor> flat_parts;
    for (const at::Tensor& t : list) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    pg.broadcast(flat, {.root = root});
    int64_t off = 0;
    for (const at::Tensor& t : list) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

}  // namespace detail

using detail::broadcast_coalesced;
using detail::ignored;
using detail::model_entries;

void DistributedDataParallel::Impl::build_buckets(size_t cap_bytes) {
  // A bucket holds one dtype on one device, and lives on that device (a
  // model split over two GPUs reduces each device's gradients there).
  auto key = [](const at::Tensor& t) {
    const c10::Device d = t.device();
    const int device = d.is_cpu() ? 0 : 1 + static_cast<int>(d.type()) * 64 + d.index();
    return static_cast<int>(t.scalar_type()) * 4096 + device;
  };
  std::vector<parallel::BucketParam> sizes;
  for (const Param& p : params) sizes.push_back({p.tensor.nbytes(), key(p.tensor)});
  std::vector<std::vector<size_t>> closed = parallel::assign_buckets(sizes, cap_bytes);
  for (auto& members : closed) {
    Bucket b;
    int64_t numel = 0;
    for (size_t k : members) numel += params[k].tensor.numel();
    b.buffer = at::zeros({numel}, params[members.front()].tensor.options().requires_grad(false));
    b.dtype = to_data_type(b.buffer.scalar_type(), "DistributedDataParallel", "bucket");
    const size_t elem = b.buffer.element_size();
    int64_t offset = 0;
    for (size_t k : members) {
      Param& p = params[k];
      p.bucket = buckets.size();
      // Not an autograd view (narrow() would be one, and Optimizer::zero_grad's
      // detach_() refuses views): a tensor over the bucket's memory that keeps
      // the bucket alive.
      at::Tensor keep = b.buffer;
      p.view = at::from_blob(
          static_cast<std::byte*>(b.buffer.data_ptr()) + static_cast<size_t>(offset) * elem,
          p.tensor.sizes(), [keep](void*) mutable { keep.reset(); }, b.buffer.options());
      offset += p.tensor.numel();
    }
    b.params = std::move(members);
    buckets.push_back(std::move(b));
  }
}

void DistributedDataParallel::Impl::restore_view(Param& p) {
  at::Tensor& g = grad_of(p);
  if (!options.gradient_as_bucket_view) return;
  if (g.defined() && g.is_same(p.view)) return;
  at::NoGradGuard no_grad;
  if (g.defined() && g.data_ptr() == p.view.data_ptr() && g.sizes() == p.view.sizes() &&
      g.is_contiguous()) {
    g = p.view;  // Module::zero_grad's grad.detach(): the same memory, a new tensor
    return;
  }
  if (g.defined()) {
    p.view.copy_(g);
  } else {
    p.view.zero_();
  }
  g = p.view;
}

void DistributedDataParallel::Impl::make_scheduler() {
  std::vector<std::string> names;
  for (const Param& p : params) names.push_back(p.name);
  std::vector<std::vector<size_t>> groups;
  for (const Bucket& b : buckets) groups.push_back(b.params);
  const size_t num_buckets = buckets.size();
  scheduler = std::make_unique<parallel::ReductionScheduler>(
      std::move(names), std::move(groups),
      parallel::ReductionSchedulerOptions{
          .what = "DistributedDataParallel",
          .rank = pg.rank(),
          .twice_hint = "backward ran twice through one forward, or a parameter is shared with "
                        "find_unused_parameters marking it unused",
          .unfinished_advice =
              "Construct DDP with find_unused_parameters = true when parts of the model take no "
              "part in some iterations, and make every output of forward take part in the loss"},
      parallel::ReductionCallbacks{
          .launch = [this](size_t i) { return launch(i); },
          .on_ready = [this](size_t k) { on_ready(k); },
          .describe =
              [num_buckets](size_t i, int) {
                return fmt::format("DistributedDataParallel: gradient reduction of bucket {} of {}",
                                   i, num_buckets);
              }});
}

void DistributedDataParallel::Impl::reset_iteration() {
  scheduler->reset();
  trace = ReductionTrace{};
}

void DistributedDataParallel::Impl::begin_iteration() {
  std::lock_guard<std::mutex> lock(mu);
  if (scheduler->unfinished()) trace = ReductionTrace{};
  scheduler->throw_if_unfinished();
  reset_iteration();
  if (!window_open) {
    for (size_t i = 0; i < params.size(); ++i) had_grad[i] = grad_of(params[i]).defined();
    kept.clear();
    window_open = true;
  }
  for (Param& p : params) restore_view(p);
}

void DistributedDataParallel::Impl::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(mu);
  reset_iteration();
  if (!options.find_unused_parameters) {
    scheduler->arm();
    return;
  }
  // Walk the graph from the outputs; parameters whose accumulator is not
  // reached get no gradient in this backward.
  std::unordered_map<const torch::autograd::Node*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].accumulator.get()] = i;
  std::vector<bool> used(params.size(), false);
  std::vector<torch::autograd::Node*> stack;
  std::unordered_set<torch::autograd::Node*> seen;
  auto visit = [&](torch::autograd::Node* n) {
    if (n != nullptr && seen.insert(n).second) stack.push_back(n);
  };
  for (const at::Tensor& out : outputs) {
    if (!out.defined()) continue;
    if (out.grad_fn()) {
      visit(out.grad_fn().get());
    } else if (out.requires_grad()) {
      visit(torch::autograd::impl::try_get_grad_accumulator(out).get());
    }
  }
  while (!stack.empty()) {
    torch::autograd::Node* n = stack.back();
    stack.pop_back();
    auto it = index.find(n);
    if (it != index.end()) used[it->second] = true;
    for (const torch::autograd::Edge& e : n->next_edges()) visit(e.function.get());
  }
  std::vector<size_t> unused;
  for (size_t i = 0; i < params.size(); ++i) {
    if (used[i]) continue;
    unused.push_back(i);
    keep_if_unused(i);
  }
  end_queued = false;
  // Marked at the first hook, not now, so that a forward without a backward
  // launches nothing.
  scheduler->arm(std::move(unused));
}

void DistributedDataParallel::Impl::on_grad_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mu);
  if (!scheduler->armed()) {
    scheduler->mark_ready(index);  // no_sync: counts as used, launches nothing
    return;
  }
  try {
    if (options.find_unused_parameters && !end_queued) {
      // The parameters still without a gradient when backward ends (an
      // output left out of the loss) are unused too.
      end_queued = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { on_backward_end(); });
    }
    const auto now = Clock::now();
    if (!scheduler->unfinished()) trace.first_gradient = now;
    trace.last_gradient = now;
    if (scheduler->mark_ready(index)) finalize();
    // The last hook's finalize records its own time apart (all_done).
    if (scheduler->armed()) trace.in_hooks += Clock::now() - now;
  } catch (...) {
    reset_iteration();
    throw;
  }
}

void DistributedDataParallel::Impl::on_ready(size_t index) {
  Param& p = params[index];
  if (options.gradient_as_bucket_view) {
    restore_view(p);
    return;
  }
  at::NoGradGuard no_grad;
  const at::Tensor& g = grad_of(p);
  if (g.defined()) {
    p.view.copy_(g);
  } else {
    p.view.zero_();
  }
}

parallel::BucketReduction DistributedDataParallel::Impl::launch(size_t i) {
  Bucket& b = buckets[i];
  b.launched = Clock::now();
  if (hook) return launch_hook(i);
  if (i + 1 < buckets.size()) {
    // Through the adapter's ops, so that a CUDA bucket takes its path
    // (cuda_tensors.h); its wait() orders LibTorch's current stream after
    // the reduction, or copies a staged result back.
    Work lw = pg.all_reduce(b.buffer, {.op = ReduceOp::kAvg}, async_op);
    distributed::Work work = lw.work();
    return parallel::BucketReduction{
        work,
        [this, i, lw, work] {
          lw.wait();
          trace.buckets.push_back(BucketTrace{i, buckets[i].buffer.nbytes(), buckets[i].launched,
                                              work.started_at(), work.finished_at()});
        },
        0};
  }
  // The last bucket is not handed to the group's thread: finalize runs it on
  // this thread right after the others, as the hook would only wait for it
  // (no wake-up of another thread that, on a rank pinned to one CPU, takes
  // the CPU from this one).
  return parallel::BucketReduction{
      distributed::Work(),
      [this, i] {
        Bucket& last = buckets[i];
        const auto started = Clock::now();
        pg.all_reduce(last.buffer, {.op = ReduceOp::kAvg});
        trace.buckets.push_back(
            BucketTrace{i, last.buffer.nbytes(), last.launched, started, Clock::now()});
      },
      0};
}

void DistributedDataParallel::Impl::set_hook(parallel::CommHookPtr h) {
  COHORT_CHECK(h != nullptr, "DistributedDataParallel: register_comm_hook with a null hook");
  if (hook) parallel::throw_hook_registered_twice("DistributedDataParallel", *hook, *h);
  COHORT_CHECK(!scheduler->armed(),
               "DistributedDataParallel: register_comm_hook between forward and backward");
  for (const Bucket& b : buckets) {
    if (!b.buffer.is_cpu())
      throw NotSupported(fmt::format(
          "DistributedDataParallel: comm hook '{}' on a {} bucket: hooks reduce CPU buckets only",
          h->name(), b.buffer.device().str()));
  }
  hook = std::move(h);
}

// The bucket as cohort tensors over its memory (the wrappers keep the
// LibTorch tensors alive), reduced by the hook through the scheduler.
parallel::BucketReduction DistributedDataParallel::Impl::launch_hook(size_t i) {
  Bucket& b = buckets[i];
  auto wrap = [](const at::Tensor& t, const Shape& sizes) {
    return Tensor::from_blob(t.data_ptr(), sizes, detail::to_cohort_dtype(t.scalar_type()),
                             [keep = t](void*) mutable { keep.reset(); });
  };
  parallel::GradBucket view{i, wrap(b.buffer, {b.buffer.numel()}), {}, i + 1 == buckets.size()};
  int64_t offset = 0;
  for (size_t k : b.params) {
    const Param& p = params[k];
    const Shape sizes(p.tensor.sizes().begin(), p.tensor.sizes().end());
    view.params.push_back({p.name, wrap(p.tensor, sizes),
                           view.buffer.narrow(0, offset, p.tensor.numel()).view(sizes), offset});
    offset += p.tensor.numel();
  }
  parallel::BucketReduction r = parallel::chain_stages(
      hook->run(*pg.group(), view),
      [this, i](parallel::BucketReduction next) { scheduler->then(i, std::move(next)); });
  r.finish = [this, i, work = r.work, finish = std::move(r.finish)] {
    if (finish) finish();
    trace.buckets.push_back(BucketTrace{i, buckets[i].buffer.nbytes(), buckets[i].launched,
                                        work.started_at(), work.finished_at()});
  };
  return r;
}

void DistributedDataParallel::Impl::finalize() {
  const auto wait_began = Clock::now();
  trace.in_hooks += wait_began - trace.last_gradient;
  // Which parameters some rank used (find_unused_parameters): after the last
  // bucket, on every rank.
  at::Tensor used;
  Work used_work;
  if (options.find_unused_parameters) {
    const std::vector<uint8_t>& local = scheduler->locally_used();
    used = at::zeros({static_cast<int64_t>(local.size())}, at::kByte);
    if (!shadowing) std::copy(local.begin(), local.end(), used.data_ptr<uint8_t>());
    used_work = pg.all_reduce(used, {.op = ReduceOp::kMax}, async_op);
  }
  std::optional<parallel::JoinCount> count = std::move(join_count);
  join_count.reset();
  scheduler->wait_all();
  if (count) {
    count->work.wait();
    const double training = count->count.item<float>();
    at::NoGradGuard no_grad;
    if (training > 0 && training != pg.size())
      for (Bucket& b : buckets) b.buffer.mul_(pg.size() / training);
  }
  std::vector<uint8_t> global_used(params.size(), 1);
  if (used_work.defined()) {
    used_work.wait();
    if (!shadowing)
      global_used.assign(used.data_ptr<uint8_t>(), used.data_ptr<uint8_t>() + used.numel());
  }
  window_open = false;
  trace.all_done = Clock::now();
  trace.waiting = trace.all_done - wait_began;
  if (shadowing) {
    kept.clear();
    return;
  }
  if (options.gradient_as_bucket_view) restore_unused(global_used);
  kept.clear();
  if (!options.gradient_as_bucket_view) {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      Param& p = params[i];
      if (global_used[i] == 0) continue;  // no rank used it: .grad stays as it was
      at::Tensor& g = grad_of(p);
      if (g.defined()) {
        g.copy_(p.view);
      } else {
        g = p.view.clone();
      }
    }
  }
  trace.reduced = Clock::now();
  last_trace = trace;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 ProcessGroup pg,
                                                 DistributedDataParallelOptions options,
                                                 ForwardFn forward)
    : module_(std::move(module)), pg_(std::move(pg)), forward_(std::move(forward)) {
  COHORT_CHECK(module_ != nullptr, "DistributedDataParallel: module is null");
  COHORT_CHECK(pg_.defined(), "DistributedDataParallel: process group is undefined");
  impl_ = std::make_unique<Impl>();
  Impl& im = *impl_;
  im.pg = pg_;
  im.options = options;
  size_t grad_bytes = 0;
  std::vector<at::Tensor> state;
  const std::vector<std::string>& ignore = options.params_and_buffers_to_ignore;
  for (const std::string& name : ignore) {
    COHORT_CHECK(
        module_->named_parameters().contains(name) || module_->named_buffers().contains(name),
        "DistributedDataParallel: params_and_buffers_to_ignore names '{}', which is "
        "neither a parameter nor a buffer of the module (names are fully qualified, "
        "e.g. 'fc1.weight')",
        name);
  }
  for (const auto& item : module_->named_parameters()) {
    const at::Tensor& t = item.value();
    const std::string& name = item.key();
    if (ignored(ignore, name)) continue;
    COHORT_CHECK((t.device().is_cpu() || t.device().is_cuda()) && t.layout() == at::kStrided &&
                     t.is_contiguous(),
                 "DistributedDataParallel: parameter '{}' must be a dense contiguous CPU or CUDA "
                 "tensor (device {}, contiguous {})",
                 name, t.device().str(), t.is_contiguous());
    to_data_type(t.scalar_type(), "DistributedDataParallel", name);
    state.push_back(t);
    if (!t.requires_grad()) continue;
    COHORT_CHECK(t.is_leaf(), "DistributedDataParallel: parameter '{}' is not a leaf", name);
    im.params.push_back(Impl::Param{name, t, at::Tensor(), 0, nullptr, 0});
    grad_bytes += t.nbytes();
  }
  for (const auto& item : module_->named_buffers()) {
    if (ignored(ignore, item.key())) continue;
    to_data_type(item.value().scalar_type(), "DistributedDataParallel", item.key());
    state.push_back(item.value());
  }
  COHORT_CHECK(!im.params.empty(),
               "DistributedDataParallel: the module has no parameter that requires a gradient{} "
               "(DistributedDataParallel is not needed for it, as PyTorch says)",
               ignore.empty() ? "" : " once params_and_buffers_to_ignore are left out");
  parallel::verify_same_entries(*pg_.group(), model_entries(*module_, ignore),
                                "DistributedDataParallel");
  broadcast_coalesced(pg_, state);

  size_t cap = parallel::bucket_cap_bytes(options.bucket_cap_mb, grad_bytes);
  // Unset bucket_cap_mb and gradients that fit one such bucket: about four
  // buckets instead, so that reductions start while backward still runs
  // (dist-mnist's 87 KB in one bucket waited for the whole backward; see
  // docs/libtorch.md, Benchmark).
  if (!options.bucket_cap_mb && grad_bytes <= cap) cap = std::max<size_t>(grad_bytes / 4, 1);
  im.build_buckets(cap);
  im.make_scheduler();
  im.had_grad.assign(im.params.size(), false);
  if (options.comm_hook) im.set_hook(options.comm_hook);
  for (size_t i = 0; i < im.params.size(); ++i) {
    Impl::Param& p = im.params[i];
    if (options.gradient_as_bucket_view && im.grad_of(p).defined()) {
      // Keep whatever gradient the parameter already has (one without keeps
      // none until the first forward, as PyTorch's).
      im.restore_view(p);
    }
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    COHORT_CHECK(p.accumulator != nullptr,
                 "DistributedDataParallel: parameter '{}' has no gradient accumulator", p.name);
    p.hook_key = p.accumulator->add_post_hook(
        std::make_unique<detail::ReadyHook>([&im, i] { im.on_grad_ready(i); }));
  }
  im.reset_iteration();
}

DistributedDataParallel::~DistributedDataParallel() {
  if (!impl_) return;
  for (Impl::Param& p : impl_->params)
    if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
  // A reduction left half-way (an exception during backward): the scheduler
  // lets the launched ops end before their buffers go away.
  impl_->scheduler.reset();
}

void DistributedDataParallel::before_forward() {
  impl_->begin_iteration();
  std::optional<parallel::JoinCount> count = parallel::Join::notify_join_context(*this);
  if (will_sync_buffers())
    broadcast_coalesced(pg_, synced(false), join_enabled() ? buffer_authority(true) : 0);
  const bool sync = require_sync_ && torch::autograd::GradMode::is_enabled();
  if (join_enabled()) {
    // Tells the ranks out of inputs whether to shadow this backward.
    sync_flag_ = at::full({1}, sync ? 1.0 : 0.0, at::kFloat);
    sync_flag_work_ = pg_.all_reduce(sync_flag_, {.op = ReduceOp::kSum}, async_op);
    if (sync && count && !join_options().divide_by_initial_world_size) {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->join_count = std::move(*count);
    }
  }
}

void DistributedDataParallel::after_forward(const std::vector<at::Tensor>& outputs) {
  if (require_sync_ && torch::autograd::GradMode::is_enabled()) {
    require_forward_param_sync_ = true;
    impl_->prepare_for_backward(outputs);
  } else {
    require_forward_param_sync_ = false;
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->scheduler->disarm();
  }
}

at::Tensor DistributedDataParallel::forward(const at::Tensor& input) {
  if (!forward_) {
    throw NotSupported(
        "DistributedDataParallel::forward: the wrapped module has no forward(torch::Tensor); "
        "call ddp.forward_with([&] { return model->forward(...); }) instead");
  }
  return forward_with([&] { return forward_(input); });
}

size_t DistributedDataParallel::num_buckets() const { return impl_->buckets.size(); }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : impl_->buckets) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(impl_->params[k].name);
  }
  return out;
}

const at::Tensor& DistributedDataParallel::bucket_buffer(size_t i) const {
  COHORT_CHECK(i < impl_->buckets.size(), "DistributedDataParallel::bucket_buffer: bucket {} of {}",
               i, impl_->buckets.size());
  return impl_->buckets[i].buffer;
}

distributed::Work DistributedDataParallel::bucket_work(size_t i) const {
  COHORT_CHECK(i < impl_->buckets.size(), "DistributedDataParallel::bucket_work: bucket {} of {}",
               i, impl_->buckets.size());
  return impl_->scheduler->work(i);
}

int64_t DistributedDataParallel::num_reductions() const {
  return impl_->scheduler->num_completed();
}

ReductionTrace DistributedDataParallel::last_trace() const { return impl_->last_trace; }

void DistributedDataParallel::register_comm_hook(parallel::CommHookPtr hook) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->set_hook(std::move(hook));
}

size_t DistributedDataParallel::reduced_bytes() const { return impl_->scheduler->launched_bytes(); }

}  // namespace cohort::libtorch
