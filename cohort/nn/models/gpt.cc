#include "cohort/nn/models/gpt.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "cohort/autograd/checkpoint.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/linear_cross_entropy.h"
#include "cohort/nn/init.h"

namespace cohort::nn {

namespace {

constexpr double kInitStd = 0.02;
constexpr double kLayerNormEps = 1e-5;

// "int64 [2, 3]" or "undefined", for error messages.
std::string describe_tensor(const Tensor& t) {
  return t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.sizes()))
                     : std::string("undefined");
}

// A Linear whose parameters the caller sets: the layer's own initialisation
// draws from a throw-away generator, so that the model's draws from the
// user's generator follow the documented order only.
std::shared_ptr<Linear> make_linear(int64_t in, int64_t out, bool bias = true) {
  Generator scratch(0);
  return std::make_shared<Linear>(in, out, scratch, bias);
}

void init_linear(Linear& l, double std, Generator& gen) {
  init::normal_(l.weight(), 0.0, std, gen);
  if (l.has_bias()) init::constant_(l.bias(), 0.0);
}

// Additive causal mask [Tq, Tk] for queries at positions past .. past+Tq-1
// over keys 0 .. Tk-1: 0 where key <= query, -inf after.
Tensor causal_mask(int64_t tq, int64_t tk, int64_t past) {
  Tensor m = Tensor::zeros({tq, tk});
  float* p = m.data_ptr<float>();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < tq; ++i)
    for (int64_t j = past + i + 1; j < tk; ++j) p[i * tk + j] = ninf;
  return m;
}

}  // namespace

// ---- GPTConfig ----

const char* gpt_kernels_name(GPTKernels kernels) {
  switch (kernels) {
    case GPTKernels::kFused:
      return "fused";
    case GPTKernels::kComposed:
      return "composed";
  }
  return "unknown";
}

const char* gpt_checkpointing_name(GPTCheckpointing checkpointing) {
  switch (checkpointing) {
    case GPTCheckpointing::kNone:
      return "none";
    case GPTCheckpointing::kBlock:
      return "block";
    case GPTCheckpointing::kAttention:
      return "attention";
  }
  return "unknown";
}

GPTCheckpointing parse_gpt_checkpointing(std::string_view name) {
  for (GPTCheckpointing c :
       {GPTCheckpointing::kNone, GPTCheckpointing::kBlock, GPTCheckpointing::kAttention})
    if (name == gpt_checkpointing_name(c)) return c;
  throw InvalidArgument(fmt::format(
      "activation checkpointing: unknown mode '{}'; choose none, block (every block) or "
      "attention (each block's ln_1 and attention)",
      name));
}

void GPTConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    COHORT_CHECK(v > 0, "GPTConfig: {} must be positive, got {}", name, v);
  };
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  positive(block_size, "block_size");
  positive(vocab_size, "vocab_size");
  COHORT_CHECK(n_embd % n_head == 0,
               "GPTConfig: n_embd ({}) must be a multiple of n_head ({}), e.g. n_embd {} or {}",
               n_embd, n_head, n_embd / n_head * n_head, (n_embd / n_head + 1) * n_head);
}

std::string GPTConfig::str() const {
  return fmt::format("n_layer={}, n_head={}, n_embd={}, block_size={}, vocab_size={}", n_layer,
                     n_head, n_embd, block_size, vocab_size);
}

GPTConfig GPTConfig::reference() { return GPTConfig{}; }

GPTConfig GPTConfig::gpt2() {
  GPTConfig c;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_embd = 768;
  c.block_size = 1024;
  c.vocab_size = 50304;  // 50257 rounded up to a multiple of 64
  return c;
}

Tensor gelu_tanh_composed(const Tensor& x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  Tensor inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), k);
  return mul(mul(x, 0.5), add(tanh(inner), 1.0));
}

// ---- CausalSelfAttention ----

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config, Generator& gen)
    : Cloneable("CausalSelfAttention"), config_(config) {
  config_.validate();
  const int64_t c = config_.n_embd;
  c_attn_ = register_module("c_attn", make_linear(c, 3 * c));
  c_proj_ = register_module("c_proj", make_linear(c, c));
  init_linear(*c_attn_, kInitStd, gen);
  init_linear(*c_proj_, kInitStd / std::sqrt(2.0 * static_cast<double>(config_.n_layer)), gen);
}

std::string CausalSelfAttention::extra_repr() const {
  return fmt::format("n_embd={}, n_head={}", config_.n_embd, config_.n_head);
}

