#include "cohort/nn/multihead_attention.h"

#include <cmath>
#include <limits>

#include "cohort/nn/init.h"

namespace cohort::nn {

namespace {

// An integer mask (nonzero = blocked) as 0 / -inf, a floating one as given.
Tensor additive(const Tensor& mask) {
  if (is_floating(mask.dtype())) return mask;
  std::vector<int64_t> m = mask.contiguous().to_vector<int64_t>();
  Tensor out = Tensor::zeros(mask.sizes());
  float* p = out.data_ptr<float>();
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i] != 0) p[i] = -std::numeric_limits<float>::infinity();
  return out;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, Generator& gen,
                                       const MultiheadAttentionOptions& options)
    : Cloneable("MultiheadAttention"),
      embed_dim_(embed_dim),
      num_heads_(num_heads),
      options_(options) {
  COHORT_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
               "MultiheadAttention: embed_dim ({}) must be a positive multiple of num_heads ({})",
               embed_dim, num_heads);
  Tensor w = Tensor::empty({3 * embed_dim, embed_dim});
  init::xavier_uniform_(w, gen);
  register_parameter("in_proj_weight", w);
  if (options.bias) register_parameter("in_proj_bias", Tensor::zeros({3 * embed_dim}));
  out_proj_ = register_module("out_proj",
                              std::make_shared<Linear>(embed_dim, embed_dim, gen, options.bias));
  if (options.bias) init::constant_(out_proj_->bias(), 0.0);
}

const Tensor& MultiheadAttention::in_proj_bias() const {
  static const Tensor none;
  return options_.bias ? param(1) : none;
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, bias={}, batch_first={}", embed_dim_, num_heads_,
                     options_.bias ? "True" : "False", options_.batch_first ? "True" : "False");
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return forward(x, x, x, {.need_weights = false}).first;
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const AttentionCall& call) {
  const int64_t e = embed_dim_, h = num_heads_, hs = e / h;
  const char* layout = options_.batch_first ? "[B, T, E]" : "[T, B, E]";
  auto ok = [&](const Tensor& t) { return t.defined() && t.dim() == 3 && t.size(2) == e; };
  COHORT_CHECK(ok(query) && ok(key) && ok(value),
               "{}: query, key and value must be {} with E = {}, got {}, {}, {}", describe(),
               layout, e, query.defined() ? shape_str(query.sizes()) : "undefined",
               key.defined() ? shape_str(key.sizes()) : "undefined",
               value.defined() ? shape_str(value.sizes()) : "undefined");
  // To [B, T, E].
  auto bt = [&](const Tensor& t) { return options_.batch_first ? t : transpose(t, 0, 1); };
  Tensor q_in = bt(query), k_in = bt(key), v_in = bt(value);
  const int64_t b = q_in.size(0), tq = q_in.size(1), tk = k_in.size(1);
  COHORT_CHECK(k_in.size(0) == b && v_in.size(0) == b && v_in.size(1) == tk,
               "{}: key and value must have query's batch {} and one length, got key {} and "
               "value {} ({})",
               describe(), b, shape_str(key.sizes()), shape_str(value.sizes()), layout);
  const Tensor& w = param(0);
  const Tensor& bias = in_proj_bias();
  auto project = [&](const Tensor& x, int64_t part, int64_t t) {
    Tensor y = linear(x, narrow(w, 0, part * e, e),
                      bias.defined() ? narrow(bias, 0, part * e, e) : Tensor());
    return transpose(reshape(y, {b, t, h, hs}), 1, 2);  // [B, H, T, hs]
  };
  Tensor q = project(q_in, 0, tq), k = project(k_in, 1, tk), v = project(v_in, 2, tk);

  const bool masked = call.attn_mask.defined() || call.key_padding_mask.defined();
  Tensor y, weights;
  if (!masked && !call.need_weights) {
    y = scaled_dot_product_attention(q, k, v, call.is_causal);
  } else {
    Tensor att = mul(matmul(q, transpose(k, -2, -1)), 1.0 / std::sqrt(static_cast<double>(hs)));
    if (call.attn_mask.defined()) {
      const Tensor& m = call.attn_mask;
      const bool two_d = m.dim() == 2 && m.size(0) == tq && m.size(1) == tk;
      const bool three_d = m.dim() == 3 && m.size(0) == b * h && m.size(1) == tq && m.size(2) == tk;
      COHORT_CHECK(two_d || three_d, "{}: attn_mask must be [{}, {}] or [{}, {}, {}], got {}",
                   describe(), tq, tk, b * h, tq, tk, shape_str(m.sizes()));
      Tensor a = additive(m);
      att = add(att, two_d ? a : reshape(a, {b, h, tq, tk}));
    }
    if (call.key_padding_mask.defined()) {
      const Tensor& m = call.key_padding_mask;
      COHORT_CHECK(m.dim() == 2 && m.size(0) == b && m.size(1) == tk,
                   "{}: key_padding_mask must be [{}, {}], got {}", describe(), b, tk,
                   shape_str(m.sizes()));
      att = add(att, reshape(additive(m), {b, 1, 1, tk}));
    }
    if (call.is_causal) {
      Tensor c = Tensor::zeros({tq, tk});
      float* p = c.data_ptr<float>();
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t j = i + 1; j < tk; ++j)
          p[i * tk + j] = -std::numeric_limits<float>::infinity();
      att = add(att, c);
    }
    att = softmax(att, -1);
    y = matmul(att, v);
    if (call.need_weights) weights = call.average_attn_weights ? mean(att, {1}) : att;
  }
  Tensor out = out_proj_(reshape(transpose(y, 1, 2), {b, tq, e}));
  return {options_.batch_first ? out : transpose(out, 0, 1), weights};
}

}  // namespace cohort::nn
