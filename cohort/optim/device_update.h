// Internal to the optimizers: the parameters of a step that live on a device,
// gathered for one fused multi-tensor update (core's native/fused_optim.h),
// as DenseUpdate (update_util.h) gathers the CPU ones: contiguous work views
// of the parameters (copied back by finish() where a parameter is not
// contiguous), gradients in the parameter's dtype, the state tensors and one
// number per parameter (SGD's first-step flag, Adam's step count). A fused
// update runs on one device: by_device() splits a model spread over several
// (the tutorials' ToyMpModel) into one update per device, as PyTorch's
// foreach and fused optimizers group their tensors.
// Not part of the public API. Thread safety: one step's, single-threaded.
#pragma once

#include <array>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/core/tensor_dict.h"

namespace cohort::optim {

// The positions of `tensors` grouped by device, groups in order of each
// device's first tensor (a fused kernel runs on one device).
std::vector<std::vector<size_t>> indices_by_device(const std::vector<Tensor>& tensors);

// st[key] on p's device: state created or loaded on another device (a
// checkpoint read on the CPU, then the model moved) is moved to p's, once.
Tensor state_on(TensorDict& st, const char* key, const Tensor& p);

class DeviceUpdates {
 public:
  static constexpr size_t kMaxState = 3;

  explicit DeviceUpdates(const char* optimizer) : optimizer_(optimizer) {}
  // p on a device, its gradient, up to kMaxState state tensors (undefined
  // where the optimizer has none). Throws InvalidArgument naming the
  // optimizer for a non-float parameter or a gradient of another shape.
  void add(const Tensor& p, const Tensor& grad, std::initializer_list<Tensor> state,
           double extra = 0);
  bool empty() const { return params_.empty(); }
  const std::vector<Tensor>& params() const { return work_; }
  const std::vector<Tensor>& grads() const { return grads_; }
  const std::vector<Tensor>& state(size_t k) const { return state_[k]; }
  const std::vector<double>& extras() const { return extras_; }
  // The same updates, one per device (in order of first appearance).
  std::vector<DeviceUpdates> by_device() const;
  // Writes the work copies back into non-contiguous parameters.
  void finish() const;

 private:
  const char* optimizer_;
  std::vector<Tensor> params_, work_, grads_;
  std::array<std::vector<Tensor>, kMaxState> state_;
  std::vector<double> extras_;
};

}  // namespace cohort::optim
