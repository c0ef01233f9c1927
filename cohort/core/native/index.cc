#include "cohort/core/native/index.h"

#include <algorithm>
#include <cstring>

#include "cohort/base/parallel.h"
#include "cohort/core/dispatch.h"
#include "cohort/core/native/elementwise.h"

namespace cohort::native {
Tensor as_index(const Tensor& index, const char* op) {
  COHORT_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32 || index.dtype() == kUInt8,
               "{}: index must be an integer tensor, got {}", op, dtype_name(index.dtype()));
  return index.to(kInt64).contiguous();
}

namespace {

void check_range(int64_t v, int64_t n, const char* op) {
  COHORT_CHECK(v >= 0 && v < n, "{}: index {} out of range [0, {})", op, v, n);
}

}  // namespace

DeviceOp<Tensor(const Tensor&, int64_t, const Tensor&)> index_select_device("index_select");
DeviceOp<Tensor(const Shape&, DType, int64_t, const Tensor&, const Tensor&)> index_add_device(
    "index_add");
DeviceOp<Tensor(const Tensor&, int64_t, const Tensor&)> gather_device("gather");
DeviceOp<Tensor(const Shape&, DType, int64_t, const Tensor&, const Tensor&)> scatter_add_device(
    "scatter_add");
DeviceOp<Tensor(const Tensor&, int64_t, bool)> triangle_device("triangle");
DeviceOp<Tensor(const Tensor&, const Tensor&, double)> masked_fill_device("masked_fill");
DeviceOp<DropoutResult(const Tensor&, double, Generator&)> dropout_device("dropout");

Tensor index_select(const Tensor& x_in, int64_t dim, const Tensor& index) {
  if (Device d = op_device("index_select", {&x_in, &index}); !d.is_cpu())
    return index_select_device(d, x_in, dim, index);
  dim = wrap_dim(dim, x_in.dim(), "index_select");
  COHORT_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got {}",
               shape_str(index.sizes()));
  Tensor idx = as_index(index, "index_select");
  const int64_t* pi = idx.data_ptr<int64_t>();
  const int64_t k = idx.numel();
  Tensor x = x_in.contiguous();
  const int64_t n = x.sizes()[dim];
  for (int64_t i = 0; i < k; ++i) check_range(pi[i], n, "index_select");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.sizes()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.sizes()[d];
  Shape os = x.sizes();
  os[dim] = k;
  Tensor out = Tensor::empty(os, x.dtype());
  const size_t es = dtype_size(x.dtype());
  const auto* px = static_cast<const std::byte*>(x.raw_data());
  auto* po = static_cast<std::byte*>(out.raw_data());
  parallel_for(0, outer * k, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   int64_t o = r / k, j = r % k;
                   std::memcpy(po + r * inner * es, px + (o * n + pi[j]) * inner * es, inner * es);
                 }
               });
  return out;
}

Tensor index_add(const Shape& sizes, DType dtype, int64_t dim, const Tensor& index,
                 const Tensor& src_in) {
  if (Device d = op_device("index_add", {&index, &src_in}); !d.is_cpu())
    return index_add_device(d, sizes, dtype, dim, index, src_in);
  dim = wrap_dim(dim, static_cast<int64_t>(sizes.size()), "index_add");
  Tensor idx = as_index(index, "index_add");
  const int64_t* pi = idx.data_ptr<int64_t>();
  const int64_t k = idx.numel(), n = sizes[dim];
  Shape ss = sizes;
  ss[dim] = k;
  COHORT_CHECK(src_in.sizes() == ss, "index_add: source {} must have shape {}",
               shape_str(src_in.sizes()), shape_str(ss));
  for (int64_t i = 0; i < k; ++i) check_range(pi[i], n, "index_add");
  Tensor src = src_in.to(dtype).contiguous();
  Tensor out = Tensor::zeros(sizes, dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(sizes.size()); ++d) inner *= sizes[d];
  dispatch_arith(dtype, "index_add", [&](auto tag) {
    using T = decltype(tag);
    const T* ps = src.data_ptr<T>();
    T* po = out.data_ptr<T>();
    // Parallel over the inner (feature) axis: rows with equal index never race.
    parallel_for(0, inner, 256, [&](int64_t c0, int64_t c1) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < k; ++j) {
          const T* s = ps + (o * k + j) * inner;
          T* d = po + (o * n + pi[j]) * inner;
          for (int64_t c = c0; c < c1; ++c) d[c] += s[c];
        }
    });
  });
  return out;
}

