#include "cohort/parallel/data_parallel.h"

#include <algorithm>
#include <set>

#include "cohort/autograd/engine.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/base/parallel.h"
#include "cohort/core/autograd_meta.h"

namespace cohort::parallel {
namespace {

// The backward of DataParallel's gathered output: runs the replicas' graphs
// in parallel, each on its chunk of the output gradient.
class ParallelGatherBackward final : public autograd::Node {
 public:
  ParallelGatherBackward(std::vector<autograd::Edge> edges, std::shared_ptr<ReplicaPool> pool,
                         std::vector<Tensor> outputs, std::vector<Tensor> inputs,
                         std::vector<int64_t> out_sizes, int64_t dim, Shape input_shape,
                         DType input_dtype, int64_t input_dim)
      : Node(std::move(edges)),
        pool_(std::move(pool)),
        outputs_(std::move(outputs)),
        inputs_(std::move(inputs)),
        out_sizes_(std::move(out_sizes)),
        dim_(dim),
        input_shape_(std::move(input_shape)),
        input_dtype_(input_dtype),
        input_dim_(input_dim) {}

  std::string name() const override { return "DataParallelGatherBackward"; }

  std::vector<Tensor> apply(const Tensor& grad) override {
    if (outputs_.empty()) {
      throw Error(
          "backward: the graph through DataParallel was already freed by an earlier backward");
    }
    const int n = static_cast<int>(outputs_.size());
    std::vector<Tensor> grads(static_cast<size_t>(n));
    int64_t start = 0;
    for (int i = 0; i < n; ++i) {
      grads[static_cast<size_t>(i)] = grad.narrow(dim_, start, out_sizes_[static_cast<size_t>(i)]);
      start += out_sizes_[static_cast<size_t>(i)];
    }
    pool_->run(n, [&](int i) {
      const Tensor& out = outputs_[static_cast<size_t>(i)];
      if (out.requires_grad()) autograd::run_backward({out}, {grads[static_cast<size_t>(i)]});
    });
    std::vector<Tensor> result(next_edges().size());
    if (!result.empty() && next_edges()[0].valid()) {
      Tensor gx = Tensor::zeros(input_shape_, input_dtype_);
      int64_t s = 0;
      for (const Tensor& in : inputs_) {
        Tensor g = in.grad();
        if (g.defined()) gx.narrow(input_dim_, s, in.size(input_dim_)).copy_(g);
        s += in.size(input_dim_);
      }
      result[0] = gx;
    }
    outputs_.clear();
    inputs_.clear();
    return result;
  }

 private:
  std::shared_ptr<ReplicaPool> pool_;
  std::vector<Tensor> outputs_;
  std::vector<Tensor> inputs_;
  std::vector<int64_t> out_sizes_;
  int64_t dim_;
  Shape input_shape_;
  DType input_dtype_;
  int64_t input_dim_;
};

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  COHORT_CHECK(d >= 0 && d < ndim, "DataParallel: dim {} out of range for the {} of {} dims", dim,
               what, ndim);
  return d;
}

}  // namespace

std::vector<int64_t> DataParallel::chunk_sizes(int64_t batch, int n) {
  std::vector<int64_t> out;
  if (batch <= 0) return out;
  int64_t chunk = (batch + n - 1) / n;
  for (int64_t s = 0; s < batch; s += chunk) out.push_back(std::min(chunk, batch - s));
  return out;
}

DataParallel::DataParallel(nn::ModulePtr module, int replicas)
    : DataParallel(std::move(module), [&] {
        COHORT_CHECK(replicas >= 1, "DataParallel: replicas must be >= 1, got {}", replicas);
        DataParallelOptions o;
        for (int i = 0; i < replicas; ++i) o.device_ids.push_back(i);
        return o;
      }()) {}

DataParallel::DataParallel(nn::ModulePtr module, DataParallelOptions options)
    : nn::Module("DataParallel"), module_(std::move(module)), options_(std::move(options)) {
  COHORT_CHECK(module_ != nullptr, "DataParallel: module is null");
  if (options_.device_ids.empty()) options_.device_ids = {0, 1};
  std::set<int> ids(options_.device_ids.begin(), options_.device_ids.end());
  COHORT_CHECK(ids.size() == options_.device_ids.size() && *ids.begin() >= 0,
               "DataParallel: device_ids must be distinct and >= 0, got {}",
               fmt::join(options_.device_ids, ", "));
  if (options_.output_device < 0) options_.output_device = options_.device_ids[0];
  COHORT_CHECK(ids.count(options_.output_device),
               "DataParallel: output_device {} is not one of device_ids [{}]",
               options_.output_device, fmt::join(options_.device_ids, ", "));
  const int n = static_cast<int>(options_.device_ids.size());
  std::vector<int> budgets(static_cast<size_t>(n));
  if (options_.threads_per_replica > 0) {
    std::fill(budgets.begin(), budgets.end(), options_.threads_per_replica);
  } else {
    int total = num_threads();
    for (int i = 0; i < n; ++i)
      budgets[static_cast<size_t>(i)] = std::max(1, total / n + (i < total % n));
  }
  register_module("module", module_);
  replicas_.push_back(module_);
  for (int i = 1; i < n; ++i) replicas_.push_back(module_->replicate());
  pool_ = std::make_shared<ReplicaPool>(std::move(budgets));
}

