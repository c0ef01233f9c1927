// ColumnParallelLinear: y = x W^T + b with W split by output features over a
// tensor-parallel group, as Megatron-LM's ColumnParallelLinear. With p =
// tp->size() and r = tp->rank(), rank r holds rows [r*out/p, (r+1)*out/p) of
// the full weight [out, in] and the same slice of the bias [out]:
//
//   x [..., in] -> copy_to_tensor_parallel_region (backward: all-reduce of
//     the input gradient) -> x W_r^T + b_r  [..., out/p]
//     -> gather_output ? all-gather along the last dim [..., out] : as is
//
// gather_output = false keeps the output sharded to feed a RowParallelLinear
// with input_is_parallel = true (ParallelMLP), which saves the all-gather.
// Every rank must see the same x. Parameters are called "weight" and "bias"
// (the shards), so a model's state-dict keys stay those of the unsplit model;
// full_state_dict() (full_state_dict.h) rebuilds the full tensors.
//
// Construction gives the unsplit layer's values: from_full slices an
// nn::Linear; the Generator constructor draws the full weight and bias
// exactly as nn::Linear does (so one seed gives one model whatever p is) and
// keeps this rank's rows. out_features not divisible by p throws
// InvalidArgument naming both numbers and the rank.
// Ownership: shares the group (clones share it too). Thread safety: see
// nn/module.h; forward and backward run collectives on tp (mappings.h), so
// every rank of tp calls them in the same order.
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

struct ColumnParallelOptions {
  bool bias = true;  // Generator constructor only; from_full follows the layer
  bool gather_output = true;
  // The output features as `blocks` equal blocks, each split over the ranks
  // (rank r holds rows piece r of every block, in block order): 3 for an
  // attention projection packing q | k | v, so that each rank holds whole
  // heads of all three. Needs out % (blocks * p) == 0 and gather_output off
  // (the gathered columns would be rank-major, not the full layer's order).
  int64_t blocks = 1;
  // Sequence parallelism: the input is this rank's positions [B, T/p, in]
  // and is all-gathered along T (its gradient reduce-scattered) instead of
  // copied. Needs gather_output off.
  bool sequence_parallel = false;
};

class ColumnParallelLinear : public nn::Cloneable<ColumnParallelLinear>,
                             public TensorParallelLayer {
 public:
  // Draws the full [out, in] weight and [out] bias from gen as nn::Linear(in,
  // out, gen, options.bias) would, and keeps this rank's rows.
  ColumnParallelLinear(int64_t in_features, int64_t out_features,
                       std::shared_ptr<distributed::ProcessGroup> tp, Generator& gen,
                       const ColumnParallelOptions& options = {});
  // This rank's rows of full's weight and bias (copied); bias iff full has one.
  static std::shared_ptr<ColumnParallelLinear> from_full(
      const nn::Linear& full, std::shared_ptr<distributed::ProcessGroup> tp,
      const ColumnParallelOptions& options = {});

  // x [..., in] -> [..., out] (gather_output) or [..., out/p].
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t split_dim(std::string_view name) const override;
  int64_t split_blocks(std::string_view name) const override { return options_.blocks; }
  const std::shared_ptr<distributed::ProcessGroup>& tensor_parallel_group() const override {
    return tp_;
  }

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }  // the full layer's
  int64_t out_features_per_rank() const { return out_features_ / tp_->size(); }
  bool gather_output() const { return options_.gather_output; }
  bool has_bias() const { return options_.bias; }
  const Tensor& weight() const { return param(0); }                    // [out/p, in]
  Tensor bias() const { return options_.bias ? param(1) : Tensor(); }  // [out/p]

 private:
  struct Private {};

 public:
  // Internal (from_full and the Generator constructor): copies this rank's
  // part of full's tensors; the bias follows full.
  ColumnParallelLinear(Private, const nn::Linear& full,
                       std::shared_ptr<distributed::ProcessGroup> tp,
                       const ColumnParallelOptions& options);

 private:
  std::shared_ptr<distributed::ProcessGroup> tp_;
  int64_t in_features_;
  int64_t out_features_;
  ColumnParallelOptions options_;
};

}  // namespace cohort::parallel