namespace {

// Iterates gather/scatter positions: calls f(index_flat, x_flat) with x's
// offset for every element of `index` (contiguous, rank = x's rank).
template <typename F>
void for_gather(const Shape& xs, const Tensor& idx, int64_t dim, const char* op, F f) {
  const Shape& is = idx.sizes();
  const int64_t nd = static_cast<int64_t>(xs.size());
  COHORT_CHECK(static_cast<int64_t>(is.size()) == nd, "{}: index {} must have the rank of {}", op,
               shape_str(is), shape_str(xs));
  for (int64_t d = 0; d < nd; ++d)
    COHORT_CHECK(d == dim || is[d] <= xs[d], "{}: index {} larger than input {} at dim {}", op,
                 shape_str(is), shape_str(xs), d);
  Shape xst = contiguous_strides(xs);
  const int64_t* pi = idx.data_ptr<int64_t>();
  Shape pos(nd, 0);
  for (int64_t flat = 0; flat < idx.numel(); ++flat) {
    int64_t v = pi[flat];
    check_range(v, xs[dim], op);
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += (d == dim ? v : pos[d]) * xst[d];
    f(flat, off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++pos[d] < is[d]) break;
      pos[d] = 0;
    }
  }
}

}  // namespace

Tensor gather(const Tensor& x_in, int64_t dim, const Tensor& index) {
  if (Device d = op_device("gather", {&x_in, &index}); !d.is_cpu())
    return gather_device(d, x_in, dim, index);
  dim = wrap_dim(dim, x_in.dim(), "gather");
  Tensor idx = as_index(index, "gather");
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(idx.sizes(), x.dtype());
  dispatch_arith(x.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data_ptr<T>();
    T* po = out.data_ptr<T>();
    for_gather(x.sizes(), idx, dim, "gather", [&](int64_t i, int64_t off) { po[i] = px[off]; });
  });
  return out;
}

Tensor scatter_add(const Shape& sizes, DType dtype, int64_t dim, const Tensor& index,
                   const Tensor& src_in) {
  if (Device d = op_device("scatter_add", {&index, &src_in}); !d.is_cpu())
    return scatter_add_device(d, sizes, dtype, dim, index, src_in);
  dim = wrap_dim(dim, static_cast<int64_t>(sizes.size()), "scatter_add");
  Tensor idx = as_index(index, "scatter_add");
  COHORT_CHECK(src_in.sizes() == idx.sizes(), "scatter_add: source {} must match index {}",
               shape_str(src_in.sizes()), shape_str(idx.sizes()));
  Tensor src = src_in.to(dtype).contiguous();
  Tensor out = Tensor::zeros(sizes, dtype);
  dispatch_arith(dtype, "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    const T* ps = src.data_ptr<T>();
    T* po = out.data_ptr<T>();
    for_gather(sizes, idx, dim, "scatter_add", [&](int64_t i, int64_t off) { po[off] += ps[i]; });
  });
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  COHORT_CHECK(!tensors.empty(), "cat: needs at least one tensor");
  // One device for all (a CPU result must not gather device tensors silently).
  for (const Tensor& t : tensors) op_device("cat", {&tensors[0], &t});
  const Tensor& first = tensors[0];
  dim = wrap_dim(dim, first.dim(), "cat");
  DType dt = first.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    COHORT_CHECK(t.dim() == first.dim(), "cat: tensor {} has shape {}, tensor 0 has {}", i,
                 shape_str(t.sizes()), shape_str(first.sizes()));
    for (int64_t d = 0; d < t.dim(); ++d)
      COHORT_CHECK(d == dim || t.sizes()[d] == first.sizes()[d],
                   "cat: tensor {} has shape {}, tensor 0 has {} (only dim {} may differ)", i,
                   shape_str(t.sizes()), shape_str(first.sizes()), dim);
    dt = promote_types(dt, t.dtype());
    total += t.sizes()[dim];
  }
  Shape os = first.sizes();
  os[dim] = total;
  // On the inputs' device: the copies below are copy_'s, which run there.
  Tensor out = Tensor::empty(os, dt, first.device());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    int64_t len = t.sizes()[dim];
    if (len) out.narrow(dim, at, len).copy_(t);
    at += len;
  }
  return out;
}

