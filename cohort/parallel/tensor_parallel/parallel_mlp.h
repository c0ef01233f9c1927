// ParallelMLP: the tensor-parallel two-layer block of Megatron-LM,
//
//   x [..., in] -> fc1 ColumnParallelLinear(in, hidden, gather_output=false)
//     [..., hidden/p] -> activation (elementwise, on the shard)
//     -> fc2 RowParallelLinear(hidden, out, input_is_parallel=true) [..., out]
//
// which equals fc2(act(fc1(x))) of two nn::Linear layers with one all-reduce
// per forward (fc2's partial sums) and one per backward (fc1's input
// gradient). Children "fc1" and "fc2", so keys read "fc1.weight", ...
// hidden must be divisible by p = tp->size() (InvalidArgument otherwise).
// Every rank of tp must see the same x; the output is the same on all ranks.
// Ownership: shares the group. Thread safety: see nn/module.h; forward and
// backward are collectives on tp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/core/random.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"

namespace cohort::parallel {

enum class MlpActivation { kRelu, kGelu, kTanh };

struct ParallelMlpOptions {
  MlpActivation activation = MlpActivation::kRelu;
  bool bias = true;  // Generator constructor only; from_full follows the layers
};

class ParallelMLP : public nn::Cloneable<ParallelMLP> {
 public:
  // Draws fc1 = nn::Linear(in, hidden) then fc2 = nn::Linear(hidden, out)
  // from gen (nn::Linear's initialisation) and keeps this rank's parts.
  ParallelMLP(int64_t in_features, int64_t hidden_features, int64_t out_features,
              std::shared_ptr<distributed::ProcessGroup> tp, Generator& gen,
              const ParallelMlpOptions& options = {});
  // fc1's rows and fc2's columns for this rank; fc1.out_features() must equal
  // fc2.in_features().
  static std::shared_ptr<ParallelMLP> from_full(const nn::Linear& fc1, const nn::Linear& fc2,
                                                std::shared_ptr<distributed::ProcessGroup> tp,
                                                const ParallelMlpOptions& options = {});

  // x [..., in] -> [..., out].
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  ColumnParallelLinear& fc1() const { return child<ColumnParallelLinear>(0); }
  RowParallelLinear& fc2() const { return child<RowParallelLinear>(1); }

 private:
  struct Private {};

 public:
  // Internal: from_full and the Generator constructor.
  ParallelMLP(Private, const nn::Linear& fc1, const nn::Linear& fc2,
              std::shared_ptr<distributed::ProcessGroup> tp, const ParallelMlpOptions& options);

 private:
  void build(const nn::Linear& fc1, const nn::Linear& fc2,
             std::shared_ptr<distributed::ProcessGroup> tp);

  ParallelMlpOptions options_;
};

// act(x) for an MlpActivation (recorded by autograd).
Tensor apply_activation(MlpActivation activation, const Tensor& x);

}  // namespace cohort::parallel
