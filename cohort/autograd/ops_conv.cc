// conv2d and max_pool2d over the raw kernels in cohort/core/kernels.
// Under a bf16 PrecisionPolicy (precision.h) conv2d rounds input, weight and
// the incoming gradient to bf16 and runs the float32 kernels on the rounded
// values (products exact, float32 accumulation: the emulated bf16 path, on
// every policy path, as there is no bf16 convolution kernel yet); backward
// keeps the bf16 copies.
#include "cohort/autograd/node.h"
#include "cohort/autograd/ops.h"
#include "cohort/autograd/precision.h"
#include "cohort/core/kernels/conv2d.h"
#include "cohort/core/kernels/conv2d_device.h"
#include "cohort/core/kernels/pool2d.h"
#include "cohort/core/kernels/pool2d_device.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort {

using autograd::record;

namespace {

kernels::Conv2dGeometry conv_geometry(const Tensor& x, const Tensor& w, const Tensor& b,
                                      std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                                      const char* op) {
  COHORT_CHECK(x.dim() == 4, "{}: input must be 4-D [N, C, H, W], got {}", op,
               shape_str(x.sizes()));
  COHORT_CHECK(w.dim() == 4, "{}: weight must be 4-D [Cout, Cin, kh, kw], got {}", op,
               shape_str(w.sizes()));
  COHORT_CHECK(x.sizes()[1] == w.sizes()[1],
               "{}: input {} has {} channels but weight {} expects {}", op, shape_str(x.sizes()),
               x.sizes()[1], shape_str(w.sizes()), w.sizes()[1]);
  COHORT_CHECK(x.dtype() == DType::kFloat32 && w.dtype() == DType::kFloat32,
               "{}: only float32 is supported, got input {} and weight {}", op,
               dtype_name(x.dtype()), dtype_name(w.dtype()));
  if (b.defined()) {
    COHORT_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0], "{}: bias must be [{}], got {}", op,
                 w.sizes()[0], shape_str(b.sizes()));
    COHORT_CHECK(b.dtype() == DType::kFloat32, "{}: bias must be float32, got {}", op,
                 dtype_name(b.dtype()));
  }
  kernels::Conv2dGeometry g{x.sizes()[0], x.sizes()[1], x.sizes()[2], x.sizes()[3],
                            w.sizes()[0], w.sizes()[2], w.sizes()[3]};
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.pad_h = padding[0];
  g.pad_w = padding[1];
  kernels::check_conv2d_geometry(g, op);
  return g;
}

// conv2d on a device: the device kernels forward and backward.
Tensor conv_on_device(Device d, const kernels::Conv2dGeometry& geo, const Tensor& x_in,
                      const Tensor& w_in, const Tensor& b_in, bool fuse_relu, const char* op) {
  Tensor y = kernels::conv2d_forward_device(d, geo, x_in, w_in, b_in, fuse_relu);
  if (!autograd::any_requires_grad({x_in, w_in, b_in})) return y;
  Tensor xk = x_in.detach(), wk = w_in.detach();
  Tensor yd = fuse_relu ? y.detach() : Tensor();
  const bool has_b = b_in.defined();
  return record(y, op, {x_in, w_in, b_in},
                [=](const Tensor& g, const std::vector<bool>& needs) {
                  kernels::Conv2dGrads gr = kernels::conv2d_backward_device(
                      d, geo, xk, wk, g, yd, needs[0], needs[1], has_b && needs[2]);
                  return std::vector<Tensor>{gr.dx, gr.dw, gr.db};
                },
                {xk, wk, yd});
}

