#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"

#include <utility>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/parallel/tensor_parallel/mappings.h"

namespace cohort::parallel {

RowParallelLinear::RowParallelLinear(Private, const nn::Linear& full,
                                     std::shared_ptr<distributed::ProcessGroup> tp,
                                     const RowParallelOptions& options)
    : Cloneable("RowParallelLinear"),
      tp_(std::move(tp)),
      in_features_(full.in_features()),
      out_features_(full.out_features()),
      options_(options) {
  COHORT_CHECK(tp_ != nullptr, "RowParallelLinear: the tensor-parallel group is null");
  options_.bias = full.has_bias();
  COHORT_CHECK(in_features_ % tp_->size() == 0,
               "RowParallelLinear (rank {} of group {}): in_features {} is not divisible by the "
               "tensor-parallel size {}",
               tp_->rank(), tp_->name(), in_features_, tp_->size());
  NoGradGuard no_grad;
  register_parameter("weight", shard_along_dim(full.weight(), 1, tp_->rank(), tp_->size()));
  if (options_.bias) register_parameter("bias", full.bias().clone());
}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features,
                                     std::shared_ptr<distributed::ProcessGroup> tp, Generator& gen,
                                     const RowParallelOptions& options)
    : RowParallelLinear(Private{}, nn::Linear(in_features, out_features, gen, options.bias),
                        std::move(tp), options) {}

std::shared_ptr<RowParallelLinear> RowParallelLinear::from_full(
    const nn::Linear& full, std::shared_ptr<distributed::ProcessGroup> tp,
    const RowParallelOptions& options) {
  return std::make_shared<RowParallelLinear>(Private{}, full, std::move(tp), options);
}

std::string RowParallelLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}, input_is_parallel={}, tp_size={}",
                     in_features_, out_features_, options_.bias ? "True" : "False",
                     options_.input_is_parallel ? "True" : "False", tp_->size());
}

int64_t RowParallelLinear::split_dim(std::string_view name) const {
  COHORT_CHECK(name == "weight" || (options_.bias && name == "bias"),
               "{}: no parameter called '{}'", describe(), name);
  return name == "weight" ? 1 : kReplicated;
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const int64_t want = options_.input_is_parallel ? in_features_per_rank() : in_features_;
  COHORT_CHECK(x.dim() >= 1 && x.size(-1) == want, "{} (rank {}): input must be [..., {}], got {}",
               describe(), tp_->rank(), want, shape_str(x.sizes()));
  Tensor xr = options_.input_is_parallel ? x : scatter_to_tensor_parallel_region(x, tp_);
  // The bias joins after the reduction, so that it is added once, not p times.
  Tensor y = options_.sequence_parallel
                 ? reduce_scatter_to_sequence_parallel_region(linear(xr, weight()), tp_)
                 : reduce_from_tensor_parallel_region(linear(xr, weight()), tp_);
  return options_.bias ? add(y, bias()) : y;
}

}  // namespace cohort::parallel
