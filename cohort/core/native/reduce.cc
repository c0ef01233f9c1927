#include "cohort/core/native/reduce.h"

#include <cmath>
#include <limits>

#include "cohort/core/dispatch.h"
#include "cohort/core/loops.h"
#include "cohort/core/native/vec_kernels.h"

namespace cohort::native {
namespace {

template <typename T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T>
using SumOut = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;

constexpr int64_t kSumBlock = 32768;

// Sum of a contiguous run with 8 independent accumulators (lets the compiler
// vectorise while the order stays fixed).
template <typename T, typename Acc>
Acc row_sum(const T* p, int64_t n) {
  Acc a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) a[k] += static_cast<Acc>(p[i + k]);
  Acc tail = 0;
  for (; i < n; ++i) tail += static_cast<Acc>(p[i]);
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])) + tail;
}

// row_sum, on float32 through the kernel path's vector loop when there is one
// (vec_kernels.h: same sum up to double rounding).
template <typename T, typename Acc>
Acc fast_row_sum(const VecKernels* vec, const T* p, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    if (vec != nullptr) return vec->row_sum(p, n);
  return row_sum<T, Acc>(p, n);
}

}  // namespace

DeviceOp<Tensor(const Tensor&, const Shape&, bool)> sum_device("sum");
DeviceOp<Tensor(const Tensor&, const Shape&, bool)> mean_device("mean");
DeviceOp<std::pair<Tensor, Tensor>(const Tensor&, int64_t, bool)> max_device("max");
DeviceOp<std::pair<Tensor, Tensor>(const Tensor&, int64_t, bool)> min_device("min");

std::vector<bool> reduce_mask(const Shape& dims, int64_t ndim, const char* op) {
  std::vector<bool> mask(ndim, dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) continue;
    COHORT_CHECK(!mask[w], "{}: dim {} repeated in {}", op, w, shape_str(dims));
    mask[w] = true;
  }
  return mask;
}

Shape reduced_shape(const Shape& sizes, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!mask[i])
      out.push_back(sizes[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  if (!x.is_cpu()) return sum_device(x.device(), x, dims, keepdim);
  const int64_t nd = x.dim();
  std::vector<bool> mask = reduce_mask(dims, nd, "sum");
  Shape out_shape = reduced_shape(x.sizes(), mask, keepdim);
  // Order: kept dims, then reduced dims.
  Shape perm, kept_sizes;
  int64_t inner = 1, outer = 1;
  for (int64_t i = 0; i < nd; ++i)
    if (!mask[i]) perm.push_back(i), outer *= x.sizes()[i];
  for (int64_t i = 0; i < nd; ++i)
    if (mask[i]) perm.push_back(i), inner *= x.sizes()[i];
  // Column case: reduced dims lead and x is contiguous -> x is [inner, outer].
  bool leading = true;
  for (int64_t i = 0; i < nd; ++i) {
    if (!mask[i]) {
      for (int64_t j = i + 1; j < nd; ++j)
        if (mask[j] && x.sizes()[j] != 1) leading = false;
      break;
    }
  }
  return dispatch_arith(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    using Acc = AccOf<T>;
    using O = SumOut<T>;
    Tensor out = Tensor::empty(out_shape, dtype_of<O>);
    O* po = out.data_ptr<O>();
    const VecKernels* vec = std::is_same_v<T, float> ? vec_kernels() : nullptr;
    if (leading && x.is_contiguous() && outer > 1) {
      const T* px = x.data_ptr<T>();
      parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                   [&](int64_t b, int64_t e) {
                     std::vector<Acc> acc(e - b, Acc(0));
                     for (int64_t r = 0; r < inner; ++r) {
                       const T* row = px + r * outer;
                       if constexpr (std::is_same_v<T, float>) {
                         if (vec != nullptr) {
                           vec->add_row(row + b, acc.data(), e - b);
                           continue;
                         }
                       }
                       for (int64_t j = b; j < e; ++j) acc[j - b] += row[j];
                     }
                     for (int64_t j = b; j < e; ++j) po[j] = static_cast<O>(acc[j - b]);
                   });
      return out;
    }
    Tensor xp = x.permute(perm).contiguous();
    const T* px = xp.data_ptr<T>();
    if (outer == 1 && inner > 2 * kSumBlock) {
      // One long row: fixed-size blocks summed in parallel, then combined in
      // block order, so the result does not depend on the thread count.
      const int64_t blocks = (inner + kSumBlock - 1) / kSumBlock;
      std::vector<Acc> part(blocks);
      parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t lo = k * kSumBlock, hi = std::min(inner, lo + kSumBlock);
          part[k] = fast_row_sum<T, Acc>(vec, px + lo, hi - lo);
        }
      });
      Acc acc = 0;
      for (Acc v : part) acc += v;
      po[0] = static_cast<O>(acc);
      return out;
    }
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t j = b; j < e; ++j)
                     po[j] = static_cast<O>(fast_row_sum<T, Acc>(vec, px + j * inner, inner));
                 });
    return out;
  });
}

