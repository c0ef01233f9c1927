#include "cohort/parallel/distributed_data_parallel.h"

#include <algorithm>

#include "cohort/autograd/grad_mode.h"
#include "cohort/parallel/buckets.h"
#include "cohort/parallel/comm_hooks/compression_hooks.h"

namespace cohort::parallel {

size_t auto_bucket_cap_bytes(size_t gradient_bytes) {
  constexpr size_t kMin = size_t{1} << 20, kMax = size_t{25} << 20;
  return std::clamp(gradient_bytes / 8, kMin, kMax);
}

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
  verify_same_model(*pg_, *module_, "DistributedDataParallel");
  broadcast_module_state(*pg_, *module_, 0);
  ReducerOptions ro;
  size_t bytes = 0;
  for (const Tensor& p : module_->parameters()) {
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
  reducer_ = std::make_unique<Reducer>(module_->named_parameters(), pg_, std::move(ro));
}

DistributedDataParallel::~DistributedDataParallel() = default;

nn::ModulePtr DistributedDataParallel::copy_shell() const {
  throw NotSupported(
      "DistributedDataParallel: clone()/replicate() of the DDP wrapper are not supported; clone "
      "module() instead");
}

void DistributedDataParallel::sync_buffers() {
  if (!options_.broadcast_buffers || pg_->size() == 1) return;
  std::vector<Tensor> bufs = module_->buffers();
  if (bufs.empty()) return;
  std::vector<distributed::Work> works;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (buffer, contiguous stand-in)
  for (Tensor& b : bufs) {
    if (b.is_contiguous()) {
      works.push_back(pg_->broadcast(b, {.root = 0}, distributed::async_op));
    } else {
      Tensor c = b.contiguous();
      works.push_back(pg_->broadcast(c, {.root = 0}, distributed::async_op));
      copies.emplace_back(b, c);
    }
  }
  for (auto& w : works) w.wait();
  for (auto& [b, c] : copies) b.copy_(c);
}

void DistributedDataParallel::after_forward(const Tensor& out) {
  if (GradMode::is_enabled() && require_sync_) {
    reducer_->prepare_for_backward({out});
  } else {
    reducer_->skip_sync();
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  return forward_with([&](nn::Module& m) { return m.forward(input); });
}

Tensor DistributedDataParallel::forward_with(const std::function<Tensor(nn::Module&)>& fn) {
  reducer_->begin_iteration();
  sync_buffers();
  Tensor out = fn(*module_);
  after_forward(out);
  return out;
}

}  // namespace cohort::parallel
