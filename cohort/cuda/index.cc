// native/index.h's ops on a CUDA device: the CPU entry points' checks that
// need no device data, then the kernels of index.cu. Index values are checked
// on the device (index.cu), not here: reading them would cost a host round
// trip per embedding lookup.
#include "cohort/core/native/index.h"

#include "cohort/core/native/elementwise.h"
#include "cohort/cuda/pointwise_host.h"
#include "cohort/cuda/pointwise_launch.h"
#include "cohort/cuda/pointwise_register.h"

namespace cohort::cuda {
namespace {

using native::as_index;

Tensor cuda_index_select(const Tensor& x_in, int64_t dim, const Tensor& index) {
  dim = wrap_dim(dim, x_in.dim(), "index_select");
  COHORT_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got {}",
               shape_str(index.sizes()));
  Tensor idx = as_index(index, "index_select");
  Tensor x = x_in.contiguous();
  const int64_t k = idx.numel(), n = x.sizes()[dim];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.sizes()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.sizes()[d];
  Shape os = x.sizes();
  os[dim] = k;
  Tensor out = Tensor::empty(os, x.dtype(), x.device());
  launch_index_select(dtype_size(x.dtype()), x.device_data(), out.device_data(),
                      idx.device_ptr<int64_t>(), outer, n, k, inner, stream_of(out));
  return out;
}

Tensor cuda_index_add(const Shape& sizes, DType dtype, int64_t dim, const Tensor& index,
                      const Tensor& src_in) {
  dim = wrap_dim(dim, static_cast<int64_t>(sizes.size()), "index_add");
  Tensor idx = as_index(index, "index_add");
  const int64_t k = idx.numel(), n = sizes[dim];
  Shape ss = sizes;
  ss[dim] = k;
  COHORT_CHECK(src_in.sizes() == ss, "index_add: source {} must have shape {}",
               shape_str(src_in.sizes()), shape_str(ss));
  Tensor src = src_in.to(dtype).contiguous();
  Tensor out = Tensor::zeros(sizes, dtype, src.device());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(sizes.size()); ++d) inner *= sizes[d];
  launch_index_add(dtype, out.device_data(), idx.device_ptr<int64_t>(), src.device_data(), outer, n,
                   k, inner, stream_of(out));
  return out;
}

// The CPU's checks of gather / scatter_add's shapes (for_gather in
// native/index.cc): index has x's rank and fits inside it off `dim`.
void check_gather(const Shape& xs, const Tensor& idx, int64_t dim, const char* op) {
  const Shape& is = idx.sizes();
  const int64_t nd = static_cast<int64_t>(xs.size());
  COHORT_CHECK(static_cast<int64_t>(is.size()) == nd, "{}: index {} must have the rank of {}", op,
               shape_str(is), shape_str(xs));
  for (int64_t d = 0; d < nd; ++d)
    COHORT_CHECK(d == dim || is[d] <= xs[d], "{}: index {} larger than input {} at dim {}", op,
                 shape_str(is), shape_str(xs), d);
}

// t's strides with a zero at dim (the index supplies that coordinate).
Shape strides_without(const Tensor& t, int64_t dim) {
  Shape st = t.strides();
  if (!st.empty()) st[dim] = 0;
  return st;
}

Tensor cuda_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  dim = wrap_dim(dim, x.dim(), "gather");
  Tensor idx = as_index(index, "gather");
  check_gather(x.sizes(), idx, dim, "gather");
  Tensor out = Tensor::empty(idx.sizes(), x.dtype(), x.device());
  const int64_t n = x.dim() ? x.sizes()[dim] : 1, stride = x.dim() ? x.strides()[dim] : 0;
  StridedPlan<3> plan =
      make_plan<3>(idx.sizes(), {out.strides(), strides_without(x, dim), idx.strides()}, "gather");
  launch_gather(dtype_size(x.dtype()), out.device_data(), x.device_data(),
                idx.device_ptr<int64_t>(), stride, n, plan, idx.numel(), stream_of(out));
  return out;
}

