// Tensor: a shared handle to an n-d strided view of a Storage, as in PyTorch.
// Copying a Tensor aliases it (both handles see the same data, shape and
// autograd state); clone() copies the data. A default-constructed Tensor is
// undefined (defined() == false) and most calls on it throw.
//
// Autograd layering: core keeps the autograd state of a tensor in an
// AutogradMeta (autograd_meta.h, a plain record) that refers to graph nodes
// only through std::shared_ptr<autograd::Node>, a type that core declares but
// never defines. The operations that need the engine -- backward() -- are
// declared here and defined in the cohort_autograd library, so a program that
// calls them links cohort_autograd. The differentiable ops (add, matmul, ...)
// are free functions in cohort/autograd/ops.h. As in PyTorch, the view
// members (view, reshape, flatten, transpose, permute, slicing, ...) and
// contiguous() and to() are recorded by autograd too: core computes them and
// their backward formula and the autograd library records the node
// (view_autograd.h). clone(), detach(), as_strided() and the in-place members
// (for optimizers, under NoGradGuard) are not recorded.
//
// Thread safety: a Tensor handle is like a shared_ptr: distinct handles may be
// used from different threads; concurrent writes to the same data are the
// caller's to synchronise. Gradient accumulation into a leaf is locked, so
// graphs on several threads that share leaf parameters are safe.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/core/device.h"
#include "cohort/core/dtype.h"
#include "cohort/core/shape.h"
#include "cohort/core/storage.h"