namespace {

// qkv [B, T, 3C] -> q, k, v, each [B, nh, T, hs] (views).
std::array<Tensor, 3> split_heads(const Tensor& qkv, int64_t nh) {
  const int64_t b = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3;
  Tensor s = permute(view(qkv, {b, t, 3, nh, c / nh}), {2, 0, 3, 1, 4});
  return {select(s, 0, 0), select(s, 0, 1), select(s, 0, 2)};
}

// y [B, nh, T, hs] -> [B, T, C].
Tensor merge_heads(const Tensor& y) {
  const int64_t b = y.size(0), nh = y.size(1), t = y.size(2), hs = y.size(3);
  return reshape(transpose(y, 1, 2), {b, t, nh * hs});
}

}  // namespace

Tensor CausalSelfAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                   int64_t past) const {
  const int64_t tq = q.size(2), tk = k.size(2);
  // The fused op's causal mask is top-left aligned (query i sees keys <= i),
  // right for a prefix from position 0 and not needed for one new query; a
  // block of several queries after cached positions takes the composed path.
  if (config_.kernels == GPTKernels::kFused && (past == 0 || tq == 1))
    return scaled_dot_product_attention(q, k, v, /*is_causal=*/past == 0 && tq > 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
  Tensor att = mul(matmul(q, transpose(k, -2, -1)), scale);  // [B, nh, Tq, Tk]
  if (tq > 1)
    att = add(att, causal_mask(tq, tk, past).to(att.device()));  // one query sees every key
  return matmul(softmax(att, -1), v);                            // [B, nh, Tq, hs]
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 3 && x.size(2) == config_.n_embd && x.size(1) <= config_.block_size,
               "{}: input must be [B, T <= {}, {}], got {}", describe(), config_.block_size,
               config_.n_embd, shape_str(x.sizes()));
  if (config_.kernels == GPTKernels::kFused)
    return c_proj_(scaled_dot_product_attention_packed(c_attn_(x), config_.n_head, true));
  auto [q, k, v] = split_heads(c_attn_(x), config_.n_head);
  return c_proj_(merge_heads(attend(q, k, v, 0)));
}

Tensor CausalSelfAttention::forward(const Tensor& x, Tensor& k_cache, Tensor& v_cache,
                                    int64_t past) {
  const Shape want{x.dim() == 3 ? x.size(0) : -1, config_.n_head, config_.block_size,
                   config_.head_dim()};
  COHORT_CHECK(x.dim() == 3 && x.size(2) == config_.n_embd, "{}: input must be [B, T, {}], got {}",
               describe(), config_.n_embd, shape_str(x.sizes()));
  COHORT_CHECK(
      k_cache.defined() && v_cache.defined() && k_cache.sizes() == want && v_cache.sizes() == want,
      "{}: the key/value caches must be {}, got {} and {}", describe(), shape_str(want),
      k_cache.defined() ? shape_str(k_cache.sizes()) : "undefined",
      v_cache.defined() ? shape_str(v_cache.sizes()) : "undefined");
  const int64_t tn = x.size(1);
  COHORT_CHECK(past >= 0 && past + tn <= config_.block_size,
               "{}: {} cached + {} new positions exceed block_size {}", describe(), past, tn,
               config_.block_size);
  auto [q, k, v] = split_heads(c_attn_(x), config_.n_head);
  {
    NoGradGuard no_grad;
    k_cache.narrow(2, past, tn).copy_(k);
    v_cache.narrow(2, past, tn).copy_(v);
  }
  Tensor keys = k_cache.narrow(2, 0, past + tn);
  Tensor values = v_cache.narrow(2, 0, past + tn);
  return c_proj_(merge_heads(attend(q, keys, values, past)));
}

// ---- MLP, Block ----

MLP::MLP(const GPTConfig& config, Generator& gen) : Cloneable("MLP"), config_(config) {
  config_.validate();
  const int64_t c = config_.n_embd;
  c_fc_ = register_module("c_fc", make_linear(c, 4 * c));
  c_proj_ = register_module("c_proj", make_linear(4 * c, c));
  init_linear(*c_fc_, kInitStd, gen);
  init_linear(*c_proj_, kInitStd / std::sqrt(2.0 * static_cast<double>(config_.n_layer)), gen);
}

Tensor MLP::forward(const Tensor& x) {
  if (config_.kernels == GPTKernels::kFused) {
    // c_proj's forward hooks see its call; without hooks the two linears are
    // one op (under bf16, GELU's gradient made inside c_proj's backward GEMM).
    if (c_proj_->has_forward_hooks())
      return c_proj_(linear_gelu(x, c_fc_->weight(), c_fc_->bias()));
    return linear_gelu_linear(x, c_fc_->weight(), c_fc_->bias(), c_proj_->weight(),
                              c_proj_->bias());
  }
  return c_proj_(gelu_tanh_composed(c_fc_(x)));
}

