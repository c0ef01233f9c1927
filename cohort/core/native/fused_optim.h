// Fused optimizer updates over many tensors at once, for any device: an SGD
// (momentum, Nesterov, weight decay) or Adam / AdamW step over a list of
// parameters, and the global norm of a list of gradients with the scaling
// that clip_grad_norm applies. cohort/optim calls these for parameters on a
// device, where one kernel launch updates every tensor and the norm stays on
// the device (no host round trip but the one scalar clip_grad_norm returns);
// its CPU path keeps its own vectorised loops (optim/update_kernels.h), whose
// formulas the reference loops here repeat term for term: they are the
// oracle of the device kernels' tests.
//
// Every list is parallel (element i of each belongs to parameter i); tensors
// are updated in place and must be contiguous, of one floating dtype, on one
// device; gradients are read in that dtype. Failures (mismatched lists,
// shapes, dtypes or devices) throw InvalidArgument naming the op and the
// index.
// Thread safety: as the tensors' in-place members (the caller owns them).
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

// torch.optim.SGD's options for one step.
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

// d = sign * g (+ weight_decay * p); with momentum, buf = first ? d :
// momentum * buf + (1 - dampening) * d and d = nesterov ? d + momentum * buf
// : buf; p -= lr * d. `bufs` is empty without momentum; first[i] says that
// parameter i has no momentum history yet (its buffer is written, not read).
// Arithmetic in the parameters' dtype, as optim/sgd.cc's loop.
void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& bufs, const std::vector<uint8_t>& first, const SgdStep& s);

// torch.optim.Adam / AdamW's options for one step; `steps[i]` is parameter
// i's step count after this step (1 on the first).
struct AdamStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, maximize = false, decoupled = false;  // decoupled: AdamW
};

// m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2 (vmax = max(vmax,
// v) with amsgrad), p = p' - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), with
// g = sign * grad (+ weight_decay * p for Adam) and p' = (1 - lr *
// weight_decay) p for AdamW: optim/adam.cc's loop. `max_exp_avg_sq` is empty
// unless amsgrad.
void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
               const std::vector<Tensor>& max_exp_avg_sq, const std::vector<double>& steps,
               const AdamStep& s);

// The norm of order p (> 0, or inf for max |x|) of all elements of the
// tensors together, accumulated in double, as a 0-d float64 tensor on their
// device (the CPU for an empty list).
Tensor total_norm(const std::vector<Tensor>& tensors, double p);

// Every tensor *= max_norm / (norm + 1e-6) when that is below 1 (or NaN),
// `norm` a 0-d tensor on the tensors' device: clip_grad_norm's scaling,
// decided where the norm is, so a device never waits for the host.
void scale_by_norm(const std::vector<Tensor>& tensors, const Tensor& norm, double max_norm);

// Device kernels of the four entry points (device_dispatch.h).
extern DeviceOp<void(const std::vector<Tensor>&, const std::vector<Tensor>&,
                     const std::vector<Tensor>&, const std::vector<uint8_t>&, const SgdStep&)>
    sgd_step_device;
extern DeviceOp<void(const std::vector<Tensor>&, const std::vector<Tensor>&,
                     const std::vector<Tensor>&, const std::vector<Tensor>&,
                     const std::vector<Tensor>&, const std::vector<double>&, const AdamStep&)>
    adam_step_device;
extern DeviceOp<Tensor(const std::vector<Tensor>&, double)> total_norm_device;
extern DeviceOp<void(const std::vector<Tensor>&, const Tensor&, double)> scale_by_norm_device;

// The checks every implementation makes: list lengths, and each tensor i of
// `lists` contiguous, with params[i]'s shape, dtype and device. Returns the
// device.
Device check_fused_lists(const char* op, const std::vector<Tensor>& params,
                         const std::vector<const std::vector<Tensor>*>& lists);

}  // namespace cohort::native
