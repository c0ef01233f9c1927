// Per-op kernel tables for devices other than the CPU. Each core op that has
// a device kernel declares one DeviceOp beside its CPU entry point (e.g.
// native::binary_device in native/elementwise.h); the device layer
// (cohort/cuda) fills the entries at start-up, the way the ISA kernels are
// chosen once, and the CPU entry point forwards to it when its tensors are
// on that device:
//
//   Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
//     if (Device d = op_device("add", {&a, &b}); !d.is_cpu()) return binary_device(d, op, a, b);
//     ... CPU code ...
//
// op_device() is the one check that every tensor of an op is on one device
// (PyTorch's "Expected all tensors to be on the same device" error, naming
// both devices), and a missing entry says the op has no kernel for that
// device yet instead of reading device memory on the CPU.
// Thread safety: entries are set before other threads run ops (start-up) and
// only read afterwards.
#pragma once

#include <array>
#include <initializer_list>
#include <string_view>

#include "cohort/base/error.h"
#include "cohort/core/device_runtime.h"
#include "cohort/core/tensor.h"

namespace cohort {

// The device of an op's tensors (undefined handles are skipped; the CPU when
// there are none). Throws InvalidArgument naming the op and two devices when
// they differ. A 0-d CPU tensor is allowed beside device tensors, as PyTorch's
// CPU scalars are, only where the op says so (`cpu_scalars_ok`).
Device op_device(std::string_view op, std::initializer_list<const Tensor*> tensors,
                 bool cpu_scalars_ok = false);

template <typename Sig>
class DeviceOp;

template <typename R, typename... Args>
class DeviceOp<R(Args...)> {
 public:
  using Fn = R (*)(Args...);
  constexpr explicit DeviceOp(const char* name) : name_(name) {}

  void set(DeviceType type, Fn fn) { fns_[static_cast<size_t>(type)] = fn; }
  bool has(DeviceType type) const { return fns_[static_cast<size_t>(type)] != nullptr; }
  const char* name() const { return name_; }

  template <typename... A>
  R operator()(Device device, A&&... args) const {
    Fn fn = fns_[static_cast<size_t>(device.type())];
    if (fn == nullptr) {
      // Names the build's limit when no device layer is there at all.
      device_runtime(device, name_);
      throw NotSupported(fmt::format("{}: no kernel for {} tensors yet; move them with .cpu()",
                                     name_, device.str()));
    }
    return fn(std::forward<A>(args)...);
  }

 private:
  const char* name_;
  std::array<Fn, kDeviceTypes> fns_{};
};

}  // namespace cohort