Block::Block(const GPTConfig& config, Generator& gen)
    : Cloneable("Block"), kernels_(config.kernels), checkpointing_(config.checkpointing) {
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(config.n_embd, kLayerNormEps));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(config, gen));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(config.n_embd, kLayerNormEps));
  mlp_ = register_module("mlp", std::make_shared<MLP>(config, gen));
}

Tensor Block::mlp_residual(const Tensor& x, const Tensor& attn_out) {
  if (kernels_ == GPTKernels::kFused) {
    // The residual add and ln_2 in one pass over the rows.
    auto [h, n] = add_layer_norm(x, attn_out, ln_2_->weight(), ln_2_->bias(), kLayerNormEps);
    return add(h, mlp_(n));
  }
  Tensor h = add(x, attn_out);
  return add(h, mlp_(ln_2_(h)));
}

Tensor Block::forward(const Tensor& x) {
  switch (checkpointing_) {
    case GPTCheckpointing::kNone:
      break;
    case GPTCheckpointing::kBlock:
      return autograd::checkpoint(
          [this](const std::vector<Tensor>& in) {
            return mlp_residual(in[0], attn_(ln_1_(in[0])));
          },
          {x});
    case GPTCheckpointing::kAttention:
      return mlp_residual(
          x, autograd::checkpoint(
                 [this](const std::vector<Tensor>& in) { return attn_(ln_1_(in[0])); }, {x}));
  }
  return mlp_residual(x, attn_(ln_1_(x)));
}

Tensor Block::forward(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t past) {
  return mlp_residual(x, attn_->forward(ln_1_(x), k_cache, v_cache, past));
}

// ---- GPT ----

GPT::GPT(const GPTConfig& config, Generator& gen) : Cloneable("GPT"), config_(config) {
  config_.validate();
  const int64_t c = config_.n_embd;
  Generator scratch(0);  // the embeddings' own N(0, 1) draws, overwritten below
  auto wte = std::make_shared<Embedding>(config_.vocab_size, c, scratch);
  auto wpe = std::make_shared<Embedding>(config_.block_size, c, scratch);
  init::normal_(wte->weight(), 0.0, kInitStd, gen);
  init::normal_(wpe->weight(), 0.0, kInitStd, gen);
  auto h = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < config_.n_layer; ++i) h->push_back(std::make_shared<Block>(config_, gen));
  transformer_ = register_module(
      "transformer", std::make_shared<ModuleDict>(std::vector<std::pair<std::string, ModulePtr>>{
                         {"wte", wte},
                         {"wpe", wpe},
                         {"h", h},
                         {"ln_f", std::make_shared<LayerNorm>(c, kLayerNormEps)}}));
  // Weight tying (nanoGPT's `wte.weight = lm_head.weight`): the head's weight
  // slot holds the embedding's tensor, so both uses feed one gradient.
  auto lm_head = make_linear(c, config_.vocab_size, /*bias=*/false);
  lm_head->weight() = wte->weight();
  lm_head_ = register_module("lm_head", lm_head);
}

std::string GPT::extra_repr() const { return config_.str(); }

Embedding& GPT::wte() const { return transformer_->at<Embedding>("wte"); }
Embedding& GPT::wpe() const { return transformer_->at<Embedding>("wpe"); }
ModuleList& GPT::h() const { return transformer_->at<ModuleList>("h"); }
LayerNorm& GPT::ln_f() const { return transformer_->at<LayerNorm>("ln_f"); }

Block& GPT::block(int64_t i) const {
  COHORT_CHECK(i >= 0 && i < config_.n_layer, "{}: block {} out of range [0, {})", describe(), i,
               config_.n_layer);
  return h().at<Block>(static_cast<size_t>(i));
}

void GPT::set_checkpointing(GPTCheckpointing checkpointing) {
  config_.checkpointing = checkpointing;
  for (int64_t i = 0; i < config_.n_layer; ++i) block(i).set_checkpointing(checkpointing);
}

int64_t GPT::num_parameters_without_positions() const {
  return num_parameters() - wpe().weight().numel();
}

