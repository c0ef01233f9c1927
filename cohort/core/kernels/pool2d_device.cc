#include "cohort/core/kernels/pool2d_device.h"

namespace cohort::kernels {

DeviceOp<MaxPool2dResult(const Pool2dGeometry&, const Tensor&)> max_pool2d_forward_device(
    "max_pool2d");
DeviceOp<Tensor(const Pool2dGeometry&, const Tensor&, const Tensor&)> max_pool2d_backward_device(
    "max_pool2d_backward");

}  // namespace cohort::kernels
