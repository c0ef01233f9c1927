// Cross-entropy over class logits without the probability tensor: the kernels
// behind cohort::cross_entropy (not recorded by autograd).
//
// Shapes: logits [N, C] (or [C] with a 0-d or [1] target), target integer
// [N] of class indices in [0, C) or equal to ignore_index (that row is
// skipped: loss 0 under kNone, left out of the sum and of the mean's count).
// Reductions as PyTorch's F.cross_entropy: kNone [N], kSum and kMean 0-d,
// kMean divided by the number of rows not ignored (NaN when every row is).
// Forward computes each row's log-sum-exp over the classes in chunks with a
// running maximum and keeps only lse [N] (the logits' dtype); loss_i = lse_i -
// logits[i, t_i]. Backward writes d logits = (softmax - onehot) * g_i row by
// row straight into the gradient, the only [N, C] tensor it allocates.
// float32 runs the row loops of transformer_rows.h for the kernel path in use
// (vectorised exp on avx2 / avx512); float64 scalar loops in double. Rows are
// split over the caller's thread budget. Sums over rows are in double.
// Thread safety: reentrant. Failure: shapes, a non-integer target or a class
// index out of range throw InvalidArgument naming the row and the range;
// [N, C, d...] logits throw InvalidArgument (not supported; flatten them to
// [N*d, C] after moving C last).
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/native/loss.h"
#include "cohort/core/tensor.h"

namespace cohort::kernels {

struct CrossEntropyResult {
  Tensor loss;  // per reduction
  Tensor lse;   // [N], saved for the backward
};
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                                 int64_t ignore_index);
// grad: the loss's gradient (0-d for kSum / kMean, [N] for kNone).
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& lse, Reduction reduction, int64_t ignore_index);

// Device kernels (device_dispatch.h) behind the two functions above, the same
// contract except: logits float32 or bfloat16, lse float32, the loss
// float32; a target out of range is not reported (the device does not stop):
// its row's loss and gradient are NaN.
extern DeviceOp<CrossEntropyResult(const Tensor& logits, const Tensor& target, Reduction reduction,
                                   int64_t ignore_index)>
    cross_entropy_device;
extern DeviceOp<Tensor(const Tensor& grad, const Tensor& logits, const Tensor& target,
                       const Tensor& lse, Reduction reduction, int64_t ignore_index)>
    cross_entropy_backward_device;

}  // namespace cohort::kernels