DropoutResult dropout(const Tensor& x, double p, Generator& gen) {
  if (!x.is_cpu()) return dropout_device(x.device(), x, p, gen);
  COHORT_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got {}", p);
  COHORT_CHECK(is_floating(x.dtype()), "dropout: needs a floating tensor, got {}",
               dtype_name(x.dtype()));
  DropoutResult r;
  if (p == 1.0) {
    r.mask = Tensor::zeros(x.sizes(), x.dtype());
  } else {
    r.mask = bernoulli(x.sizes(), 1.0 - p, gen, x.dtype());
    r.mask.mul_(1.0 / (1.0 - p));
  }
  r.out = binary(BinaryOp::kMul, x, r.mask);
  return r;
}

Tensor triangle(const Tensor& x_in, int64_t diagonal, bool lower) {
  if (!x_in.is_cpu()) return triangle_device(x_in.device(), x_in, diagonal, lower);
  const char* op = lower ? "tril" : "triu";
  COHORT_CHECK(x_in.dim() >= 2, "{}: input must be at least 2-D, got {}", op,
               shape_str(x_in.sizes()));
  Tensor x = x_in.contiguous();
  Tensor out = Tensor::empty(x.sizes(), x.dtype());
  const int64_t r = x.size(-2), c = x.size(-1);
  const int64_t rows = c ? x.numel() / c : 0;
  const size_t es = dtype_size(x.dtype());
  const auto* px = static_cast<const std::byte*>(x.raw_data());
  auto* po = static_cast<std::byte*>(out.raw_data());
  // Row i keeps columns [0, i + diagonal] (lower) or [i + diagonal, c)
  // (upper); the zero of every dtype is all-zero bytes.
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(c, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t row = r0; row < r1; ++row) {
                   const int64_t i = row % r;
                   const int64_t edge = std::clamp<int64_t>(i + diagonal + (lower ? 1 : 0), 0, c);
                   const int64_t k0 = lower ? 0 : edge, k1 = lower ? edge : c;
                   const std::byte* src = px + row * c * es;
                   std::byte* dst = po + row * c * es;
                   std::memset(dst, 0, c * es);
                   if (k1 > k0) std::memcpy(dst + k0 * es, src + k0 * es, (k1 - k0) * es);
                 }
               });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  if (Device d = op_device("masked_fill", {&x, &mask}); !d.is_cpu())
    return masked_fill_device(d, x, mask, value);
  COHORT_CHECK(mask.dtype() == kUInt8 || mask.dtype() == kInt32 || mask.dtype() == kInt64,
               "masked_fill: mask must be an integer (boolean) tensor, got {}",
               dtype_name(mask.dtype()));
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  Tensor m = (mask.dtype() == kUInt8 ? mask : compare_scalar(CompareOp::kNe, mask, 0.0))
                 .expand(shape)
                 .contiguous();
  Tensor xs = x.expand(shape).contiguous();
  Tensor out = Tensor::empty(shape, x.dtype());
  dispatch_arith(x.dtype(), "masked_fill", [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    const uint8_t* pm = m.data_ptr<uint8_t>();
    const T* px = xs.data_ptr<T>();
    T* po = out.data_ptr<T>();
    parallel_for(0, out.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i] = pm[i] ? v : px[i];
    });
  });
  return out;
}

}  // namespace cohort::native
