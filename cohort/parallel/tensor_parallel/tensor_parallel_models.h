// The reference models split for tensor parallelism, for the CLI and the
// tests. Every rank of the tensor-parallel group feeds the same batch and
// gets the same output; the parameters have the unsplit model's names, so
// full_state_dict() (full_state_dict.h) of a split model has the keys and
// shapes of the original's state_dict(), and clip_grad_norm_tensor_parallel
// clips as the original would be clipped.
//
//   make_tensor_parallel_net(net, tp): Net (nn/models/net.h) with
//     conv1, conv2 replicated (copies), fc1 ColumnParallelLinear(2000, 50,
//     gather_output=false), relu on the shard, fc2 RowParallelLinear(50, 10,
//     input_is_parallel=true), log_softmax: one all-reduce forward (fc2) and
//     one backward (fc1's input gradient). Needs 50 % tp->size() == 0.
//   make_tensor_parallel_mlp(seq, tp): a Sequential such as make_mlp's, child
//     by child (same names): Linear layers are paired in order as column
//     (gather_output=false) then row (input_is_parallel=true) when only
//     elementwise activations (ReLU, GELU, Tanh, Sigmoid) stand between them;
//     a Linear left without a partner stays replicated (a copy); every other
//     child is copied. Split features must be divisible by tp->size().
//
// Both copy the weights of the model given (which is not changed or kept),
// so a split model starts exactly where the original is. Divisibility
// failures throw InvalidArgument naming the numbers and the rank.
// Ownership: the returned modules share tp. Thread safety: see nn/module.h.
#pragma once

#include <memory>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/net.h"
#include "cohort/nn/module.h"
#include "cohort/nn/sequential.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"

namespace cohort::parallel {

// Net with fc1/fc2 split; see the header comment.
class TensorParallelNet : public nn::Cloneable<TensorParallelNet> {
 public:
  TensorParallelNet(const nn::Net& full, std::shared_ptr<distributed::ProcessGroup> tp);

  // x [N, 1, 28, 28] float32 -> log-probabilities [N, 10] (the same on every rank).
  Tensor forward(const Tensor& x) override;

  nn::Conv2d& conv1() const { return child<nn::Conv2d>(0); }
  nn::Conv2d& conv2() const { return child<nn::Conv2d>(1); }
  ColumnParallelLinear& fc1() const { return child<ColumnParallelLinear>(2); }
  RowParallelLinear& fc2() const { return child<RowParallelLinear>(3); }
};

nn::ModulePtr make_tensor_parallel_net(const nn::Net& full,
                                       std::shared_ptr<distributed::ProcessGroup> tp);

std::shared_ptr<nn::Sequential> make_tensor_parallel_mlp(
    const nn::Sequential& full_mlp, std::shared_ptr<distributed::ProcessGroup> tp);

}  // namespace cohort::parallel
