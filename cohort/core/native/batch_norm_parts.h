// Batch normalisation cut into the parts that a batch spread over several
// processes needs, as PyTorch's batch_norm_stats, batch_norm_elemt,
// batch_norm_backward_reduce and batch_norm_backward_elemt: the per-channel
// statistics of this process's batch; the normalisation with statistics
// that came from elsewhere (the whole group's); and the backward in two
// halves, whose per-channel sums the caller may reduce over the processes in
// between. parallel/sync_batchnorm.h puts them together; norm.h's
// batch_norm is the one-process form and the oracle of the tests.
//
// x and grad: [N, C, *] float32 or float64 on the CPU, any strides; N may be
// 0. Statistics and sums: [C] float64. `count` is values per channel
// (N times the spatial size). Not recorded by autograd.
// Thread safety: pure functions (parallel over channels inside).
// Failure: InvalidArgument naming the op and the shapes that do not fit.
#pragma once

#include <cstdint>

#include "cohort/core/tensor.h"

namespace cohort::native {

struct BatchNormStats {
  Tensor mean;  // [C] float64; zeros for an empty batch
  Tensor var;   // [C] float64, biased (divided by count); zeros for an empty batch
  int64_t count = 0;
};
BatchNormStats batch_norm_stats(const Tensor& x);

// (x - mean) * invstd * weight + bias, per channel; weight and bias [C] or
// undefined (1 and 0). Returns x's dtype and shape, contiguous.
Tensor batch_norm_elemt(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& weight, const Tensor& bias);

struct BatchNormGradSums {
  Tensor sum_dy;       // [C] float64: sum of grad
  Tensor sum_dy_xhat;  // [C] float64: sum of grad * (x - mean) * invstd
};
BatchNormGradSums batch_norm_backward_reduce(const Tensor& grad, const Tensor& x,
                                             const Tensor& mean, const Tensor& invstd);

// The input gradient of a training-mode batch norm whose statistics were
// taken over `count` values per channel, given the sums over those values:
// weight * invstd * (grad - sum_dy / count - xhat * sum_dy_xhat / count).
Tensor batch_norm_backward_elemt(const Tensor& grad, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xhat, int64_t count);

}  // namespace cohort::native
