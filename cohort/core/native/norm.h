// Normalisation kernels (not recorded by autograd), PyTorch semantics.
// layer_norm normalises over the trailing dims given by normalized_shape,
// batch_norm per channel (dim 1) of x [N, C, *]. Parallel over rows
// (layer_norm) or channels (batch_norm). float32 layer_norm runs the row
// kernels of core/kernels/layer_norm.h (vectorised per kernel path, float
// sums in several accumulators; the reference loops in double on the baseline
// path); float64 and batch_norm accumulate in double.
#pragma once

#include "cohort/core/device_dispatch.h"
#include "cohort/core/tensor.h"

namespace cohort::native {

struct LayerNormResult {
  Tensor out;
  Tensor mean;  // [rows] (float64: saved for backward)
  Tensor rstd;  // [rows] 1/sqrt(var + eps), biased var
};

// weight/bias [normalized_shape] or undefined. bf16_twin (float32 x): out
// also carries its bf16 rounding, written in the same pass (set_bf16_twin).
LayerNormResult layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias, double eps, bool bf16_twin = false);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;
};
LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& x,
                                   const Shape& normalized_shape, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& weight, bool need_dx,
                                   bool need_dweight, bool need_dbias);

// The residual add fused with the LayerNorm after it: sum = x + delta (x and
// delta of one shape [..., C] and dtype), norm = layer_norm(sum, {C}, weight,
// bias, eps) (weight, bias [C] or undefined), both in one pass over the rows.
// Its backward is layer_norm_backward over `sum`.
struct AddLayerNormResult {
  Tensor sum;
  LayerNormResult norm;
};
AddLayerNormResult add_layer_norm(const Tensor& x, const Tensor& delta, const Tensor& weight,
                                  const Tensor& bias, double eps, bool bf16_twin = false);

// Device kernels (device_dispatch.h) behind layer_norm, layer_norm_backward
// and add_layer_norm, the same contracts except: on a device mean and rstd
// are float32 (the statistics are float32 sums), and x (delta, grad) may be
// float32 or bfloat16 with float32 weight and bias (out, sum and dx in x's
// dtype; dweight, dbias float32).
extern DeviceOp<LayerNormResult(const Tensor& x, const Shape& normalized_shape,
                                const Tensor& weight, const Tensor& bias, double eps,
                                bool bf16_twin)>
    layer_norm_device;
extern DeviceOp<LayerNormGrads(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                               const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                               bool need_dx, bool need_dweight, bool need_dbias)>
    layer_norm_backward_device;
extern DeviceOp<AddLayerNormResult(const Tensor& x, const Tensor& delta, const Tensor& weight,
                                   const Tensor& bias, double eps, bool bf16_twin)>
    add_layer_norm_device;

struct BatchNormResult {
  Tensor out;
  Tensor mean;  // [C] float64, the statistics used (batch or running)
  Tensor rstd;  // [C] float64
};
// training: batch statistics (biased variance normalises; the running
// buffers, when defined, are updated in place: r = (1 - momentum) r +
// momentum * stat, with the unbiased variance for running_var). Eval: uses
// the running buffers, which must be defined.
BatchNormResult batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& weight, const Tensor& bias, bool training, double momentum,
                           double eps);
struct BatchNormGrads {
  Tensor dx, dweight, dbias;
};
BatchNormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& weight, bool training,
                                   bool need_dx, bool need_dweight, bool need_dbias);

}  // namespace cohort::native