namespace cohort {

namespace autograd {
class Node;  // defined in cohort/autograd/node.h
}  // namespace autograd

struct AutogradMeta;
class Tensor;

// Returned by Tensor::register_grad_ready_hook; remove() unregisters (safe to
// call twice, and after the tensor is gone).
class GradHookHandle {
 public:
  GradHookHandle() = default;
  GradHookHandle(std::weak_ptr<AutogradMeta> meta, uint64_t id) : meta_(std::move(meta)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<AutogradMeta> meta_;
  uint64_t id_ = 0;
};

// The shared state behind a Tensor handle.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::kFloat32;
  std::shared_ptr<AutogradMeta> autograd;  // null: no grad, no grad_fn
  // These values rounded to bf16 by the op that made them, in the same pass
  // (native::set_bf16_twin); valid while storage->version() is twin_version.
  std::shared_ptr<TensorImpl> bf16_twin;
  uint64_t bf16_twin_version = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (contiguous, new storage) ----
  // On `device` (cpu by default; "cuda" means the current CUDA device). A
  // device that is missing throws NotSupported saying why.
  static Tensor empty(const Shape& sizes, DType dtype = DType::kFloat32, Device device = kCPU);
  static Tensor zeros(const Shape& sizes, DType dtype = DType::kFloat32, Device device = kCPU);
  static Tensor ones(const Shape& sizes, DType dtype = DType::kFloat32, Device device = kCPU);
  static Tensor full(const Shape& sizes, double value, DType dtype = DType::kFloat32,
                     Device device = kCPU);
  // Copies values; numel(sizes) must equal values.size(). Empty sizes with one
  // value gives a 0-d tensor; sizes {-1} (the default) means 1-d of values.size().
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& sizes = {-1});
  static Tensor scalar(double value, DType dtype = DType::kFloat32);  // 0-d
  // [0, end) and [start, end) step `step`, like torch.arange.
  static Tensor arange(int64_t end, DType dtype = DType::kInt64);
  static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::kFloat32);
  // LibTorch's torch::from_blob: a tensor over memory cohort did not allocate,
  // neither copied nor freed. Lifetime: the memory must stay valid while any
  // tensor sharing it lives (views, the handles autograd saves for backward,
  // and DataLoader batches all share it); `deleter`, when given, is called
  // once with `data` when the last of them goes away. Strides default to
  // contiguous. Throws InvalidArgument for a null `data` with elements, a
  // negative size, or `data` not aligned to the dtype's size.
  static Tensor from_blob(void* data, const Shape& sizes, DType dtype = DType::kFloat32,
                          std::function<void(void*)> deleter = {});
  static Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, DType dtype,
                          std::function<void(void*)> deleter = {});
  // Device memory (e.g. a cudaMalloc'd block) on `device`, same rules.
  static Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device,
                          std::function<void(void*)> deleter = {});
  // A view of an existing storage (used by views and by DDP's flat buckets).
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& sizes,
                             const Shape& strides, int64_t offset, DType dtype);

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl().sizes; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Shape& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t numel() const { return shape_numel(impl().sizes); }
  DType dtype() const { return impl().dtype; }
  int64_t storage_offset() const { return impl().offset; }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  Device device() const { return impl().storage->device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  // True when both handles alias one TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }

  // Pointer to the first element; throws InvalidArgument when T is not dtype(),
  // or when the tensor is not on the CPU (CPU code must not read device
  // memory: .cpu() first).
  template <typename T>
  T* data_ptr() const;
  void* raw_data() const;
  // The first element's address on whatever device holds it: for device
  // kernels, which know the memory is not the host's.
  void* device_data() const;
  template <typename T>
  T* device_ptr() const;
  // The single element of a 1-element tensor, converted to T.
  template <typename T>
  T item() const;
  // All elements in row-major order (any layout), converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- copies and conversions ----
  Tensor clone() const;          // contiguous copy, same dtype, no autograd state
  Tensor contiguous() const;     // *this when already contiguous, else a copy (recorded)
  Tensor detach() const;         // same data, no autograd state
  Tensor to(DType dtype) const;  // *this when dtype matches, else a converted copy (recorded)
  // *this when already there, else a copy on `device` (recorded: the gradient
  // goes back to this device). cuda() is the current CUDA device.
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const { return to(device).to(dtype); }
  Tensor cuda() const { return to(Device(DeviceType::kCUDA)); }
  Tensor cpu() const { return to(kCPU); }
  // Copies src (broadcast to this shape, converted to this dtype) into this view;
  // between devices through the device runtime (device_runtime.h).
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // ---- views (share storage; recorded by autograd, like ops.h's free
  // functions of the same names, except as_strided) ----
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;
  Tensor view(const Shape& sizes) const;     // needs a compatible layout; one -1 allowed
  Tensor reshape(const Shape& sizes) const;  // view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;  // no-op when that size is not 1
  Tensor squeeze() const;             // all size-1 dims
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // Python's t[..., start:end] along dim: negative ends count from the back,
  // out-of-range ends are clamped (LibTorch's Tensor::slice, step 1).
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor expand(const Shape& sizes) const;          // -1 keeps a size
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // ---- math, LibTorch's member spellings (x.relu(), x.sum(1), x.argmax(1)) ----
  // Each is the free function of the same name in cohort/autograd/ops.h,
  // recorded by autograd; they are defined in the cohort_autograd library
  // (tensor_methods.cc), so a program that calls them links it.
  Tensor add(const Tensor& other) const;
  Tensor add(double value) const;
  Tensor sub(const Tensor& other) const;
  Tensor sub(double value) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(double value) const;
  Tensor div(const Tensor& other) const;
  Tensor div(double value) const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor pow(double exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor matmul(const Tensor& other) const;
  Tensor sum() const;  // 0-d
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;  // 0-d
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor max() const;                                      // 0-d
  Tensor min() const;                                      // 0-d
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, not differentiable
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // Comparisons give uint8 0/1 (not differentiable), broadcasting.
  Tensor eq(const Tensor& other) const;
  Tensor eq(double value) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(double value) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(double value) const;
  Tensor ge(const Tensor& other) const;
  // this = (this == other) in this tensor's dtype (LibTorch's eq_), in place.
  Tensor& eq_(const Tensor& other);

  // ---- in-place math for optimizers and accumulation (not recorded) ----
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // this += alpha * other (broadcast)
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& addcmul_(const Tensor& t1, const Tensor& t2, double value = 1.0);
  Tensor& addcdiv_(const Tensor& t1, const Tensor& t2, double value = 1.0);
  Tensor& sqrt_();
  Tensor& clamp_(double min, double max);

  // ---- autograd state (see the layering note above) ----
  bool requires_grad() const;
  // Only leaves (tensors without grad_fn) may be changed; returns *this.
  Tensor& set_requires_grad(bool requires_grad);
  // Accumulated gradient of a leaf (undefined until the first backward).
  Tensor grad() const;
  // Replaces the gradient tensor. Backward then accumulates IN PLACE into this
  // very tensor (DDP points it into a flat bucket). Pass Tensor() to clear.
  void set_grad(const Tensor& grad) const;
  // Reference to the stored gradient, for callers that reassign or zero it
  // (unlocked: not while a backward pass on another thread may accumulate).
  Tensor& mutable_grad() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const { return grad_fn() == nullptr; }
  // Defined in cohort_autograd. backward() needs a one-element tensor; the
  // graph is freed as it is consumed (no retain_graph).
  void backward() const;
  void backward(const Tensor& grad) const;
  // Fires once per backward pass right after this leaf's gradient has been
  // fully accumulated, with the leaf itself (its grad() is final). Runs on the
  // thread that runs backward; an exception propagates out of backward().
  GradHookHandle register_grad_ready_hook(std::function<void(Tensor&)> hook);

  // Internal: the autograd record, created on demand.
  AutogradMeta& autograd_meta() const;
  bool has_autograd_meta() const { return impl().autograd != nullptr; }

 private:
  TensorImpl& impl() const {
    if (!impl_) [[unlikely]]
      throw InvalidArgument("Tensor: operation on an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// New contiguous tensors with t's shape and (by default) dtype.
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

// Test helpers: same shape and (after conversion to float64) equal values /
// |a - b| <= atol + rtol * |b| elementwise (NaNs compare unequal).
bool equal(const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// Promotion for mixed-dtype math: float64 > float32 > int64 > int32 > uint8.
DType promote_types(DType a, DType b);

// ---- template definitions ----

namespace detail {
[[noreturn]] void throw_dtype_mismatch(const char* what, DType want, DType have);
template <typename T>
T convert_from(const void* p, DType dt);
}  // namespace detail

template <typename T>
T* Tensor::data_ptr() const {
  if (dtype() != dtype_of<T>) detail::throw_dtype_mismatch("data_ptr", dtype_of<T>, dtype());
  return static_cast<T*>(raw_data());
}

template <typename T>
T* Tensor::device_ptr() const {
  if (dtype() != dtype_of<T>) detail::throw_dtype_mismatch("device_ptr", dtype_of<T>, dtype());
  return static_cast<T*>(device_data());
}

template <typename T>
T Tensor::item() const {
  COHORT_CHECK(numel() == 1, "item: tensor must have one element, has shape {}",
               shape_str(sizes()));
  if (!is_cpu()) return cpu().item<T>();
  return detail::convert_from<T>(raw_data(), dtype());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (!is_cpu()) return cpu().to_vector<T>();
  Tensor c = to(dtype_of<T>).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& sizes) {
  Shape s = sizes;
  if (s.size() == 1 && s[0] == -1) s[0] = static_cast<int64_t>(values.size());
  COHORT_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()),
               "from_vector: shape {} needs {} values, got {}", shape_str(s), shape_numel(s),
               values.size());
  Tensor t = empty(s, dtype_of<T>);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace cohort
