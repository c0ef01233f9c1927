// The two paths of CUDA torch::Tensors through cohort (cuda_tensors.h): the
// choice, LibTorch's current stream as cohort's, the zero-copy wrapper and
// the host staging.
#include "cohort/libtorch/cuda_tensors.h"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>

#include <cstdint>

#include "cohort/base/error.h"
#include "cohort/libtorch/process_group.h"

namespace cohort::libtorch {

std::string_view cuda_tensor_path_name(CudaTensorPath path) {
  return path == CudaTensorPath::kZeroCopy ? "zero copy" : "host staging";
}

CudaTensorPathChoice choose_cuda_tensor_path(const CudaTensorEnvironment& env) {
  const std::string torch = fmt::format("LibTorch {}.{}", env.torch_major, env.torch_minor);
  auto staging = [](std::string why) {
    return CudaTensorPathChoice{CudaTensorPath::kHostStaging, std::move(why)};
  };
  if (!env.torch_names_streams) {
    return staging(fmt::format(
        "{} cannot name its current CUDA stream to cohort (it has no c10::Stream::native_handle, "
        "which PyTorch 2.11 added), so CUDA tensors are copied to the host and back",
        torch));
  }
  if (!env.torch_has_cuda) {
    return staging(
        fmt::format("{} was built without CUDA (no CUDA device guard registered)", torch));
  }
  if (!env.cohort_has_cuda) {
    return staging(
        "cohort was built without its CUDA layer (COHORT_WITH_CUDA), so it cannot take device "
        "memory; CUDA tensors are copied to the host and back");
  }
  if (env.cohort_devices <= 0) {
    return staging(
        fmt::format("cohort's CUDA layer sees no device ({}); CUDA tensors are copied "
                    "to the host and back",
                    env.cohort_unavailable));
  }
  return CudaTensorPathChoice{
      CudaTensorPath::kZeroCopy,
      fmt::format("{} names its current CUDA stream and cohort's CUDA layer sees {} device(s): "
                  "ops run on the tensors' memory, ordered on LibTorch's current stream",
                  torch, env.cohort_devices)};
}

CudaTensorEnvironment cuda_tensor_environment() {
  CudaTensorEnvironment env;
  env.torch_major = TORCH_VERSION_MAJOR;
  env.torch_minor = TORCH_VERSION_MINOR;
  env.torch_names_streams = detail::torch_names_cuda_streams();
  env.torch_has_cuda = c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA);
  if (DeviceRuntime* rt = find_device_runtime(DeviceType::kCUDA)) {
    env.cohort_has_cuda = true;
    env.cohort_devices = rt->device_count();
    if (env.cohort_devices <= 0) env.cohort_unavailable = rt->unavailable_reason();
  }
  return env;
}

CudaTensorPathChoice cuda_tensor_path() {
  return choose_cuda_tensor_path(cuda_tensor_environment());
}

namespace detail {
namespace {

// s.native_handle() where S has it; never called otherwise.
template <typename S>
void* native_handle_of(const S& s) {
  if constexpr (has_native_handle<S>) {
    return s.native_handle();
  } else {
    throw NotSupported("this LibTorch has no c10::Stream::native_handle()");
  }
}

}  // namespace

bool torch_names_cuda_streams() { return has_native_handle<c10::Stream>; }

Stream stream_for_torch_handle(Device device, void* handle) {
  if (handle == nullptr) return Stream{device, nullptr, 0};
  // Pointers of user space fit in 63 bits: distinct streams, distinct ids.
  const auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
  return Stream{device, handle, (uint64_t{1} << 63) | bits};
}

std::optional<Stream> torch_current_stream(int index) {
  if (!torch_names_cuda_streams() || !c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    return std::nullopt;
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
  const c10::Stream s = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
  return stream_for_torch_handle(Device(DeviceType::kCUDA, index), native_handle_of(s));
}

TorchStreamScope::TorchStreamScope(int index) {
  if (std::optional<Stream> s = torch_current_stream(index)) guard_.emplace(*s);
}

DType to_cohort_dtype(c10::ScalarType type) {
  switch (to_data_type(type)) {
    case DataType::kFloat32:
      return DType::kFloat32;
    case DataType::kFloat64:
      return DType::kFloat64;
    case DataType::kInt32:
      return DType::kInt32;
    case DataType::kInt64:
      return DType::kInt64;
    case DataType::kUInt8:
      return DType::kUInt8;
    case DataType::kBFloat16:
      return DType::kBFloat16;
    case DataType::kFloat16:
      return DType::kFloat16;
    case DataType::kInt8:
    case DataType::kBool:
      break;  // the collectives take them; cohort's tensors have no such dtype
  }
  throw InvalidArgument(
      fmt::format("to_cohort_dtype: no cohort dtype for {}", c10::toString(type)));
}

Tensor wrap_device_memory(const at::Tensor& t) {
  COHORT_CHECK(t.is_contiguous(), "wrap_device_memory: the tensor must be contiguous");
  const Device device(DeviceType::kCUDA, t.device().has_index() ? t.device().index() : 0);
  void* data = t.numel() == 0 ? nullptr : t.data_ptr();
  // The deleter holds `t`: LibTorch's allocator keeps the block while any
  // cohort tensor (or a queued op holding one) views it; cohort never frees it.
  return Tensor::from_blob(data, {t.numel()}, to_cohort_dtype(t.scalar_type()), device,
                           [keep = t](void*) mutable { keep.reset(); });
}

at::Tensor HostStaging::host(const at::Tensor& t) const {
  if (!t.defined()) return t;
  if (t.is_cuda()) return t.to(at::kCPU);
  // Tests only: a copy like the one .to(kCPU) makes of a CUDA tensor.
  return stage_cpu_ ? t.clone() : t;
}

at::Tensor HostStaging::in(const at::Tensor& t) const { return host(t); }

std::vector<at::Tensor> HostStaging::in(const std::vector<at::Tensor>& list) const {
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const at::Tensor& t : list) out.push_back(host(t));
  return out;
}

at::Tensor HostStaging::out(const at::Tensor& t) {
  at::Tensor h = host(t);
  if (h.defined() && !h.is_same(t)) back_.emplace_back(t, h);
  return h;
}

std::vector<at::Tensor> HostStaging::out(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> res;
  res.reserve(list.size());
  for (const at::Tensor& t : list) res.push_back(out(t));
  return res;
}

Work HostStaging::done(Work work) {
  auto copy_back = [back = std::move(back_)] {
    at::NoGradGuard no_grad;
    for (const auto& [t, h] : back) t.copy_(h);
  };
  back_.clear();
  if (!work.defined()) {
    copy_back();
    return Work();
  }
  return chain(std::move(work), {}, std::move(copy_back));
}

}  // namespace detail
}  // namespace cohort::libtorch
