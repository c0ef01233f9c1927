// native/fused_optim.h on a CUDA device: the lists (checked by core's entry
// points) become FusedTensor rows and go to fused_optim.cu's multi-tensor
// kernels on the parameters' current stream. The norm is a 0-d float64
// device tensor; scale_by_norm reads it on the device.
#include "cohort/core/native/fused_optim.h"

#include <cmath>

#include "cohort/cuda/pointwise_host.h"
#include "cohort/cuda/pointwise_launch.h"
#include "cohort/cuda/pointwise_register.h"

namespace cohort::cuda {
namespace {

void* data_or_null(const std::vector<Tensor>& list, size_t i) {
  return i < list.size() && list[i].defined() ? list[i].device_data() : nullptr;
}

void cuda_sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& bufs, const std::vector<uint8_t>& first,
                   const native::SgdStep& s) {
  if (params.empty()) return;
  const bool momentum = s.momentum != 0;
  std::vector<FusedTensor> rows(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].storage()->bump_version();
    if (momentum) bufs[i].storage()->bump_version();
    rows[i].p = params[i].device_data();
    rows[i].g = grads[i].device_data();
    rows[i].a = momentum ? bufs[i].device_data() : nullptr;
    rows[i].n = params[i].numel();
    rows[i].s0 = momentum && first[i] != 0 ? 1.0 : 0.0;
  }
  const SgdConsts c{s.lr,
                    s.momentum,
                    1.0 - s.dampening,
                    s.weight_decay,
                    s.maximize ? -1.0 : 1.0,
                    s.weight_decay != 0,
                    momentum,
                    s.nesterov};
  launch_sgd_step(params[0].dtype(), rows, c, stream_of(params[0]));
}

void cuda_adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                    const std::vector<Tensor>& max_exp_avg_sq, const std::vector<double>& steps,
                    const native::AdamStep& s) {
  if (params.empty()) return;
  std::vector<FusedTensor> rows(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].storage()->bump_version();
    exp_avg[i].storage()->bump_version();
    exp_avg_sq[i].storage()->bump_version();
    if (s.amsgrad) max_exp_avg_sq[i].storage()->bump_version();
    rows[i].p = params[i].device_data();
    rows[i].g = grads[i].device_data();
    rows[i].a = exp_avg[i].device_data();
    rows[i].b = exp_avg_sq[i].device_data();
    rows[i].c = s.amsgrad ? data_or_null(max_exp_avg_sq, i) : nullptr;
    rows[i].n = params[i].numel();
    // optim/adam.cc's bias corrections, per parameter (steps may differ).
    rows[i].s0 = std::sqrt(1.0 - std::pow(s.beta2, steps[i]));
    rows[i].s1 = -(s.lr / (1.0 - std::pow(s.beta1, steps[i])));
  }
  AdamConsts c;
  c.sign = s.maximize ? -1.0 : 1.0;
  c.weight_decay = s.weight_decay;
  c.decay_factor = 1.0 - s.lr * s.weight_decay;
  c.beta1 = s.beta1;
  c.beta2 = s.beta2;
  c.one_beta1 = 1.0 - s.beta1;
  c.one_beta2 = 1.0 - s.beta2;
  c.eps = s.eps;
  c.decay = s.weight_decay == 0 ? 0 : s.decoupled ? 2 : 1;
  c.amsgrad = s.amsgrad;
  launch_adam_step(params[0].dtype(), rows, c, stream_of(params[0]));
}

std::vector<FusedTensor> rows_of(const std::vector<Tensor>& tensors) {
  std::vector<FusedTensor> rows(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    rows[i].p = tensors[i].device_data();
    rows[i].n = tensors[i].numel();
  }
  return rows;
}

Tensor cuda_total_norm(const std::vector<Tensor>& tensors, double p) {
  Device d = tensors[0].device();
  std::vector<FusedTensor> rows = rows_of(tensors);
  Tensor scratch = Tensor::empty({total_norm_scratch(rows)}, DType::kFloat64, d);
  Tensor out = Tensor::empty({}, DType::kFloat64, d);
  launch_total_norm(tensors[0].dtype(), rows, p, scratch.device_ptr<double>(),
                    out.device_ptr<double>(), stream_of(out));
  return out;
}

void cuda_scale_by_norm(const std::vector<Tensor>& tensors, const Tensor& norm_in,
                        double max_norm) {
  Tensor norm = norm_in.to(DType::kFloat64).contiguous();
  for (const Tensor& t : tensors) t.storage()->bump_version();
  launch_scale_by_norm(tensors[0].dtype(), rows_of(tensors), norm.device_ptr<double>(), max_norm,
                       stream_of(norm));
}

}  // namespace

void register_fused_optim_kernels() {
  constexpr DeviceType kCuda = DeviceType::kCUDA;
  native::sgd_step_device.set(kCuda, &cuda_sgd_step);
  native::adam_step_device.set(kCuda, &cuda_adam_step);
  native::total_norm_device.set(kCuda, &cuda_total_norm);
  native::scale_by_norm_device.set(kCuda, &cuda_scale_by_norm);
}

}  // namespace cohort::cuda