Tensor conv_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                 std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, bool fuse_relu) {
  const char* op = fuse_relu ? "conv2d_relu" : "conv2d";
  kernels::Conv2dGeometry geo = conv_geometry(x_in, w_in, b_in, stride, padding, op);
  if (Device d = op_device(op, {&x_in, &w_in, &b_in}); !d.is_cpu())
    return conv_on_device(d, geo, x_in, w_in, b_in, fuse_relu, op);
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor b = b_in.defined() ? b_in.contiguous() : Tensor();
  const bool bf16 = current_precision().is_bf16();
  Tensor x16, w16;  // bf16: the rounded operands, what backward keeps
  if (bf16) {
    x16 = native::to_bf16(x);
    w16 = native::to_bf16(w);
    x = native::bf16_to_float(x16);
    w = native::bf16_to_float(w16);
  }
  Tensor y = Tensor::empty({geo.batch, geo.out_channels, geo.out_h(), geo.out_w()});
  const float* pb = b.defined() ? b.data_ptr<float>() : nullptr;
  if (fuse_relu)
    kernels::conv2d_forward_relu(geo, x.data_ptr<float>(), w.data_ptr<float>(), pb,
                                 y.data_ptr<float>());
  else
    kernels::conv2d_forward(geo, x.data_ptr<float>(), w.data_ptr<float>(), pb, y.data_ptr<float>());
  if (!autograd::any_requires_grad({x_in, w_in, b_in})) return y;
  Tensor xk = bf16 ? Tensor() : x.detach(), wk = bf16 ? Tensor() : w.detach();
  Tensor yd = fuse_relu ? y.detach() : Tensor();
  bool has_b = b.defined();
  return record(
      y, op, {x_in, w_in, b_in},
      [=](const Tensor& g_in, const std::vector<bool>& needs) {
        // One call computes every needed gradient; with the fused ReLU the mask
        // y > 0 is applied to dy inside the kernel (no separate pass).
        Tensor xd = bf16 ? native::bf16_to_float(x16) : xk;
        Tensor wd = bf16 ? native::bf16_to_float(w16) : wk;
        Tensor g = bf16 ? native::bf16_to_float(native::to_bf16(g_in)) : g_in.contiguous();
        Tensor gx, gw, gb;
        if (needs[0]) gx = Tensor::empty(xd.sizes());
        if (needs[1]) gw = Tensor::empty(wd.sizes());
        if (has_b && needs[2]) gb = Tensor::empty({geo.out_channels});
        kernels::conv2d_backward(geo, xd.data_ptr<float>(), wd.data_ptr<float>(),
                                 g.data_ptr<float>(), fuse_relu ? yd.data_ptr<float>() : nullptr,
                                 gx.defined() ? gx.data_ptr<float>() : nullptr,
                                 gw.defined() ? gw.data_ptr<float>() : nullptr,
                                 gb.defined() ? gb.data_ptr<float>() : nullptr);
        return std::vector<Tensor>{gx, gw, gb};
      },
      {xk, wk, yd});
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding) {
  return conv_impl(x, w, b, stride, padding, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& b, std::array<int64_t, 2> stride,
                   std::array<int64_t, 2> padding) {
  return conv_impl(x, w, b, stride, padding, true);
}

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return max_pool2d(x, {kernel, kernel}, {stride, stride}, {padding, padding});
}

Tensor max_pool2d(const Tensor& x_in, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  COHORT_CHECK(x_in.dim() == 4, "max_pool2d: input must be 4-D [N, C, H, W], got {}",
               shape_str(x_in.sizes()));
  COHORT_CHECK(x_in.dtype() == DType::kFloat32, "max_pool2d: only float32 is supported, got {}",
               dtype_name(x_in.dtype()));
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  kernels::Pool2dGeometry geo{x_in.sizes()[0], x_in.sizes()[1], x_in.sizes()[2], x_in.sizes()[3],
                              kernel[0],       kernel[1],       stride[0],       stride[1],
                              padding[0],      padding[1]};
  kernels::check_pool2d_geometry(geo, "max_pool2d");
  if (Device d = x_in.device(); !d.is_cpu()) {
    kernels::MaxPool2dResult r = kernels::max_pool2d_forward_device(d, geo, x_in);
    if (!autograd::any_requires_grad({x_in})) return r.out;
    Tensor arg = r.argmax;
    return record(r.out, "max_pool2d", {x_in},
                  [d, geo, arg](const Tensor& g, const std::vector<bool>&) {
                    return std::vector<Tensor>{kernels::max_pool2d_backward_device(d, geo, g, arg)};
                  });
  }
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({geo.batch, geo.channels, geo.out_h(), geo.out_w()});
  bool need = autograd::any_requires_grad({x_in});
  Tensor arg = Tensor::empty(y.sizes(), DType::kInt32);
  kernels::max_pool2d_forward(geo, x.data_ptr<float>(), y.data_ptr<float>(),
                              arg.data_ptr<int32_t>());
  if (!need) return y;
  return record(y, "max_pool2d", {x_in}, [geo, arg](const Tensor& g_in, const std::vector<bool>&) {
    Tensor g = g_in.contiguous();
    Tensor gx = Tensor::empty({geo.batch, geo.channels, geo.in_h, geo.in_w});
    kernels::max_pool2d_backward(geo, g.data_ptr<float>(), arg.data_ptr<int32_t>(),
                                 gx.data_ptr<float>());
    return std::vector<Tensor>{gx};
  });
}

}  // namespace cohort
