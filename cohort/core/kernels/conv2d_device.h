// Tensor-level device kernels (device_dispatch.h) of conv2d, for the autograd
// op (autograd/ops_conv.cc), which calls the raw-pointer CPU kernels of
// conv2d.h directly and these when its tensors are on a device. Same
// geometry and semantics as conv2d.h; float32 NCHW tensors of any layout
// (made contiguous); results are new contiguous tensors on the input's
// device. Filled by the CUDA layer (cuDNN).
// Thread safety: as the kernels they name. Failure: a device without a
// kernel throws NotSupported naming the op (DeviceOp).
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/kernels/conv2d.h"
#include "cohort/core/tensor.h"

namespace cohort::kernels {

// y [batch, out_channels, out_h, out_w] = conv(x, w) + b (b undefined: no
// bias), then ReLU when `relu`.
extern DeviceOp<Tensor(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                       bool relu)>
    conv2d_forward_device;

struct Conv2dGrads {
  Tensor dx, dw, db;  // undefined where not asked for
};
// The gradients from dy (y's shape). y_relu: the forward's output when it
// had a ReLU (dy is masked by y_relu > 0 first), else undefined.
extern DeviceOp<Conv2dGrads(const Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                            const Tensor& dy, const Tensor& y_relu, bool need_dx, bool need_dw,
                            bool need_db)>
    conv2d_backward_device;

}  // namespace cohort::kernels
