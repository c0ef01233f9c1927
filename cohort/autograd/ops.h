// Differentiable tensor ops: the functions users build models from. Each op
// computes its result with the kernels in cohort/core/native and, when grad
// mode is on and an input requires grad, records a node whose backward is
// the op's derivative. Semantics and names follow PyTorch (broadcasting,
// negative dims, reductions). Shape mismatches throw InvalidArgument naming
// the op and the shapes.
//
// Views (reshape when possible, view, transpose, permute, unsqueeze, squeeze,
// narrow, select, expand, flatten) share storage with their input, as in
// PyTorch. In-place writes to a tensor that an op saved for backward are not
// detected (there is no version counter): update parameters under
// NoGradGuard between steps, as optimizers do.
//
// Thread safety: ops on distinct tensors may run concurrently; each op splits
// its work under the calling thread's budget (cohort::num_threads()).
//
// A training step:
//   Tensor y = linear(relu(linear(x, w1, b1)), w2, b2);
//   Tensor loss = mse_loss(y, target);
//   loss.backward();            // w1.grad() ... now hold d loss / d w
//   { NoGradGuard g; w1.add_(w1.grad(), -lr); ... }
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/core/native/loss.h"
#include "cohort/core/tensor.h"

namespace cohort {

// ---- arithmetic (broadcasting; dtypes promote as in native/elementwise.h) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double s);
Tensor rdiv(const Tensor& a, double s);  // s / a
Tensor neg(const Tensor& a);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// ---- activations ----
Tensor relu(const Tensor& x);

// ---- linear algebra ----
// torch.matmul: [n]x[n], [m,k]x[k,n], batched [..., m, k] x [..., k, n] with
// broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x w^T + b: x [..., in], w [out, in], b [out] or undefined -> [..., out].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// ---- views and shape ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one -1 allowed
Tensor view(const Tensor& x, const Shape& shape);     // throws if a copy would be needed
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// x[start:end] along dim (end clamped to the size; negative start/end count from the end).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
// Dtype conversion (Tensor::to is not recorded; this is); returns x when the
// dtype already matches.
Tensor to(const Tensor& x, DType dtype);

// ---- reductions ----
Tensor sum(const Tensor& x);  // 0-d
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);

// ---- softmax and losses ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// input [N, C] log-probabilities, target int64 [N]. ignore_index: targets equal
// to it are skipped (native::kNoIgnoreIndex: none).
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                int64_t ignore_index = native::kNoIgnoreIndex);
// (input - target)^2, reduced; shapes must match exactly.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);

// ---- convolution and pooling (float32, NCHW) ----
// x [N, Cin, H, W], w [Cout, Cin, kh, kw], b [Cout] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0});
// relu(conv2d(...)) in one pass (the kernel's fused epilogue).
Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                   std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0});
// stride defaults to the kernel size (pass {0, 0}).
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel,
                  std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0});

}  // namespace cohort
