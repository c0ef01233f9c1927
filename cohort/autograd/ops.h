// Differentiable tensor ops: the functions users build models from. Each op
// computes its result with the kernels in cohort/core/native and, when grad
// mode is on and an input requires grad, records a node whose backward is
// the op's derivative. Semantics and names follow PyTorch (broadcasting,
// negative dims, reductions). Shape mismatches throw InvalidArgument naming
// the op and the shapes.
//
// Views (reshape when possible, view, transpose, permute, unsqueeze, squeeze,
// narrow, select, expand, flatten) share storage with their input, as in
// PyTorch. Modifying, with an in-place Tensor member (add_, mul_, copy_,
// fill_, ...), a tensor that an op saved for its gradient makes backward
// throw (storage version counters, as in PyTorch); raw writes through
// data_ptr() are not seen. Update parameters under NoGradGuard after
// backward, as optimizers do.
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
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/core/native/loss.h"
#include "cohort/core/random.h"
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

// ---- pointwise math and activations (floating dtypes) ----
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);  // gradient sign(x) (0 at 0, as PyTorch)
Tensor pow(const Tensor& x, double exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);    // broadcasting; x > 0 for d/d exponent
Tensor clamp(const Tensor& x, double min, double max);  // gradient 1 inside [min, max]
Tensor maximum(const Tensor& a, const Tensor& b);       // ties send the gradient to a
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact erf form (PyTorch's default approximate="none")
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// mask ? a : b (mask: uint8 or any integer dtype, nonzero = true), broadcasting.
Tensor where(const Tensor& mask, const Tensor& a, const Tensor& b);

// ---- transformer pieces (fused kernels in core/kernels) and PyTorch conveniences ----
// F.gelu(x, approximate): "none" (the erf form above) or "tanh" (GPT-2's);
// anything else throws InvalidArgument naming the choices.
Tensor gelu(const Tensor& x, std::string_view approximate);
// gelu(linear(x, w, b), "tanh") in one pass over the output: bias and GELU are
// the GEMM's epilogue, per block of rows while it is in cache. Saves the
// pre-activation for the backward. Shapes as linear.
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// linear(linear_gelu(x, w1, b1), w2, b2): a transformer's MLP. Under a bf16
// policy one node, whose backward makes GELU's gradient in the epilogue of
// the GEMM that brings the gradient back through w2 (never a float32 matrix
// of the hidden width); otherwise the two ops. Shapes as the two linears.
Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                          const Tensor& b2 = Tensor());
// The residual add and the LayerNorm after it in one pass: returns
// (s = x + delta, layer_norm(s, {C}, weight, bias, eps)), x and delta of one
// shape [..., C], weight and bias [C] (or undefined). Gradients reach x and
// delta (both get d s), weight and bias.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& delta, const Tensor& weight,
                                         const Tensor& bias, double eps = 1e-5);
// torch.tril / torch.triu over the last two dims (x at least 2-D): keep
// x[..., i, j] where j - i <= diagonal (tril) / >= diagonal (triu), zero elsewhere.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// mask ? value : x, mask (integer, nonzero = true) broadcasting with x; x's dtype.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// where() with a plain number on one side (the tensor's dtype; float32 for an
// integer tensor, as a Python float promotes it).
Tensor where(const Tensor& mask, const Tensor& a, double b);
Tensor where(const Tensor& mask, double a, const Tensor& b);
// torch.split / torch.chunk: views along dim (narrow). split_size pieces, the
// last one shorter; or the given sizes, which must sum to the dim's size.
// chunk: pieces of ceil(size / chunks), so possibly fewer than chunks (an
// empty dim gives chunks empty pieces), as PyTorch.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- comparisons: uint8 masks (1/0), not differentiable ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);

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

// Values (differentiable) and int64 indices along dim; ties pick the first.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // 0-d; gradient to the first maximal element
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // int64, not differentiable

// ---- indexing and joining ----
// torch.gather along dim (index int64 with x's rank).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// weight [V, D], indices integer [*] -> [*, D]. Rows equal to padding_idx get
// no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices,
                 std::optional<int64_t> padding_idx = std::nullopt);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- normalisation and regularisation ----
// Inverted dropout: in training, zeroes each element with probability p and
// scales the rest by 1/(1-p), drawing from `gen`; identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
// torch.nn.functional.dropout2d: zeroes whole channels. x [N, C, H, W] (or
// [C, H, W]); in training each (n, c) plane is kept with probability 1 - p
// and scaled by 1 / (1 - p); identity otherwise.
Tensor dropout2d(const Tensor& x, double p, bool training, Generator& gen);
// Normalises over the trailing normalized_shape dims; weight/bias of that
// shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x [N, C, *]. training: batch statistics, running_mean/var (when defined)
// updated in place with `momentum` (unbiased variance for running_var);
// eval: normalises with the running buffers. PyTorch's F.batch_norm.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);

// ---- softmax and losses ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// input [N, C] log-probabilities, target int64 [N]. ignore_index: targets equal
// to it are skipped (PyTorch default -100; native::kNoIgnoreIndex: none).
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                int64_t ignore_index = -100);
// log_softmax(logits, 1) + nll_loss: logits [N, C] (or [C]), target int64
// [N], computed without the [N, C] probabilities (core/kernels/cross_entropy.h):
// the forward keeps one log-sum-exp per row, the backward writes
// softmax - onehot straight into the gradient. [N, C, d...] throws.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::kMean, int64_t ignore_index = -100);
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
// Square kernel, stride and padding (torch::max_pool2d(x, 2)); stride 0 = kernel.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);

// ---- attention (float32) ----
// PyTorch's F.scaled_dot_product_attention without attn_mask and dropout:
// softmax(q k^T * scale + mask) v, q [..., Tq, D], k [..., Tk, D],
// v [..., Tk, D] (the same leading dims, e.g. [B, H]; Tk >= 1) -> [..., Tq, D].
// scale defaults to 1 / sqrt(D). is_causal: query i attends keys j <= i
// (tril(ones(Tq, Tk)), top-left aligned as PyTorch's is_causal). Computed in
// blocks with an online softmax (cohort/core/kernels/attention.h): memory
// O(T), no Tq x Tk matrix, deterministic. Strided inputs whose rows are
// contiguous (the [B, H, T, D] transposed views of a [B, T, 3C] projection)
// are read in place.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
// The same from a packed projection, as GPT's c_attn makes it: qkv [B, T, 3C]
// holds q, k, v side by side, each C = n_head x D split into heads; returns
// the heads merged, [B, T, C]. Equal (same bits) to
//   y = scaled_dot_product_attention(q, k, v, is_causal, scale)
//   y.transpose(1, 2).reshape({B, T, C})
// with q, k, v the [B, n_head, T, D] views of qkv's thirds, without their
// copies: the kernels read and write the packed layout, and backward makes
// qkv's gradient in one buffer instead of summing three padded ones.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head,
                                           bool is_causal = false,
                                           std::optional<double> scale = std::nullopt);

}  // namespace cohort