void GPT::check_idx(const Tensor& idx, const char* what, int64_t past) const {
  COHORT_CHECK(idx.defined() && idx.dtype() == kInt64 && idx.dim() == 2 && idx.size(0) > 0 &&
                   idx.size(1) > 0,
               "{}: {} must be int64 [B, T] with B, T >= 1, got {}", describe(), what,
               describe_tensor(idx));
  COHORT_CHECK(past + idx.size(1) <= config_.block_size,
               "{}: {} has T = {}{}, more than block_size {}", describe(), what, idx.size(1),
               past > 0 ? fmt::format(" after {} cached positions", past) : std::string(),
               config_.block_size);
  Tensor c = idx.contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  for (int64_t i = 0; i < c.numel(); ++i)
    COHORT_CHECK(p[i] >= 0 && p[i] < config_.vocab_size,
                 "{}: {} holds token id {} at flat index {}, outside [0, vocab_size = {})",
                 describe(), what, p[i], i, config_.vocab_size);
}

Tensor GPT::embed(const Tensor& idx, int64_t past) {
  Tensor pos = Tensor::arange(static_cast<double>(past), static_cast<double>(past + idx.size(1)),
                              1.0, kInt64);
  return add(wte()(idx), wpe()(pos));  // [B, T, C] + [T, C]
}

Tensor GPT::head(const Tensor& x) { return lm_head_(ln_f()(x)); }

Tensor GPT::forward(const Tensor& idx) { return head(trunk(idx)); }

Tensor GPT::trunk(const Tensor& idx) {
  check_idx(idx, "idx", 0);
  Tensor x = embed(idx, 0);
  ModuleList& blocks = h();
  for (size_t i = 0; i < blocks.size(); ++i) x = blocks.at<Block>(i)(x);
  return x;
}

Tensor GPT::chunked_head_loss(const Tensor& x, const Tensor& targets) {
  return linear_cross_entropy(reshape(ln_f()(x), {-1, config_.n_embd}), lm_head_->weight(),
                              reshape(targets, {-1}), -1, config_.loss_chunk_rows);
}

Tensor GPT::forward(const Tensor& idx, const Tensor& targets) {
  COHORT_CHECK(targets.defined() && targets.dtype() == kInt64 && targets.sizes() == idx.sizes(),
               "{}: targets must be int64 of the shape of idx {}, got {}", describe(),
               shape_str(idx.sizes()), describe_tensor(targets));
  {
    Tensor c = targets.contiguous();
    const int64_t* p = c.data_ptr<int64_t>();
    for (int64_t i = 0; i < c.numel(); ++i)
      COHORT_CHECK(p[i] == -1 || (p[i] >= 0 && p[i] < config_.vocab_size),
                   "{}: targets hold {} at flat index {}, outside [0, vocab_size = {}) and not "
                   "-1 (ignored)",
                   describe(), p[i], i, config_.vocab_size);
  }
  // Without a graph the logits are not kept anyway.
  if (config_.chunked_loss && GradMode::is_enabled()) return chunked_head_loss(trunk(idx), targets);
  Tensor logits = forward(idx);
  return cross_entropy(reshape(logits, {-1, config_.vocab_size}), reshape(targets, {-1}),
                       Reduction::kMean, -1);
}

KVCache GPT::make_cache(int64_t batch) const {
  COHORT_CHECK(batch > 0, "{}: make_cache: batch must be positive, got {}", describe(), batch);
  KVCache cache;
  cache.batch = batch;
  const Shape s{batch, config_.n_head, config_.block_size, config_.head_dim()};
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    cache.k.push_back(Tensor::zeros(s, kFloat32, device()));
    cache.v.push_back(Tensor::zeros(s, kFloat32, device()));
  }
  return cache;
}

Tensor GPT::forward(const Tensor& idx, KVCache& cache) {
  COHORT_CHECK(
      static_cast<int64_t>(cache.k.size()) == config_.n_layer && cache.v.size() == cache.k.size(),
      "{}: the KV cache has {} layers, the model {}; make it with make_cache", describe(),
      cache.k.size(), config_.n_layer);
  check_idx(idx, "idx", cache.length);
  COHORT_CHECK(idx.size(0) == cache.batch, "{}: idx has batch {}, the KV cache was made for {}",
               describe(), idx.size(0), cache.batch);
  NoGradGuard no_grad;
  Tensor x = embed(idx, cache.length);
  for (int64_t l = 0; l < config_.n_layer; ++l)
    x = block(l).forward(x, cache.k[static_cast<size_t>(l)], cache.v[static_cast<size_t>(l)],
                         cache.length);
  cache.length += idx.size(1);
  return head(x);
}

// ---- helpers ----

WeightDecayGroups weight_decay_groups(const Module& model) {
  WeightDecayGroups g;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? g.decay : g.no_decay).push_back(p);
  }
  return g;
}

}  // namespace cohort::nn