Tensor sum_reference(const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<bool> mask = reduce_mask(dims, x.dim(), "sum");
  Shape keep = reduced_shape(x.sizes(), mask, true);
  std::vector<double> acc(shape_numel(keep), 0.0);
  std::vector<double> v = x.to_vector<double>();
  Shape idx(x.dim(), 0);
  Shape kst = contiguous_strides(keep);
  for (size_t flat = 0; flat < v.size(); ++flat) {
    int64_t o = 0;
    for (int64_t d = 0; d < x.dim(); ++d) o += (mask[d] ? 0 : idx[d]) * kst[d];
    acc[o] += v[flat];
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      if (++idx[d] < x.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  DType odt = is_floating(x.dtype()) ? x.dtype() : DType::kInt64;
  Tensor out = Tensor::from_vector(acc, keep).to(odt);
  return out.reshape(reduced_shape(x.sizes(), mask, keepdim));
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  if (!x.is_cpu()) return mean_device(x.device(), x, dims, keepdim);
  COHORT_CHECK(is_floating(x.dtype()), "mean: needs a floating tensor, got {}",
               dtype_name(x.dtype()));
  std::vector<bool> mask = reduce_mask(dims, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (mask[i]) count *= x.sizes()[i];
  Tensor s = sum(x, dims, keepdim);
  s.mul_(1.0 / static_cast<double>(count));
  return s;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  COHORT_CHECK(lead >= 0, "sum_to: gradient {} has fewer dims than target {}",
               shape_str(grad.sizes()), shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else {
      int64_t t = shape[i - lead];
      if (t == 1 && grad.sizes()[i] != 1)
        dims.push_back(i);
      else
        COHORT_CHECK(t == grad.sizes()[i], "sum_to: gradient {} cannot be summed to {}",
                     shape_str(grad.sizes()), shape_str(shape));
    }
  }
  if (dims.empty()) return grad.reshape(shape);
  return sum(grad, dims, true).reshape(shape);
}

namespace {

template <bool kMax>
std::pair<Tensor, Tensor> extreme(const Tensor& x, int64_t dim, bool keepdim, const char* op) {
  COHORT_CHECK(x.dim() > 0, "{}: needs at least 1 dim", op);
  dim = wrap_dim(dim, x.dim(), op);
  const int64_t n = x.sizes()[dim];
  COHORT_CHECK(n > 0, "{}: dim {} has size 0", op, dim);
  Tensor xt = x.transpose(dim, -1).contiguous();
  Shape out_shape = x.sizes();
  out_shape.erase(out_shape.begin() + dim);
  const int64_t rows = shape_numel(out_shape);
  Tensor idx, val;
  // xt's row-major order of the leading dims differs from out_shape's when dim
  // is not last; compute in xt's order then permute back.
  Shape xt_lead(xt.sizes().begin(), xt.sizes().end() - 1);
  Tensor idx_t = Tensor::empty(xt_lead, DType::kInt64);
  Tensor val_t = Tensor::empty(xt_lead, x.dtype());
  dispatch_arith(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = xt.data_ptr<T>();
    T* pv = val_t.data_ptr<T>();
    int64_t* pi = idx_t.data_ptr<int64_t>();
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = px + r * n;
        T best = row[0];
        int64_t bi = 0;
        for (int64_t i = 1; i < n; ++i) {
          T v = row[i];
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(best)) break;
            if (std::isnan(v)) {
              best = v, bi = i;
              break;
            }
          }
          if (kMax ? v > best : v < best) best = v, bi = i;
        }
        pv[r] = best;
        pi[r] = bi;
      }
    });
  });
  // Rebuild in out_shape order generally: leading dims of xt equal x's dims
  // without `dim`, except that x's last dim sits at position `dim`.
  if (dim != x.dim() - 1) {
    Shape perm;
    const int64_t m = x.dim() - 1;
    for (int64_t i = 0; i < m; ++i) {
      // out position i holds x dim j (j != dim, in order); find it in xt_lead.
      int64_t j = i < dim ? i : i + 1;  // x dim index
      int64_t pos = j == x.dim() - 1 ? dim : j;
      perm.push_back(pos);
    }
    val = val_t.permute(perm).contiguous();
    idx = idx_t.permute(perm).contiguous();
  } else {
    val = val_t;
    idx = idx_t;
  }
  if (keepdim) {
    val = val.unsqueeze(dim);
    idx = idx.unsqueeze(dim);
  }
  return {val, idx};
}

}  // namespace

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  if (!x.is_cpu()) return max_device(x.device(), x, dim, keepdim);
  return extreme<true>(x, dim, keepdim, "max");
}

std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  if (!x.is_cpu()) return min_device(x.device(), x, dim, keepdim);
  return extreme<false>(x, dim, keepdim, "min");
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return max(x, dim, keepdim).second; }

Tensor max_all(const Tensor& x) {
  COHORT_CHECK(x.numel() > 0, "max: empty tensor");
  if (!x.is_cpu()) return max_device(x.device(), x.reshape({-1}), 0, false).first;
  return extreme<true>(x.reshape({-1}), 0, false, "max").first;
}

Tensor min_all(const Tensor& x) {
  COHORT_CHECK(x.numel() > 0, "min: empty tensor");
  if (!x.is_cpu()) return min_device(x.device(), x.reshape({-1}), 0, false).first;
  return extreme<false>(x.reshape({-1}), 0, false, "min").first;
}

}  // namespace cohort::native
