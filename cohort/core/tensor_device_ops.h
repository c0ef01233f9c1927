// The device kernels behind Tensor's own members (copy_, fill_, clone, to):
// entries the device layer fills (device_dispatch.h), and the copy between
// devices, which goes through the device runtime.
// Thread safety: as Tensor's members.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort {

// dst <- src on one device: src broadcast to dst's shape, converted to dst's
// dtype, any strides (Tensor::copy_ has checked the shapes).
extern DeviceOp<void(const Tensor& dst, const Tensor& src)> copy_device;
// Every element of dst (any strides) <- value in dst's dtype.
extern DeviceOp<void(const Tensor& dst, double value)> fill_device;

// dst <- src where the two are on different devices: src is made dense in
// dst's dtype on its own device, its bytes cross in one copy of the device
// runtime (staged through pinned memory on the host side), and a strided dst
// is written from a dense copy on its device.
void copy_between_devices(const Tensor& dst, const Tensor& src);

}  // namespace cohort