DataParallel::~DataParallel() = default;

nn::ModulePtr DataParallel::copy_shell() const {
  throw NotSupported(
      "DataParallel: clone()/replicate() of the wrapper are not supported; clone module() "
      "instead");
}

void DataParallel::copy_buffers(int used) {
  NoGradGuard no_grad;
  std::vector<Tensor> src = module_->buffers();
  if (src.empty()) return;
  for (int i = 1; i < used; ++i) {
    std::vector<Tensor> dst = replicas_[static_cast<size_t>(i)]->buffers();
    for (size_t k = 0; k < src.size() && k < dst.size(); ++k) {
      if (!dst[k].is_same(src[k])) dst[k].copy_(src[k]);
    }
  }
}

Tensor DataParallel::forward(const Tensor& input) {
  COHORT_CHECK(input.defined() && input.dim() >= 1,
               "DataParallel: input must have a batch dimension, got {}",
               input.defined() ? shape_str(input.sizes()) : "an undefined tensor");
  const int64_t in_dim = wrap_dim(options_.dim, input.dim(), "input");
  std::vector<int64_t> sizes = chunk_sizes(input.size(in_dim), num_replicas());
  COHORT_CHECK(!sizes.empty(), "DataParallel: input {} has an empty batch dimension {}",
               shape_str(input.sizes()), in_dim);
  const int used = static_cast<int>(sizes.size());
  // Replica training modes follow the module's.
  for (int i = 1; i < used; ++i) {
    nn::Module& r = *replicas_[static_cast<size_t>(i)];
    if (r.is_training() != module_->is_training()) r.train(module_->is_training());
  }
  copy_buffers(used);

  const bool grad = GradMode::is_enabled();
  const bool input_grad = grad && input.requires_grad();
  std::vector<Tensor> inputs(static_cast<size_t>(used));
  int64_t start = 0;
  for (int i = 0; i < used; ++i) {
    Tensor chunk = input.narrow(in_dim, start, sizes[static_cast<size_t>(i)]).detach();
    if (input_grad) chunk.set_requires_grad(true);
    inputs[static_cast<size_t>(i)] = chunk;
    start += sizes[static_cast<size_t>(i)];
  }
  std::vector<Tensor> outputs(static_cast<size_t>(used));
  pool_->run(used, [&](int i) {
    outputs[static_cast<size_t>(i)] =
        replicas_[static_cast<size_t>(i)]->forward(inputs[static_cast<size_t>(i)]);
  });

  // Gather along dim.
  const Tensor& first = outputs[0];
  COHORT_CHECK(first.defined() && first.dim() >= 1,
               "DataParallel: replica outputs must have a batch dimension to gather, got {}",
               first.defined() ? shape_str(first.sizes()) : "an undefined tensor");
  const int64_t out_dim = wrap_dim(options_.dim, first.dim(), "output");
  Shape out_shape = first.sizes();
  std::vector<int64_t> out_sizes;
  int64_t total = 0;
  bool any_grad = false;
  for (int i = 0; i < used; ++i) {
    const Tensor& o = outputs[static_cast<size_t>(i)];
    Shape a = o.sizes(), b = first.sizes();
    COHORT_CHECK(o.dim() == first.dim() && o.dtype() == first.dtype(),
                 "DataParallel: replica {} output {} {} does not match replica 0's {} {}", i,
                 shape_str(a), dtype_name(o.dtype()), shape_str(b), dtype_name(first.dtype()));
    a[static_cast<size_t>(out_dim)] = b[static_cast<size_t>(out_dim)] = 0;
    COHORT_CHECK(a == b, "DataParallel: replica {} output {} cannot be gathered with {} along {}",
                 i, shape_str(o.sizes()), shape_str(first.sizes()), out_dim);
    out_sizes.push_back(o.size(out_dim));
    total += o.size(out_dim);
    any_grad = any_grad || o.requires_grad();
  }
  out_shape[static_cast<size_t>(out_dim)] = total;
  Tensor out = Tensor::empty(out_shape, first.dtype());
  int64_t s = 0;
  for (int i = 0; i < used; ++i) {
    out.narrow(out_dim, s, out_sizes[static_cast<size_t>(i)])
        .copy_(outputs[static_cast<size_t>(i)]);
    s += out_sizes[static_cast<size_t>(i)];
  }
  if (grad && any_grad) {
    std::vector<autograd::Edge> edges{input_grad ? autograd::gradient_edge(input)
                                                 : autograd::Edge{}};
    out.autograd_meta().grad_fn = std::make_shared<ParallelGatherBackward>(
        std::move(edges), pool_, std::move(outputs), std::move(inputs), std::move(out_sizes),
        out_dim, input.sizes(), input.dtype(), in_dim);
  }
  return out;
}

}  // namespace cohort::parallel
