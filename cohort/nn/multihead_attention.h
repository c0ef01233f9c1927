// nn::MultiheadAttention, as torch.nn.MultiheadAttention (1.13) without
// dropout, add_bias_kv, add_zero_attn and separate key/value widths:
//   q = query W_q^T + b_q, k = key W_k^T + b_k, v = value W_v^T + b_v
//   (W_q, W_k, W_v the three row blocks of in_proj_weight [3E, E]),
//   split into num_heads heads of E / num_heads, softmax(q k^T / sqrt(hs) +
//   mask) v per head, heads joined, out_proj Linear(E, E).
// Shapes: query [Tq, B, E], key and value [Tk, B, E] (batch_first: [B, T, E])
//   -> output of query's shape; weights [B, Tq, Tk] averaged over heads (or
//   [B, num_heads, Tq, Tk]), undefined unless need_weights.
// Masks (PyTorch's conventions): attn_mask [Tq, Tk] or [B * num_heads, Tq,
//   Tk], integer (nonzero = may NOT attend) or floating (added to the scores);
//   key_padding_mask [B, Tk], integer (nonzero = padding, ignored) or
//   floating (added); is_causal: query i sees keys j <= i (top-left).
//   Without masks and weights the scores go through
//   scaled_dot_product_attention (no Tq x Tk matrix), else composed ops.
// Parameters: in_proj_weight (Xavier uniform), in_proj_bias (zeros),
//   out_proj.weight (Linear's default), out_proj.bias (zeros), drawn in that
//   order; with bias = false neither bias exists.
// Failure: InvalidArgument naming the module and the mismatched shapes.
// Thread safety: stateless forward, see module.h.
#pragma once

#include <utility>

#include "cohort/core/random.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"

namespace cohort::nn {

struct MultiheadAttentionOptions {
  bool bias = true;
  bool batch_first = false;
};

// Per-call options of MultiheadAttention::forward (PyTorch's keyword arguments).
struct AttentionCall {
  Tensor key_padding_mask{};  // [B, Tk] or undefined
  bool need_weights = true;
  Tensor attn_mask{};  // [Tq, Tk] or [B * num_heads, Tq, Tk], or undefined
  bool average_attn_weights = true;
  bool is_causal = false;
};

class MultiheadAttention : public Cloneable<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, Generator& gen,
                     const MultiheadAttentionOptions& options = {});

  // (output, weights) as PyTorch's forward returns them.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionCall& call = {});
  // Self-attention without weights: forward(x, x, x, {.need_weights = false}).first.
  Tensor forward(const Tensor& x) override;
  // mha(q, k, v, {.need_weights = false}): a braced AttentionCall cannot pass
  // through Cloneable's forwarding operator (its type would not be deduced).
  using Cloneable::operator();
  std::pair<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const AttentionCall& call = {}) {
    return forward(query, key, value, call);
  }
  std::string extra_repr() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const Tensor& in_proj_weight() const { return param(0); }
  Tensor& in_proj_weight() { return param(0); }
  // Undefined with bias = false.
  const Tensor& in_proj_bias() const;
  Linear& out_proj() const { return *out_proj_; }

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  MultiheadAttentionOptions options_;
  Child<Linear> out_proj_;
};

}  // namespace cohort::nn
