// Test double beside FakeCudaDevice (fake_device_testing.h): fills device
// kernel tables with the CPU entry points, run on the fake's memory (which is
// host memory), so that whole training steps -- forward, backward, optimizer
// -- run on "cuda" tensors on a machine without a GPU. What that checks is
// the plumbing around the kernels: which tensors live on which device, that
// no CPU code reads device memory, that collectives and strategies carry
// device buffers. It proves nothing about CUDA kernels (the cuda layer's
// tests do, on a GPU).
//
//   FakeCudaDevice fake;
//   FakeDeviceKernels kernels;   // every op a small MLP trains with
//
// Results of an emulated op are CPU tensors relabelled as the device's (same
// bytes, owned by the CPU allocator). Thread safety: install before the
// test's threads start; restores the tables when it goes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "cohort/core/device_dispatch.h"
#include "cohort/core/fake_device_testing.h"
#include "cohort/core/native/elementwise.h"
#include "cohort/core/native/fused_optim.h"
#include "cohort/core/native/index.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/loss.h"
#include "cohort/core/native/reduce.h"
#include "cohort/core/native/softmax.h"

namespace cohort::testing {

namespace fake_kernels {

template <typename T>
decltype(auto) on_host(T&& v) {
  return std::forward<T>(v);
}
inline Tensor on_host(const Tensor& t) { return t.defined() && !t.is_cpu() ? host_alias(t) : t; }
inline std::vector<Tensor> on_host(const std::vector<Tensor>& list) {
  std::vector<Tensor> out;
  out.reserve(list.size());
  for (const Tensor& t : list) out.push_back(on_host(t));
  return out;
}

template <typename T>
void find_device(Device& d, const T&) {}
inline void find_device(Device& d, const Tensor& t) {
  if (d.is_cpu() && t.defined() && !t.is_cpu()) d = t.device();
}
inline void find_device(Device& d, const std::vector<Tensor>& list) {
  for (const Tensor& t : list) find_device(d, t);
}

inline Tensor on_device(const Tensor& t, Device d) {
  if (!t.defined()) return t;
  std::shared_ptr<Storage> keep = t.storage();
  auto s = std::make_shared<Storage>(
      keep->data(), keep->nbytes(), [keep](void*) {}, d);
  return Tensor::from_storage(std::move(s), t.sizes(), t.strides(), t.storage_offset(), t.dtype());
}
inline std::pair<Tensor, Tensor> on_device(const std::pair<Tensor, Tensor>& p, Device d) {
  return {on_device(p.first, d), on_device(p.second, d)};
}

// Calls of emulated kernels in this process (any thread).
inline std::atomic<uint64_t> calls{0};

template <auto Cpu, typename R, typename... Args>
R emulated(Args... args) {
  calls.fetch_add(1, std::memory_order_relaxed);
  Device d = kCPU;
  (find_device(d, args), ...);
  if constexpr (std::is_void_v<R>) {
    Cpu(on_host(args)...);
  } else {
    return on_device(Cpu(on_host(args)...), d);
  }
}

}  // namespace fake_kernels

class FakeDeviceKernels {
 public:
  FakeDeviceKernels() {
    emulate<&native::binary>(native::binary_device);
    emulate<&native::binary_scalar>(native::binary_scalar_device);
    emulate<&native::rbinary_scalar>(native::rbinary_scalar_device);
    emulate<&native::compare>(native::compare_device);
    emulate<&native::compare_scalar>(native::compare_scalar_device);
    emulate<&native::unary>(native::unary_device);
    emulate<&native::clamp>(native::clamp_device);
    emulate<&native::where>(native::where_device);
    emulate<&native::axpby>(native::axpby_device);
    emulate<&native::relu_backward>(native::relu_backward_device);
    emulate<&native::tanh_backward>(native::tanh_backward_device);
    emulate<&native::sigmoid_backward>(native::sigmoid_backward_device);
    emulate<&native::clamp_backward>(native::clamp_backward_device);
    emulate<&native::sum>(native::sum_device);
    emulate<&native::mean>(native::mean_device);
    emulate<&native::max>(native::max_device);
    emulate<&native::min>(native::min_device);
    emulate<&native::mm>(native::mm_device);
    emulate<&native::matmul>(native::matmul_device);
    emulate<&native::linear>(native::linear_device);
    emulate<&native::softmax>(native::softmax_device);
    emulate<&native::log_softmax>(native::log_softmax_device);
    emulate<&native::log_softmax_backward>(native::log_softmax_backward_device);
    emulate<&native::softmax_backward>(native::softmax_backward_device);
    emulate<&native::nll_loss>(native::nll_loss_device);
    emulate<&native::nll_loss_backward>(native::nll_loss_backward_device);
    emulate<&native::sgd_step>(native::sgd_step_device);
    emulate<&native::adam_step>(native::adam_step_device);
    emulate<&native::total_norm>(native::total_norm_device);
    emulate<&native::scale_by_norm>(native::scale_by_norm_device);
  }
  ~FakeDeviceKernels() {
    for (auto it = restore_.rbegin(); it != restore_.rend(); ++it) (*it)();
  }
  FakeDeviceKernels(const FakeDeviceKernels&) = delete;
  FakeDeviceKernels& operator=(const FakeDeviceKernels&) = delete;

 private:
  template <auto Cpu, typename R, typename... Args>
  void emulate(DeviceOp<R(Args...)>& op) {
    restore_.push_back([&op, previous = op] { op = previous; });
    op.set(DeviceType::kCUDA, &fake_kernels::emulated<Cpu, R, Args...>);
  }

  std::vector<std::function<void()>> restore_;
};

}  // namespace cohort::testing
