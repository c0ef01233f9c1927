// View members of Tensor: metadata-only reshapes that share storage, each
// recorded by autograd with its backward formula (view_autograd.h).
#include <algorithm>
#include <atomic>

#include "cohort/core/native/reduce.h"
#include "cohort/core/tensor.h"
#include "cohort/core/view_autograd.h"

namespace cohort {
namespace {

// Infers one -1 and checks the element count.
Shape infer_size(const Shape& sizes, int64_t numel, const char* op) {
  Shape out = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      COHORT_CHECK(infer < 0, "{}: only one dimension can be -1, got {}", op, shape_str(sizes));
      infer = static_cast<int64_t>(i);
    } else {
      COHORT_CHECK(out[i] >= 0, "{}: invalid size in {}", op, shape_str(sizes));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    COHORT_CHECK(known != 0 && numel % known == 0, "{}: shape {} is invalid for {} elements", op,
                 shape_str(sizes), numel);
    out[infer] = numel / known;
  }
  COHORT_CHECK(shape_numel(out) == numel, "{}: shape {} is invalid for input of {} elements", op,
               shape_str(sizes), numel);
  return out;
}

// Strides for viewing (sizes, strides) as new_sizes without a copy, or empty
// when the layout does not allow it (PyTorch's computeStride).
bool view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes, Shape* out) {
  const int64_t numel = shape_numel(sizes);
  out->assign(new_sizes.size(), 0);
  if (numel == 0 || sizes.empty()) {
    *out = contiguous_strides(new_sizes);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(sizes.size()) - 1; td >= 0; --td) {
    tensor_numel *= sizes[td];
    if (td == 0 || (sizes[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base_stride = strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

detail::ViewBackward reshape_back(Shape in) {
  return [in = std::move(in)](const Tensor& g) { return g.reshape(in); };
}

// Gradient of a view that selects part of a tensor of `sizes`: zeros of that
// shape with g written into the same view of them.
template <typename SameView>
detail::ViewBackward scatter_back(Shape sizes, DType dt, SameView same_view) {
  return [sizes = std::move(sizes), dt, same_view](const Tensor& g) {
    Tensor z = Tensor::zeros(sizes, dt);
    same_view(z).copy_(g);
    return z;
  };
}

std::atomic<detail::ViewRecorder> g_view_recorder{nullptr};

}  // namespace

namespace detail {

void set_view_recorder(ViewRecorder recorder) {
  g_view_recorder.store(recorder, std::memory_order_release);
}

ViewRecorder view_recorder() { return g_view_recorder.load(std::memory_order_acquire); }

}  // namespace detail

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const {
  return from_storage(storage(), sizes, strides, offset, dtype());
}

Tensor Tensor::view(const Shape& sizes_in) const {
  Shape ns = infer_size(sizes_in, numel(), "view");
  Shape st;
  COHORT_CHECK(view_strides(sizes(), strides(), ns, &st),
               "view: a tensor of shape {} with strides {} cannot be viewed as {}; use reshape",
               shape_str(sizes()), shape_str(strides()), shape_str(ns));
  return detail::record_view(as_strided(ns, st, storage_offset()), *this, "view",
                             [&] { return reshape_back(sizes()); });
}

Tensor Tensor::reshape(const Shape& sizes_in) const {
  Shape ns = infer_size(sizes_in, numel(), "reshape");
  Shape st;
  Tensor out = view_strides(sizes(), strides(), ns, &st) ? as_strided(ns, st, storage_offset())
                                                         : clone().view(ns);
  return detail::record_view(std::move(out), *this, "reshape",
                             [&] { return reshape_back(sizes()); });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t n = dim();
  Shape s = sizes(), st = strides();
  if (n > 0) {
    d0 = wrap_dim(d0, n, "transpose");
    d1 = wrap_dim(d1, n, "transpose");
    std::swap(s[d0], s[d1]);
    std::swap(st[d0], st[d1]);
  }
  return detail::record_view(as_strided(s, st, storage_offset()), *this, "transpose", [&] {
    return detail::ViewBackward(
        [n, d0, d1](const Tensor& g) { return n == 0 ? g : g.transpose(d0, d1); });
  });
}

Tensor Tensor::permute(const Shape& dims) const {
  int64_t n = dim();
  COHORT_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: {} dims given for a {}-d tensor",
               dims.size(), n);
  Shape s(n), st(n), inverse(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    COHORT_CHECK(!seen[d], "permute: dim {} repeated in {}", d, shape_str(dims));
    seen[d] = true;
    s[i] = sizes()[d];
    st[i] = strides()[d];
    inverse[d] = i;
  }
  return detail::record_view(as_strided(s, st, storage_offset()), *this, "permute", [&] {
    return detail::ViewBackward([inverse](const Tensor& g) { return g.permute(inverse); });
  });
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t n = dim();
  d = wrap_dim(d, n + 1, "unsqueeze");
  Shape s = sizes(), st = strides();
  int64_t new_stride = d < n ? s[d] * st[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return detail::record_view(as_strided(s, st, storage_offset()), *this, "unsqueeze",
                             [&] { return reshape_back(sizes()); });
}

Tensor Tensor::squeeze(int64_t d) const {
  int64_t n = dim();
  Shape s = sizes(), st = strides();
  if (n > 0) {
    d = wrap_dim(d, n, "squeeze");
    if (s[d] == 1) {
      s.erase(s.begin() + d);
      st.erase(st.begin() + d);
    }
  }
  return detail::record_view(as_strided(s, st, storage_offset()), *this, "squeeze",
                             [&] { return reshape_back(sizes()); });
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (int64_t i = 0; i < dim(); ++i) {
    if (sizes()[i] == 1) continue;
    s.push_back(sizes()[i]);
    st.push_back(strides()[i]);
  }
  return detail::record_view(as_strided(s, st, storage_offset()), *this, "squeeze",
                             [&] { return reshape_back(sizes()); });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = sizes()[d];
  if (start < 0) start += n;
  COHORT_CHECK(start >= 0 && length >= 0 && start + length <= n,
               "narrow: range [{}, {}) out of bounds for dim {} of size {}", start, start + length,
               d, n);
  Shape s = sizes();
  s[d] = length;
  return detail::record_view(
      as_strided(s, strides(), storage_offset() + start * strides()[d]), *this, "narrow", [&] {
        return scatter_back(sizes(), dtype(),
                            [=](const Tensor& z) { return z.narrow(d, start, length); });
      });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  COHORT_CHECK(dim() > 0, "select: cannot select from a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = sizes()[d];
  if (index < 0) index += n;
  COHORT_CHECK(index >= 0 && index < n, "select: index {} out of range for dim {} of size {}",
               index, d, n);
  Shape s = sizes(), st = strides();
  int64_t off = storage_offset() + index * st[d];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return detail::record_view(as_strided(s, st, off), *this, "select", [&] {
    return scatter_back(sizes(), dtype(), [=](const Tensor& z) { return z.select(d, index); });
  });
}

Tensor Tensor::expand(const Shape& target) const {
  int64_t n = dim(), m = static_cast<int64_t>(target.size());
  COHORT_CHECK(m >= n, "expand: target {} has fewer dims than tensor {}", shape_str(target),
               shape_str(sizes()));
  Shape s(m), st(m);
  for (int64_t i = m - 1; i >= 0; --i) {
    int64_t j = i - (m - n);
    int64_t want = target[i];
    if (j >= 0) {
      int64_t have = sizes()[j];
      if (want == -1) want = have;
      COHORT_CHECK(have == want || have == 1, "expand: tensor {} cannot be expanded to {}",
                   shape_str(sizes()), shape_str(target));
      s[i] = want;
      st[i] = have == want ? strides()[j] : 0;
    } else {
      COHORT_CHECK(want >= 0, "expand: -1 not allowed for new leading dim in {}",
                   shape_str(target));
      s[i] = want;
      st[i] = 0;
    }
  }
  return detail::record_view(as_strided(s, st, storage_offset()), *this, "expand", [&] {
    return detail::ViewBackward([in = sizes()](const Tensor& g) { return native::sum_to(g, in); });
  });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  COHORT_CHECK(start_dim <= end_dim, "flatten: start_dim {} after end_dim {}", start_dim, end_dim);
  Shape s(sizes().begin(), sizes().begin() + start_dim);
  int64_t p = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) p *= sizes()[i];
  s.push_back(p);
  s.insert(s.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(s);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  d = wrap_dim(d, dim(), "slice");
  const int64_t n = sizes()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return narrow(d, start, end - start);
}

}  // namespace cohort
