// native/softmax.h's softmax family and native/loss.h's NLL loss on a CUDA
// device: the rows made contiguous with `dim` last (as the CPU's), the
// kernels of softmax.cu, the result moved back. The loss's reductions stay on
// the device (a 0-d device tensor): no host round trip.
#include "cohort/core/native/softmax.h"
#include "cohort/core/native/class_rows.h"
#include "cohort/core/native/loss.h"
#include "cohort/cuda/pointwise_host.h"
#include "cohort/cuda/pointwise_launch.h"
#include "cohort/cuda/pointwise_register.h"

namespace cohort::cuda {
namespace {

Tensor rows_of(const Tensor& x, int64_t dim) {
  return dim == x.dim() - 1 ? x.contiguous() : x.transpose(dim, -1).contiguous();
}

Tensor from_rows(const Tensor& r, int64_t dim, int64_t ndim) {
  return dim == ndim - 1 ? r : r.transpose(dim, -1).contiguous();
}

Tensor forward(const Tensor& x, int64_t dim, bool log, const char* op) {
  if (x.dim() == 0) return forward(x.reshape({1}), 0, log, op).reshape({});
  dim = wrap_dim(dim, x.dim(), op);
  Tensor xr = rows_of(x, dim);
  Tensor yr = Tensor::empty(xr.sizes(), x.dtype(), x.device());
  const int64_t n = xr.size(-1), rows = n ? xr.numel() / n : 0;
  launch_softmax(log, x.dtype(), xr.device_data(), yr.device_data(), rows, n, stream_of(yr));
  return from_rows(yr, dim, x.dim());
}

Tensor backward(const Tensor& grad, const Tensor& out, int64_t dim, bool log, const char* op) {
  if (out.dim() == 0) return backward(grad.reshape({1}), out.reshape({1}), 0, log, op).reshape({});
  dim = wrap_dim(dim, out.dim(), op);
  COHORT_CHECK(grad.sizes() == out.sizes(), "{}: gradient {} does not match output {}", op,
               shape_str(grad.sizes()), shape_str(out.sizes()));
  Tensor gr = rows_of(grad.to(out.dtype()), dim), yr = rows_of(out, dim);
  Tensor dx = Tensor::empty(gr.sizes(), out.dtype(), out.device());
  const int64_t n = gr.size(-1), rows = n ? gr.numel() / n : 0;
  launch_softmax_backward(log, out.dtype(), gr.device_data(), yr.device_data(), dx.device_data(),
                          rows, n, stream_of(dx));
  return from_rows(dx, dim, out.dim());
}

Tensor cuda_softmax(const Tensor& x, int64_t dim) { return forward(x, dim, false, "softmax"); }

Tensor cuda_log_softmax(const Tensor& x, int64_t dim) {
  return forward(x, dim, true, "log_softmax");
}

Tensor cuda_log_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  return backward(grad, out, dim, true, "log_softmax_backward");
}

Tensor cuda_softmax_backward(const Tensor& grad, const Tensor& out, int64_t dim) {
  return backward(grad, out, dim, false, "softmax_backward");
}

int reduction_code(Reduction r) {
  switch (r) {
    case Reduction::kNone:
      return 0;
    case Reduction::kMean:
      return 1;
    case Reduction::kSum:
      return 2;
  }
  return 1;
}

Tensor cuda_nll_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  native::ClassRows s = native::class_rows(input, target, "nll_loss", "input");
  Device d = input.device();
  const bool none = reduction == Reduction::kNone;
  Tensor per = none ? Tensor::empty({s.n}, input.dtype(), d) : Tensor();
  Tensor out = none ? Tensor() : Tensor::empty({}, input.dtype(), d);
  launch_nll_loss(input.dtype(), s.scores.device_data(), s.target.device_ptr<int64_t>(), s.n, s.c,
                  ignore_index, reduction_code(reduction), none ? per.device_data() : nullptr,
                  none ? nullptr : out.device_data(), stream_of(s.scores));
  if (none) return input.dim() == 1 ? per.reshape({}) : per;
  return out;
}

Tensor cuda_nll_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                              Reduction reduction, int64_t ignore_index) {
  native::ClassRows s = native::class_rows(input, target, "nll_loss_backward", "input");
  Device d = input.device();
  Tensor dx = Tensor::zeros({s.n, s.c}, input.dtype(), d);
  Tensor g = grad.to(input.dtype()).contiguous();
  COHORT_CHECK(reduction != Reduction::kNone || g.numel() == s.n,
               "nll_loss_backward: gradient {} for {} rows", shape_str(grad.sizes()), s.n);
  COHORT_CHECK(reduction == Reduction::kNone || g.numel() == 1,
               "nll_loss_backward: gradient {} of a reduced loss must have one element",
               shape_str(grad.sizes()));
  launch_nll_loss_backward(input.dtype(), g.device_data(), s.target.device_ptr<int64_t>(), s.n, s.c,
                           ignore_index, reduction_code(reduction), dx.device_data(),
                           stream_of(dx));
  return input.dim() == 1 ? dx.reshape({s.c}) : dx;
}

}  // namespace

void register_softmax_kernels() {
  constexpr DeviceType kCuda = DeviceType::kCUDA;
  native::softmax_device.set(kCuda, &cuda_softmax);
  native::log_softmax_device.set(kCuda, &cuda_log_softmax);
  native::log_softmax_backward_device.set(kCuda, &cuda_log_softmax_backward);
  native::softmax_backward_device.set(kCuda, &cuda_softmax_backward);
  native::nll_loss_device.set(kCuda, &cuda_nll_loss);
  native::nll_loss_backward_device.set(kCuda, &cuda_nll_loss_backward);
}

}  // namespace cohort::cuda
