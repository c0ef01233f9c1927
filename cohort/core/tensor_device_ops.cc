#include "cohort/core/tensor_device_ops.h"

namespace cohort {

DeviceOp<void(const Tensor&, const Tensor&)> copy_device("copy_");
DeviceOp<void(const Tensor&, double)> fill_device("fill_");

Device op_device(std::string_view op, std::initializer_list<const Tensor*> tensors,
                 bool cpu_scalars_ok) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (cpu_scalars_ok && t->dim() == 0 && t->is_cpu()) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->device() != first->device()) {
      throw InvalidArgument(fmt::format(
          "{}: expected all tensors to be on the same device, but found at least two devices, "
          "{} and {}",
          op, first->device().str(), t->device().str()));
    }
  }
  return first == nullptr ? kCPU : first->device();
}

void copy_between_devices(const Tensor& dst, const Tensor& src) {
  Device sd = src.device();
  Device dd = dst.device();
  // Dense in dst's dtype and shape on the source's device.
  Tensor s = src;
  if (s.sizes() != dst.sizes() || s.dtype() != dst.dtype() || !s.is_contiguous()) {
    s = Tensor::empty(dst.sizes(), dst.dtype(), sd);
    s.copy_(src);
  }
  Tensor d = dst.is_contiguous() ? dst : Tensor::empty(dst.sizes(), dst.dtype(), dd);
  // Copies are ordered on the device side's current stream (the destination's
  // when both are devices).
  Device side = dd.is_cpu() ? sd : dd;
  if (!sd.is_cpu() && !dd.is_cpu() && sd != dd) {
    // The source's pending work must be done before another device reads it.
    synchronize_device(sd, "copy_ between devices");
  }
  if (d.nbytes() > 0) {
    device_runtime(side, "copy_")
        .copy(d.device_data(), dd, s.device_data(), sd, d.nbytes(), current_stream(side));
  }
  if (!d.is_same(dst)) Tensor(dst).copy_(d);
}

}  // namespace cohort
