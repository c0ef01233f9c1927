#include "cohort/parallel/distributed_data_parallel.h"

#include <algorithm>

#include "cohort/autograd/grad_mode.h"
#include "cohort/parallel/buckets.h"
#include "cohort/parallel/comm_hooks/compression_hooks.h"
#include "cohort/parallel/join.h"

namespace cohort::parallel {

size_t auto_bucket_cap_bytes(size_t gradient_bytes) {
  constexpr size_t kMin = size_t{1} << 20, kMax = size_t{25} << 20;
  return std::clamp(gradient_bytes / 8, kMin, kMax);
}

namespace {

// The parameters DDP reduces: module's, less the ignored ones; refuses
// unknown names and a model with nothing to train.
std::vector<std::pair<std::string, Tensor>> reduced_parameters(
    const nn::Module& module, const std::vector<std::string>& ignore) {
  nn::NamedTensors params = module.named_parameters();
  nn::NamedTensors buffers = module.named_buffers();
  for (const std::string& name : ignore) {
    auto named = [&](const nn::NamedTensors& list) {
      return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
    };
    COHORT_CHECK(named(params) || named(buffers),
                 "DistributedDataParallel: params_and_buffers_to_ignore names '{}', which is "
                 "neither a parameter nor a buffer of the module (names are fully qualified, "
                 "e.g. 'fc1.weight')",
                 name);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : params)
    if (std::find(ignore.begin(), ignore.end(), name) == ignore.end()) out.emplace_back(name, t);
  const bool trainable =
      std::any_of(out.begin(), out.end(), [](const auto& e) { return e.second.requires_grad(); });
  COHORT_CHECK(trainable,
               "DistributedDataParallel: the module has no parameter that requires a gradient{} "
               "(DistributedDataParallel is not needed for it, as PyTorch says)",
               ignore.empty() ? "" : " once params_and_buffers_to_ignore are left out");
  return out;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module,
                                                 std::shared_ptr<distributed::ProcessGroup> pg,
                                                 DistributedDataParallelOptions options)
    : nn::Module("DistributedDataParallel"),
      module_(std::move(module)),
      pg_(std::move(pg)),
      options_(std::move(options)) {
  COHORT_CHECK(module_ != nullptr, "DistributedDataParallel: module is null");
  COHORT_CHECK(pg_ != nullptr, "DistributedDataParallel: process group is null");
  COHORT_CHECK(!options_.bucket_cap_mb || *options_.bucket_cap_mb > 0,
               "DistributedDataParallel: bucket_cap_mb must be > 0, got {}",
               options_.bucket_cap_mb.value_or(0));
  register_module("module", module_);
  const auto& ignore = options_.params_and_buffers_to_ignore;
  std::vector<std::pair<std::string, Tensor>> params = reduced_parameters(*module_, ignore);
  verify_same_model(*pg_, *module_, "DistributedDataParallel", ignore);
  broadcast_module_state(*pg_, *module_, 0, ignore);
  ReducerOptions ro;
  size_t bytes = 0;
  for (const auto& [name, p] : params) {
    if (p.requires_grad()) bytes += static_cast<size_t>(p.numel()) * dtype_size(p.dtype());
  }
  ro.bucket_cap_bytes = bucket_cap_bytes(options_.bucket_cap_mb, bytes);
  ro.find_unused_parameters = options_.find_unused_parameters;
  COHORT_CHECK(!options_.comm_hook || options_.reduce_dtype == DType::kFloat32,
               "DistributedDataParallel: comm_hook '{}' and reduce_dtype {} both say how "
               "gradients are reduced; give one",
               options_.comm_hook ? options_.comm_hook->name() : "",
               dtype_name(options_.reduce_dtype));
  ro.comm_hook = options_.comm_hook;
  if (!ro.comm_hook && options_.reduce_dtype != DType::kFloat32)
    ro.comm_hook = grad_reduce_hook(options_.reduce_dtype);
  ro.tracer = options_.tracer;
  reducer_ = std::make_unique<Reducer>(std::move(params), pg_, std::move(ro));
}

DistributedDataParallel::~DistributedDataParallel() = default;

nn::ModulePtr DistributedDataParallel::copy_shell() const {
  throw NotSupported(
      "DistributedDataParallel: clone()/replicate() of the DDP wrapper are not supported; clone "
      "module() instead");
}

std::vector<Tensor> DistributedDataParallel::synced_buffers() const {
  std::vector<Tensor> out;
  const auto& ignore = options_.params_and_buffers_to_ignore;
  for (auto& [name, b] : module_->named_buffers())
    if (std::find(ignore.begin(), ignore.end(), name) == ignore.end()) out.push_back(b);
  return out;
}

bool DistributedDataParallel::will_sync_buffers() const {
  return require_forward_param_sync_ && options_.broadcast_buffers && pg_->size() > 1 &&
         !synced_buffers().empty();
}

Device DistributedDataParallel::join_device() const {
  return exchange_device(*pg_, module_device(*module_));
}

int DistributedDataParallel::buffer_authority(bool candidate) {
  // Under a Join rank 0 may have run out: the highest rank still training
  // holds the current buffers.
  Tensor r = Tensor::full({1}, candidate ? pg_->rank() : -1, DType::kInt64, join_device());
  pg_->all_reduce(r, {.op = distributed::ReduceOp::kMax});
  const auto root = r.cpu().item<int64_t>();
  COHORT_CHECK(root >= 0, "DistributedDataParallel (rank {}): no rank is still training",
               pg_->rank());
  return static_cast<int>(root);
}

void DistributedDataParallel::sync_buffers(int root) {
  std::vector<Tensor> bufs = synced_buffers();
  std::vector<distributed::Work> works;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (buffer, contiguous stand-in)
  for (Tensor& b : bufs) {
    if (b.is_contiguous()) {
      works.push_back(pg_->broadcast(b, {.root = root}, distributed::async_op));
    } else {
      Tensor c = b.contiguous();
      works.push_back(pg_->broadcast(c, {.root = root}, distributed::async_op));
      copies.emplace_back(b, c);
    }
  }
  for (auto& w : works) w.wait();
  for (auto& [b, c] : copies) b.copy_(c);
}

void DistributedDataParallel::before_forward() {
  reducer_->begin_iteration();
  std::optional<JoinCount> count = Join::notify_join_context(*this);
  if (will_sync_buffers()) sync_buffers(join_enabled() ? buffer_authority(true) : 0);
  const bool sync = GradMode::is_enabled() && require_sync_;
  if (join_enabled()) {
    // Tells the ranks out of inputs whether to shadow this backward.
    sync_flag_ = Tensor::full({1}, sync ? 1.0 : 0.0, DType::kFloat32, join_device());
    sync_flag_work_ =
        pg_->all_reduce(sync_flag_, {.op = distributed::ReduceOp::kSum}, distributed::async_op);
    if (sync && count && !join_options().divide_by_initial_world_size)
      reducer_->set_join_count(std::move(*count));
  }
}

void DistributedDataParallel::after_forward(const std::vector<Tensor>& outs) {
  if (GradMode::is_enabled() && require_sync_) {
    require_forward_param_sync_ = true;
    reducer_->prepare_for_backward(outs);
  } else {
    require_forward_param_sync_ = false;
    reducer_->skip_sync();
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  return forward_with([&](nn::Module& m) { return m.forward(input); });
}

Tensor DistributedDataParallel::forward_with(const std::function<Tensor(nn::Module&)>& fn) {
  before_forward();
  Tensor out = fn(*module_);
  after_forward({out});
  return out;
}

std::vector<Tensor> DistributedDataParallel::forward_outputs(
    const std::function<std::vector<Tensor>(nn::Module&)>& fn) {
  before_forward();
  std::vector<Tensor> outs = fn(*module_);
  after_forward(outs);
  return outs;
}

std::map<std::string, Tensor> DistributedDataParallel::forward_named_outputs(
    const std::function<std::map<std::string, Tensor>(nn::Module&)>& fn) {
  before_forward();
  std::map<std::string, Tensor> outs = fn(*module_);
  std::vector<Tensor> values;
  for (const auto& [name, t] : outs) values.push_back(t);
  after_forward(values);
  return outs;
}

void DistributedDataParallel::join_shadow_iteration() {
  if (will_sync_buffers()) sync_buffers(buffer_authority(false));
  Tensor flag = Tensor::zeros({1}, DType::kFloat32, join_device());
  pg_->all_reduce(flag, {.op = distributed::ReduceOp::kSum});
  const bool sync = flag.cpu().item<float>() != 0;
  require_forward_param_sync_ = sync;
  if (sync) reducer_->shadow_reduction();
}

void DistributedDataParallel::join_finish(bool is_last_joiner) {
  // The last rank to run out trained in every iteration: its model is
  // everyone's (PyTorch's _sync_final_model).
  Tensor r = Tensor::full({1}, is_last_joiner ? pg_->rank() : -1, DType::kInt64, join_device());
  pg_->all_reduce(r, {.op = distributed::ReduceOp::kMax});
  broadcast_module_state(*pg_, *module_, static_cast<int>(r.cpu().item<int64_t>()),
                         options_.params_and_buffers_to_ignore);
}

}  // namespace cohort::parallel
