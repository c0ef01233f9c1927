// Softmax family along one dim (not recorded by autograd). Rows are computed
// with the max subtracted first (stable); parallel over rows. The reference
// versions are plain float64 loops used as oracles in tests.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// grad_in = grad - exp(out) * sum(grad, dim)      (out = log_softmax(x))
Tensor log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim);
// grad_in = out * (grad - sum(grad * out, dim))   (out = softmax(x))
Tensor softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim);

// Device kernels of the four ops above (device_dispatch.h).
extern DeviceOp<Tensor(const Tensor&, int64_t)> softmax_device;
extern DeviceOp<Tensor(const Tensor&, int64_t)> log_softmax_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&, int64_t)> log_softmax_backward_device;
extern DeviceOp<Tensor(const Tensor&, const Tensor&, int64_t)> softmax_backward_device;

Tensor log_softmax_reference(const Tensor& x, int64_t dim);

}  // namespace cohort::native