Tensor cuda_scatter_add(const Shape& sizes, DType dtype, int64_t dim, const Tensor& index,
                        const Tensor& src_in) {
  dim = wrap_dim(dim, static_cast<int64_t>(sizes.size()), "scatter_add");
  Tensor idx = as_index(index, "scatter_add");
  COHORT_CHECK(src_in.sizes() == idx.sizes(), "scatter_add: source {} must match index {}",
               shape_str(src_in.sizes()), shape_str(idx.sizes()));
  check_gather(sizes, idx, dim, "scatter_add");
  Tensor src = src_in.to(dtype);
  Tensor out = Tensor::zeros(sizes, dtype, src.device());
  const int64_t n = sizes.empty() ? 1 : sizes[dim], stride = sizes.empty() ? 0 : out.strides()[dim];
  StridedPlan<3> plan = make_plan<3>(
      idx.sizes(), {src.strides(), strides_without(out, dim), idx.strides()}, "scatter_add");
  launch_scatter_add(dtype, out.device_data(), src.device_data(), idx.device_ptr<int64_t>(), stride,
                     n, plan, idx.numel(), stream_of(out));
  return out;
}

Tensor cuda_triangle(const Tensor& x_in, int64_t diagonal, bool lower) {
  const char* op = lower ? "tril" : "triu";
  COHORT_CHECK(x_in.dim() >= 2, "{}: input must be at least 2-D, got {}", op,
               shape_str(x_in.sizes()));
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  const int64_t r = x.size(-2), c = x.size(-1);
  const int64_t batch = r != 0 && c != 0 ? x.numel() / (r * c) : 0;
  launch_triangle(dtype_size(x.dtype()), x.device_data(), out.device_data(), batch, r, c, diagonal,
                  lower, stream_of(out));
  return out;
}

Tensor cuda_masked_fill(const Tensor& x, const Tensor& mask, double value) {
  COHORT_CHECK(mask.dtype() == kUInt8 || mask.dtype() == kInt32 || mask.dtype() == kInt64,
               "masked_fill: mask must be an integer (boolean) tensor, got {}",
               dtype_name(mask.dtype()));
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  launch_masked_fill(x.dtype(), out.device_data(), x.device_data(), mask.dtype(),
                     mask.device_data(), value, plan_over<2>(out, {&x, &mask}, "masked_fill"),
                     out.numel(), stream_of(out));
  return out;
}

native::DropoutResult cuda_dropout(const Tensor& x_in, double p, Generator& gen) {
  COHORT_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got {}", p);
  COHORT_CHECK(is_floating(x_in.dtype()), "dropout: needs a floating tensor, got {}",
               dtype_name(x_in.dtype()));
  native::DropoutResult r;
  if (p == 1.0) {
    // As the CPU: no draws, everything dropped.
    r.mask = Tensor::zeros(x_in.sizes(), x_in.dtype(), x_in.device());
    r.out = native::binary(native::BinaryOp::kMul, x_in, r.mask);
    return r;
  }
  COHORT_CHECK(x_in.dtype() == kFloat32 || x_in.dtype() == kFloat64,
               "dropout: dtype {} is not supported on CUDA devices (float32, float64)",
               dtype_name(x_in.dtype()));
  Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  // The CPU's draws: bernoulli reserves ceil(n / lanes) blocks of the stream.
  const int64_t lanes = x.dtype() == kFloat32 ? 4 : 2;
  const uint64_t seed = gen.seed();
  const uint64_t block = gen.reserve(static_cast<uint64_t>((n + lanes - 1) / lanes));
  r.out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  r.mask = Tensor::empty(x.sizes(), x.dtype(), x.device());
  launch_dropout(x.dtype(), x.device_data(), r.out.device_data(), r.mask.device_data(), n, p, seed,
                 block, stream_of(x));
  return r;
}

}  // namespace

void register_index_kernels() {
  constexpr DeviceType kCuda = DeviceType::kCUDA;
  native::index_select_device.set(kCuda, &cuda_index_select);
  native::index_add_device.set(kCuda, &cuda_index_add);
  native::gather_device.set(kCuda, &cuda_gather);
  native::scatter_add_device.set(kCuda, &cuda_scatter_add);
  native::triangle_device.set(kCuda, &cuda_triangle);
  native::masked_fill_device.set(kCuda, &cuda_masked_fill);
  native::dropout_device.set(kCuda, &cuda_dropout);
}

}  // namespace cohort::cuda
