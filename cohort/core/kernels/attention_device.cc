#include "cohort/core/kernels/attention_device.h"

namespace cohort::kernels {

DeviceOp<void(const AttentionShape&, const DeviceHeadRows&, const DeviceHeadRows&,
              const DeviceHeadRows&, const DeviceHeadRows&, const Tensor&)>
    attention_forward_device("scaled_dot_product_attention");
DeviceOp<void(const AttentionShape&, const DeviceHeadRows&, const DeviceHeadRows&,
              const DeviceHeadRows&, const DeviceHeadRows&, const Tensor&, const DeviceHeadRows&,
              const DeviceHeadRows&, const DeviceHeadRows&, const DeviceHeadRows&)>
    attention_backward_device("scaled_dot_product_attention_backward");

}  // namespace cohort::kernels
