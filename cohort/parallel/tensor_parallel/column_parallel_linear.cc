#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"

#include <utility>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/parallel/tensor_parallel/mappings.h"

namespace cohort::parallel {

ColumnParallelLinear::ColumnParallelLinear(Private, const nn::Linear& full,
                                           std::shared_ptr<distributed::ProcessGroup> tp,
                                           const ColumnParallelOptions& options)
    : Cloneable("ColumnParallelLinear"),
      tp_(std::move(tp)),
      in_features_(full.in_features()),
      out_features_(full.out_features()),
      options_(options) {
  COHORT_CHECK(tp_ != nullptr, "ColumnParallelLinear: the tensor-parallel group is null");
  options_.bias = full.has_bias();
  COHORT_CHECK(out_features_ % tp_->size() == 0,
               "ColumnParallelLinear (rank {} of group {}): out_features {} is not divisible by "
               "the tensor-parallel size {}",
               tp_->rank(), tp_->name(), out_features_, tp_->size());
  COHORT_CHECK(options_.blocks >= 1 && out_features_ % (options_.blocks * tp_->size()) == 0 &&
                   (options_.blocks == 1 || !options_.gather_output) &&
                   !(options_.sequence_parallel && options_.gather_output),
               "ColumnParallelLinear (rank {} of group {}): {} blocks of out_features {} over {} "
               "ranks: out_features must be a multiple of blocks x ranks, and gather_output off "
               "(also with sequence_parallel)",
               tp_->rank(), tp_->name(), options_.blocks, out_features_, tp_->size());
  NoGradGuard no_grad;
  const int64_t k = options_.blocks;
  register_parameter("weight", shard_along_dim(full.weight(), 0, tp_->rank(), tp_->size(), k));
  if (options_.bias)
    register_parameter("bias", shard_along_dim(full.bias(), 0, tp_->rank(), tp_->size(), k));
}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           std::shared_ptr<distributed::ProcessGroup> tp,
                                           Generator& gen, const ColumnParallelOptions& options)
    : ColumnParallelLinear(Private{}, nn::Linear(in_features, out_features, gen, options.bias),
                           std::move(tp), options) {}

std::shared_ptr<ColumnParallelLinear> ColumnParallelLinear::from_full(
    const nn::Linear& full, std::shared_ptr<distributed::ProcessGroup> tp,
    const ColumnParallelOptions& options) {
  return std::make_shared<ColumnParallelLinear>(Private{}, full, std::move(tp), options);
}

std::string ColumnParallelLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}, gather_output={}, tp_size={}",
                     in_features_, out_features_, options_.bias ? "True" : "False",
                     options_.gather_output ? "True" : "False", tp_->size());
}

int64_t ColumnParallelLinear::split_dim(std::string_view name) const {
  COHORT_CHECK(name == "weight" || (options_.bias && name == "bias"),
               "{}: no parameter called '{}'", describe(), name);
  return 0;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() >= 1 && x.size(-1) == in_features_,
               "{} (rank {}): input must be [..., {}], got {}", describe(), tp_->rank(),
               in_features_, shape_str(x.sizes()));
  Tensor in = options_.sequence_parallel ? gather_from_sequence_parallel_region(x, tp_)
                                         : copy_to_tensor_parallel_region(x, tp_);
  Tensor y = linear(in, weight(), bias());
  return options_.gather_output ? gather_from_tensor_parallel_region(y, tp_) : y;
}

}  // namespace cohort::parallel
