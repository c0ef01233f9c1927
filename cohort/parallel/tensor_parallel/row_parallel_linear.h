// RowParallelLinear: y = x W^T + b with W split by input features over a
// tensor-parallel group, as Megatron-LM's RowParallelLinear. With p =
// tp->size() and r = tp->rank(), rank r holds columns [r*in/p, (r+1)*in/p)
// of the full weight [out, in]; the bias [out] is not split (every rank holds
// all of it and adds it once, after the reduction):
//
//   x -> input_is_parallel ? x [..., in/p] (e.g. a ColumnParallelLinear's
//        sharded output) : scatter_to_tensor_parallel_region(x [..., in])
//     -> x_r W_r^T  [..., out] (this rank's partial sum)
//     -> reduce_from_tensor_parallel_region (all-reduce) -> + b  [..., out]
//
// The output is the same on every rank. Parameter names "weight" (the shard)
// and "bias" (replicated), as nn::Linear's. Construction gives the unsplit
// layer's values (from_full, or the Generator constructor drawing as
// nn::Linear does); in_features not divisible by p throws InvalidArgument
// naming both numbers and the rank.
// Ownership: shares the group. Thread safety: see nn/module.h; forward and
// backward run collectives on tp, so every rank calls them in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/core/random.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"

namespace cohort::parallel {

struct RowParallelOptions {
  bool bias = true;  // Generator constructor only; from_full follows the layer
  bool input_is_parallel = true;
  // Sequence parallelism: the partial products are reduce-scattered along T
  // (dim 1 of [B, T, out]) instead of all-reduced, giving this rank's
  // positions [B, T/p, out]; the bias is then added to them (its gradient is
  // partial: TensorParallelGPT::reduce_sequence_parallel_gradients sums it).
  bool sequence_parallel = false;
};

class RowParallelLinear : public nn::Cloneable<RowParallelLinear>, public TensorParallelLayer {
 public:
  // Draws the full weight and bias from gen as nn::Linear(in, out, gen,
  // options.bias) would, and keeps this rank's columns (and all of the bias).
  RowParallelLinear(int64_t in_features, int64_t out_features,
                    std::shared_ptr<distributed::ProcessGroup> tp, Generator& gen,
                    const RowParallelOptions& options = {});
  // This rank's columns of full's weight and full's bias (copied).
  static std::shared_ptr<RowParallelLinear> from_full(const nn::Linear& full,
                                                      std::shared_ptr<distributed::ProcessGroup> tp,
                                                      const RowParallelOptions& options = {});

  // x [..., in/p] (input_is_parallel) or [..., in] -> [..., out].
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t split_dim(std::string_view name) const override;
  const std::shared_ptr<distributed::ProcessGroup>& tensor_parallel_group() const override {
    return tp_;
  }

  int64_t in_features() const { return in_features_; }  // the full layer's
  int64_t in_features_per_rank() const { return in_features_ / tp_->size(); }
  int64_t out_features() const { return out_features_; }
  bool input_is_parallel() const { return options_.input_is_parallel; }
  bool has_bias() const { return options_.bias; }
  const Tensor& weight() const { return param(0); }                    // [out, in/p]
  Tensor bias() const { return options_.bias ? param(1) : Tensor(); }  // [out]

 private:
  struct Private {};

 public:
  // Internal (from_full and the Generator constructor): copies this rank's
  // part of full's tensors; the bias follows full.
  RowParallelLinear(Private, const nn::Linear& full, std::shared_ptr<distributed::ProcessGroup> tp,
                    const RowParallelOptions& options);

 private:
  std::shared_ptr<distributed::ProcessGroup> tp_;
  int64_t in_features_;
  int64_t out_features_;
  RowParallelOptions options_;
};

}  // namespace cohort::parallel
