// Tensor-level device kernels (device_dispatch.h) of max_pool2d, for the
// autograd op (autograd/ops_conv.cc), which calls the raw-pointer CPU kernels
// of pool2d.h directly and these when its tensor is on a device. Same
// geometry and semantics as pool2d.h (argmax int32, the index within the
// input plane; padding as -inf; ties keep the first element, a NaN wins);
// float32 NCHW input of any layout. Filled by the CUDA layer.
// Thread safety: as the kernels they name. Failure: a device without a
// kernel throws NotSupported naming the op (DeviceOp).
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/kernels/pool2d.h"
#include "cohort/core/tensor.h"

namespace cohort::kernels {

struct MaxPool2dResult {
  Tensor out;     // [batch, channels, out_h, out_w] float32
  Tensor argmax;  // out's shape, int32
};
extern DeviceOp<MaxPool2dResult(const Pool2dGeometry& g, const Tensor& x)>
    max_pool2d_forward_device;
// dx [batch, channels, in_h, in_w]: dy summed at argmax.
extern DeviceOp<Tensor(const Pool2dGeometry& g, const Tensor& dy, const Tensor& argmax)>
    max_pool2d_backward_device;

}  // namespace cohort::kernels
