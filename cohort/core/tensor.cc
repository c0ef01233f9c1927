#include "cohort/core/tensor.h"

#include <bit>
#include <cmath>
#include <ostream>
#include <sstream>

#include "cohort/core/autograd_meta.h"
#include "cohort/core/device_dispatch.h"
#include "cohort/core/device_runtime.h"
#include "cohort/core/dispatch.h"
#include "cohort/core/loops.h"
#include "cohort/core/tensor_device_ops.h"
#include "cohort/core/view_autograd.h"

namespace cohort {

namespace detail {

void throw_dtype_mismatch(const char* what, DType want, DType have) {
  throw InvalidArgument(fmt::format("{}: tensor has dtype {}, requested {}", what, dtype_name(have),
                                    dtype_name(want)));
}

template <typename T>
T convert_from(const void* p, DType dt) {
  return dispatch_all(dt, "item", [&](auto tag) -> T {
    using S = decltype(tag);
    return cast_value<T>(*static_cast<const S*>(p));
  });
}
template float convert_from<float>(const void*, DType);
template double convert_from<double>(const void*, DType);
template int32_t convert_from<int32_t>(const void*, DType);
template int64_t convert_from<int64_t>(const void*, DType);
template uint8_t convert_from<uint8_t>(const void*, DType);
template bool convert_from<bool>(const void*, DType);

}  // namespace detail

namespace {

// Contiguous conversion; float <-> bfloat16 get branch-free loops the
// compiler vectorises (DDP's bf16 gradient compression converts whole buckets).
template <typename D, typename S>
void convert_run(D* d, const S* s, int64_t n) {
  if constexpr (std::is_same_v<D, BFloat16> && std::is_same_v<S, float>) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(s[i]);
      const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
      d[i].bits = static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
    }
  } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, BFloat16>) {
    for (int64_t i = 0; i < n; ++i)
      d[i] = std::bit_cast<float>(static_cast<uint32_t>(s[i].bits) << 16);
  } else if constexpr (std::is_same_v<D, Half> && std::is_same_v<S, float>) {
    // Half(float) as selects, so that the loop vectorises (fp16_compress_hook
    // converts whole buckets): round to nearest even, overflow to inf, NaN
    // to 0x7e00, subnormals rounded by a float add of 0.5 (the hardware's
    // nearest-even rounding at 2^-24 units).
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(s[i]);
      const uint32_t sign = (u >> 16) & 0x8000u;
      const uint32_t abs = u & 0x7fffffffu;
      const uint32_t special = abs > 0x7f800000u ? 0x7e00u : 0x7c00u;
      const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + 0.5f) - 0x3f000000u;
      const uint32_t normal = (abs - 0x38000000u + 0xfffu + ((abs >> 13) & 1u)) >> 13;
      const uint32_t h = abs >= 0x47800000u ? special : abs < 0x38800000u ? sub : normal;
      d[i].bits = static_cast<uint16_t>(sign | h);
    }
  } else if constexpr (std::is_same_v<D, float> && std::is_same_v<S, Half>) {
    // Exact; subnormals through a float subtraction (2^-14 units), as selects.
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t h = s[i].bits;
      const uint32_t sign = (h & 0x8000u) << 16;
      const uint32_t shifted = (h & 0x7fffu) << 13;
      const uint32_t exp = shifted & 0x0f800000u;
      const uint32_t normal = shifted + 0x38000000u;
      const uint32_t special = shifted + 0x70000000u;  // inf / nan: exponent 255
      const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(shifted + 0x38800000u) -
                                                   std::bit_cast<float>(0x38800000u));
      const uint32_t f = exp == 0x0f800000u ? special : exp == 0 ? sub : normal;
      d[i] = std::bit_cast<float>(sign | f);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = cast_value<D>(s[i]);
  }
}

}  // namespace

