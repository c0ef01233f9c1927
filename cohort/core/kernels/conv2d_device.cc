#include "cohort/core/kernels/conv2d_device.h"

namespace cohort::kernels {

DeviceOp<Tensor(const Conv2dGeometry&, const Tensor&, const Tensor&, const Tensor&, bool)>
    conv2d_forward_device("conv2d");
DeviceOp<Conv2dGrads(const Conv2dGeometry&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, bool, bool, bool)>
    conv2d_backward_device("conv2d_backward");

}  // namespace cohort::kernels
