// CUDA kernels of native::layer_norm, layer_norm_backward and add_layer_norm
// (core/native/norm.h) over the launchers of layer_norm_kernels.cu.
#include "cohort/base/error.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/native/norm.h"
#include "cohort/core/shape.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

void check_activation(const Tensor& t, const char* op) {
  COHORT_CHECK(t.dtype() == DType::kFloat32 || t.dtype() == DType::kBFloat16,
               "{}: CUDA kernel takes float32 or bfloat16 activations, got {}", op,
               dtype_name(t.dtype()));
}

// weight / bias as contiguous float32 (undefined stays undefined).
Tensor param(const Tensor& p) {
  return p.defined() ? p.to(DType::kFloat32).contiguous() : Tensor();
}
const float* ptr(const Tensor& t) { return t.defined() ? t.device_ptr<float>() : nullptr; }

// The forward of layer_norm and add_layer_norm: rows of n = numel(ns).
native::AddLayerNormResult forward(const Tensor& x_in, const Tensor& delta_in, const Shape& ns,
                                   const Tensor& w_in, const Tensor& b_in, double eps,
                                   bool bf16_twin, const char* op) {
  check_activation(x_in, op);
  Device d = x_in.device();
  const int64_t n = shape_numel(ns);
  Tensor x = x_in.contiguous();
  Tensor delta = delta_in.defined() ? delta_in.contiguous() : Tensor();
  const int64_t rows = n ? x.numel() / n : 0;
  Tensor w = param(w_in), b = param(b_in);
  native::AddLayerNormResult r;
  if (delta.defined()) r.sum = Tensor::empty(x.sizes(), x.dtype(), d);
  r.norm.out = Tensor::empty(x.sizes(), x.dtype(), d);
  r.norm.mean = Tensor::empty({rows}, DType::kFloat32, d);
  r.norm.rstd = Tensor::empty({rows}, DType::kFloat32, d);
  const bool twin = bf16_twin && x.dtype() == DType::kFloat32;
  Tensor out16 = twin ? Tensor::empty(x.sizes(), DType::kBFloat16, d) : Tensor();
  launch_layer_norm_forward(
      x.dtype(), x.device_data(), delta.defined() ? delta.device_data() : nullptr,
      delta.defined() ? r.sum.device_data() : nullptr, ptr(w), ptr(b), r.norm.out.device_data(),
      twin ? out16.device_data() : nullptr, r.norm.mean.device_ptr<float>(),
      r.norm.rstd.device_ptr<float>(), rows, n, static_cast<float>(eps), current_cuda_stream(d));
  if (twin) native::set_bf16_twin(r.norm.out, out16);
  return r;
}

native::LayerNormResult cuda_layer_norm(const Tensor& x, const Shape& ns, const Tensor& w,
                                        const Tensor& b, double eps, bool bf16_twin) {
  return forward(x, Tensor(), ns, w, b, eps, bf16_twin, "layer_norm").norm;
}

native::AddLayerNormResult cuda_add_layer_norm(const Tensor& x, const Tensor& delta,
                                               const Tensor& w, const Tensor& b, double eps,
                                               bool bf16_twin) {
  return forward(x, delta, {x.size(-1)}, w, b, eps, bf16_twin, "add_layer_norm");
}

native::LayerNormGrads cuda_layer_norm_backward(const Tensor& grad, const Tensor& x_in,
                                                const Shape& ns, const Tensor& mean,
                                                const Tensor& rstd, const Tensor& w_in,
                                                bool need_dx, bool need_dw, bool need_db) {
  check_activation(x_in, "layer_norm_backward");
  COHORT_CHECK(grad.sizes() == x_in.sizes(), "layer_norm_backward: grad {} and input {} differ",
               shape_str(grad.sizes()), shape_str(x_in.sizes()));
  COHORT_CHECK(mean.dtype() == DType::kFloat32 && rstd.dtype() == DType::kFloat32,
               "layer_norm_backward: mean and rstd must be the device forward's float32 ones, "
               "got {} and {}",
               dtype_name(mean.dtype()), dtype_name(rstd.dtype()));
  Device d = x_in.device();
  const int64_t n = shape_numel(ns);
  Tensor x = x_in.contiguous(), g = grad.to(x.dtype()).contiguous();
  Tensor m = mean.contiguous(), rs = rstd.contiguous(), w = param(w_in);
  const int64_t rows = n ? x.numel() / n : 0;
  cudaStream_t stream = current_cuda_stream(d);
  native::LayerNormGrads out;
  if (need_dx) out.dx = Tensor::empty(x.sizes(), x.dtype(), d);
  Tensor dw_part, db_part;
  if (need_dw || need_db) {
    const int64_t chunks = layer_norm_partial_chunks(rows);
    dw_part = Tensor::empty({chunks, n}, DType::kFloat32, d);
    db_part = Tensor::empty({chunks, n}, DType::kFloat32, d);
  }
  launch_layer_norm_backward(
      x.dtype(), g.device_data(), x.device_data(), ptr(w), m.device_ptr<float>(),
      rs.device_ptr<float>(), need_dx ? out.dx.device_data() : nullptr,
      dw_part.defined() ? dw_part.device_ptr<float>() : nullptr,
      db_part.defined() ? db_part.device_ptr<float>() : nullptr, rows, n, stream);
  auto finish = [&](const Tensor& part) {
    Tensor t = Tensor::empty(ns, DType::kFloat32, d);
    launch_column_sums(DType::kFloat32, part.device_data(), t.device_data(), part.size(0), n,
                       stream);
    return t;
  };
  if (need_dw) out.dweight = finish(dw_part);
  if (need_db) out.dbias = finish(db_part);
  return out;
}

}  // namespace

void register_layer_norm_kernels() {
  native::layer_norm_device.set(DeviceType::kCUDA, &cuda_layer_norm);
  native::layer_norm_backward_device.set(DeviceType::kCUDA, &cuda_layer_norm_backward);
  native::add_layer_norm_device.set(DeviceType::kCUDA, &cuda_add_layer_norm);
}

}  // namespace cohort::cuda