// ---- factories ----

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes)
    COHORT_CHECK(s >= 0, "Tensor::empty: negative size in shape {}", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(
      static_cast<size_t>(shape_numel(sizes)) * dtype_size(dtype), device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& sizes, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  if (!device.is_cpu()) {
    Device d = t.device();
    device_runtime(d, "zeros").fill_bytes(t.device_data(), 0, t.nbytes(), current_stream(d));
    return t;
  }
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& sizes, DType dtype, Device device) {
  return full(sizes, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& sizes, double value, DType dtype, Device device) {
  Tensor t = empty(sizes, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

Tensor Tensor::arange(int64_t end, DType dtype) {
  return arange(0.0, static_cast<double>(end), 1.0, dtype);
}

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  COHORT_CHECK(step != 0.0, "arange: step must be non-zero");
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (n < 0) n = 0;
  Tensor t = empty({n}, dtype);
  dispatch_all(dtype, "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = cast_value<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& sizes, DType dtype,
                         std::function<void(void*)> deleter) {
  for (int64_t d : sizes)
    COHORT_CHECK(d >= 0, "from_blob: sizes {} has a negative size", shape_str(sizes));
  return from_blob(data, sizes, contiguous_strides(sizes), dtype, std::move(deleter));
}

Tensor Tensor::from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype,
                         std::function<void(void*)> deleter) {
  COHORT_CHECK(sizes.size() == strides.size(), "from_blob: sizes {} and strides {} differ in rank",
               shape_str(sizes), shape_str(strides));
  int64_t span = 1;  // elements from data to one past the last one viewed
  for (size_t i = 0; i < sizes.size(); ++i) {
    COHORT_CHECK(sizes[i] >= 0, "from_blob: sizes {} has a negative size", shape_str(sizes));
    COHORT_CHECK(strides[i] >= 0, "from_blob: strides {} has a negative stride",
                 shape_str(strides));
    if (sizes[i] == 0) span = 0;
  }
  if (span != 0)
    for (size_t i = 0; i < sizes.size(); ++i) span += (sizes[i] - 1) * strides[i];
  COHORT_CHECK(data != nullptr || span == 0, "from_blob: data is null for a tensor of sizes {}",
               shape_str(sizes));
  COHORT_CHECK(reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0,
               "from_blob: data {} is not aligned to {} bytes, the size of {}", fmt::ptr(data),
               dtype_size(dtype), dtype_name(dtype));
  auto storage = std::make_shared<Storage>(data, static_cast<size_t>(span) * dtype_size(dtype),
                                           std::move(deleter));
  return from_storage(std::move(storage), sizes, strides, 0, dtype);
}

Tensor Tensor::from_blob(void* data, const Shape& sizes, DType dtype, Device device,
                         std::function<void(void*)> deleter) {
  if (device.is_cpu()) return from_blob(data, sizes, dtype, std::move(deleter));
  for (int64_t d : sizes)
    COHORT_CHECK(d >= 0, "from_blob: sizes {} has a negative size", shape_str(sizes));
  size_t nbytes = static_cast<size_t>(shape_numel(sizes)) * dtype_size(dtype);
  COHORT_CHECK(data != nullptr || nbytes == 0, "from_blob: data is null for a tensor of sizes {}",
               shape_str(sizes));
  auto storage =
      std::make_shared<Storage>(data, nbytes, std::move(deleter), resolve_device(device));
  return from_storage(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& sizes,
                            const Shape& strides, int64_t offset, DType dtype) {
  COHORT_CHECK(sizes.size() == strides.size(),
               "from_storage: sizes {} and strides {} differ in rank", shape_str(sizes),
               shape_str(strides));
  int64_t max_off = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) max_off = -1;
    if (max_off >= 0) max_off += (sizes[i] - 1) * strides[i];
  }
  COHORT_CHECK(
      max_off < 0 || static_cast<size_t>(max_off + 1) * dtype_size(dtype) <= storage->nbytes(),
      "from_storage: view {} (strides {}, offset {}) exceeds storage of {} bytes", shape_str(sizes),
      shape_str(strides), offset, storage->nbytes());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// ---- metadata ----

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = impl();
  if (!t.storage->device().is_cpu()) [[unlikely]] {
    throw InvalidArgument(fmt::format(
        "a tensor on {} reached CPU code, which cannot read device memory: move it with .cpu(), "
        "or run the op where its kernel is ({}, {})",
        t.storage->device().str(), shape_str(t.sizes), dtype_name(t.dtype)));
  }
  return device_data();
}

void* Tensor::device_data() const {
  const TensorImpl& t = impl();
  return static_cast<std::byte*>(t.storage->data()) +
         t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

// ---- copies ----

Tensor Tensor::clone() const {
  Tensor out = empty(sizes(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return detail::record_view(clone(), *this, "contiguous", [] {
    return detail::ViewBackward([](const Tensor& g) { return g; });
  });
}

Tensor Tensor::detach() const {
  const TensorImpl& t = impl();
  return from_storage(t.storage, t.sizes, t.strides, t.offset, t.dtype);
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(sizes(), dt, device());
  out.copy_(*this);
  // Integer results carry no gradient (PyTorch's rule).
  if (!is_floating(dt)) return out;
  return detail::record_view(std::move(out), *this, "to", [src = dtype()] {
    return detail::ViewBackward([src](const Tensor& g) { return g.to(src); });
  });
}

Tensor Tensor::to(Device device) const {
  device = resolve_device(device);
  if (device == this->device()) return *this;
  Tensor out = empty(sizes(), dtype(), device);
  out.copy_(*this);
  if (!is_floating(dtype())) return out;
  return detail::record_view(std::move(out), *this, "to", [src = this->device()] {
    return detail::ViewBackward([src](const Tensor& g) { return g.to(src); });
  });
}

Tensor& Tensor::copy_(const Tensor& src) {
  Shape b = broadcast_shapes(sizes(), src.sizes(), "copy_");
  COHORT_CHECK(b == sizes(), "copy_: source shape {} does not broadcast to destination {}",
               shape_str(src.sizes()), shape_str(sizes()));
  if (src.device() != device()) {
    storage()->bump_version();
    copy_between_devices(*this, src);
    return *this;
  }
  if (!device().is_cpu()) {
    storage()->bump_version();
    copy_device(device(), *this, src);
    return *this;
  }
  std::array<Shape, 2> st{strides(), broadcast_strides(src.sizes(), src.strides(), sizes())};
  storage()->bump_version();
  dispatch_all(dtype(), "copy_", [&](auto dtag) {
    using D = decltype(dtag);
    D* dp = static_cast<D*>(raw_data());
    dispatch_all(src.dtype(), "copy_", [&](auto stag) {
      using S = decltype(stag);
      const S* sp = static_cast<const S*>(src.raw_data());
      for_each_row<2>(
          sizes(), st,
          [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& is) {
            D* d = dp + off[0];
            const S* s = sp + off[1];
            if (is[0] == 1 && is[1] == 1) {
              if constexpr (std::is_same_v<D, S>) {
                std::memcpy(d, s, static_cast<size_t>(n) * sizeof(D));
              } else {
                convert_run(d, s, n);
              }
            } else {
              for (int64_t i = 0; i < n; ++i) d[i * is[0]] = cast_value<D>(s[i * is[1]]);
            }
          });
    });
  });
  return *this;
}

Tensor& Tensor::fill_(double value) {
  storage()->bump_version();
  if (!device().is_cpu()) {
    fill_device(device(), *this, value);
    return *this;
  }
  dispatch_all(dtype(), "fill_", [&](auto tag) {
    using T = decltype(tag);
    T v = cast_value<T>(value);
    T* p = static_cast<T*>(raw_data());
    std::array<Shape, 1> st{strides()};
    for_each_row<1>(
        sizes(), st,
        [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& is) {
          T* d = p + off[0];
          if (is[0] == 1) {
            for (int64_t i = 0; i < n; ++i) d[i] = v;
          } else {
            for (int64_t i = 0; i < n; ++i) d[i * is[0]] = v;
          }
        });
  });
  return *this;
}

// ---- autograd state (engine-free parts) ----

AutogradMeta& Tensor::autograd_meta() const {
  TensorImpl& t = impl();
  if (!t.autograd) t.autograd = std::make_shared<AutogradMeta>();
  return *t.autograd;
}

bool Tensor::requires_grad() const {
  const TensorImpl& t = impl();
  return t.autograd && (t.autograd->requires_grad || t.autograd->grad_fn);
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  COHORT_CHECK(is_leaf(),
               "set_requires_grad: only leaf tensors can change requires_grad; this one is the "
               "output of an op (use detach() to get a leaf)");
  if (requires_grad) {
    COHORT_CHECK(is_floating(dtype()),
                 "set_requires_grad: only floating tensors can require "
                 "gradients, got {}",
                 dtype_name(dtype()));
    autograd_meta().requires_grad = true;
  } else if (has_autograd_meta()) {
    autograd_meta().requires_grad = false;
  }
  return *this;
}

Tensor Tensor::grad() const {
  if (!has_autograd_meta()) return Tensor();
  AutogradMeta& m = autograd_meta();
  std::lock_guard<std::mutex> lock(m.mu);
  return m.grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    COHORT_CHECK(grad.sizes() == sizes(), "set_grad: gradient shape {} differs from tensor {}",
                 shape_str(grad.sizes()), shape_str(sizes()));
    COHORT_CHECK(grad.dtype() == dtype(), "set_grad: gradient dtype {} differs from tensor {}",
                 dtype_name(grad.dtype()), dtype_name(dtype()));
  }
  AutogradMeta& m = autograd_meta();
  std::lock_guard<std::mutex> lock(m.mu);
  m.grad = grad;
}

Tensor& Tensor::mutable_grad() const { return autograd_meta().grad; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  const TensorImpl& t = impl();
  return t.autograd ? t.autograd->grad_fn : kNone;
}

GradHookHandle Tensor::register_grad_ready_hook(std::function<void(Tensor&)> hook) {
  COHORT_CHECK(is_leaf(),
               "register_grad_ready_hook: only leaf tensors have a gradient to "
               "accumulate");
  AutogradMeta& m = autograd_meta();
  std::lock_guard<std::mutex> lock(m.mu);
  uint64_t id = m.next_hook_id++;
  m.hooks.emplace_back(id, std::move(hook));
  return GradHookHandle(impl_->autograd, id);
}

void GradHookHandle::remove() {
  auto m = meta_.lock();
  if (!m) return;
  std::lock_guard<std::mutex> lock(m->mu);
  std::erase_if(m->hooks, [this](const auto& h) { return h.first == id_; });
  meta_.reset();
}

// ---- helpers ----

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.sizes(), t.dtype()); }
Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.sizes(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return Tensor::ones(t.sizes(), t.dtype()); }
Tensor full_like(const Tensor& t, double value) {
  return Tensor::full(t.sizes(), value, t.dtype());
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::kUInt8:
        return 0;
      case DType::kInt32:
        return 1;
      case DType::kInt64:
        return 2;
      case DType::kBFloat16:
      case DType::kFloat16:
        return 3;
      case DType::kFloat32:
        return 4;
      case DType::kFloat64:
        return 5;
    }
    return 0;
  };
  if (rank(a) == 3 && rank(b) == 3) return DType::kFloat32;
  return rank(a) >= rank(b) ? a : b;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  return va == vb;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.sizes() != b.sizes()) return false;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  }
  return true;
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << shape_str(t.sizes()) << ", dtype=" << dtype_name(t.dtype());
  if (t.requires_grad()) os << ", requires_grad";
  os << ", values=[";
  constexpr int64_t kMaxShown = 20;
  auto v = t.to_vector<double>();
  for (int64_t i = 0; i < std::min<int64_t>(kMaxShown, t.numel()); ++i) {
    if (i) os << ", ";
    os << v[i];
  }
  if (t.numel() > kMaxShown) os << ", ... (" << t.numel() << " total)";
  return os << "])";
}

}  // namespace cohort
