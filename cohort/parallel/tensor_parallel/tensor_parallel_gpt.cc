#include "cohort/parallel/tensor_parallel/tensor_parallel_gpt.h"

#include <cmath>
#include <limits>
#include <vector>

#include "cohort/autograd/checkpoint.h"
#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/node.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/nn/module_dict.h"
#include "cohort/nn/sequential.h"
#include "cohort/parallel/tensor_parallel/mappings.h"

namespace cohort::parallel {

namespace {

void check_divisible(int64_t n, const char* what, const TPGroup& tp, const char* op) {
  COHORT_CHECK(tp != nullptr, "{}: the tensor-parallel group is null", op);
  COHORT_CHECK(n % tp->size() == 0,
               "{} (rank {} of group {}): {} {} is not divisible by the tensor-parallel size {}",
               op, tp->rank(), tp->name(), what, n, tp->size());
}

}  // namespace

// ---- VocabParallelEmbedding ----

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& full, TPGroup tp,
                                               bool sequence_parallel)
    : Cloneable("VocabParallelEmbedding"),
      tp_(std::move(tp)),
      sequence_parallel_(sequence_parallel) {
  vocab_size_ = full.weight().size(0);
  check_divisible(vocab_size_, "vocab_size", tp_, "VocabParallelEmbedding");
  vocab_start_ = tp_->rank() * (vocab_size_ / tp_->size());
  NoGradGuard no_grad;
  register_parameter("weight", shard_along_dim(full.weight(), 0, tp_->rank(), tp_->size()));
}

std::string VocabParallelEmbedding::extra_repr() const {
  return fmt::format("vocab {} (rows {}..{} here), dim {}, tp_size={}", vocab_size_, vocab_start_,
                     vocab_start_ + weight().size(0) - 1, weight().size(1), tp_->size());
}

int64_t VocabParallelEmbedding::split_dim(std::string_view name) const {
  COHORT_CHECK(name == "weight", "{}: no parameter called '{}'", describe(), name);
  return 0;
}

Tensor VocabParallelEmbedding::forward(const Tensor& idx) {
  COHORT_CHECK(idx.defined() && idx.dtype() == kInt64, "{} (rank {}): ids must be int64, got {}",
               describe(), tp_->rank(), idx.defined() ? dtype_name(idx.dtype()) : "undefined");
  Tensor c = idx.contiguous();
  const int64_t n = c.numel(), rows = weight().size(0);
  const int64_t* ids = c.data_ptr<int64_t>();
  std::vector<int64_t> local(static_cast<size_t>(n));
  std::vector<float> keep(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    COHORT_CHECK(ids[i] >= 0 && ids[i] < vocab_size_,
                 "{} (rank {}): token id {} at flat index {} is outside [0, {})", describe(),
                 tp_->rank(), ids[i], i, vocab_size_);
    const bool mine = ids[i] >= vocab_start_ && ids[i] < vocab_start_ + rows;
    local[static_cast<size_t>(i)] = mine ? ids[i] - vocab_start_ : 0;
    keep[static_cast<size_t>(i)] = mine ? 1.0f : 0.0f;
  }
  Shape mask_shape = c.sizes();
  mask_shape.push_back(1);
  Tensor mask = Tensor::from_vector<float>(keep, mask_shape).to(weight().dtype());
  // Rows of other ranks' ids are zero here (and get no gradient), so the
  // sum over the ranks is the full table's lookup.
  Tensor e = mul(embedding(weight(), Tensor::from_vector<int64_t>(local, c.sizes())), mask);
  return sequence_parallel_ ? reduce_scatter_to_sequence_parallel_region(e, tp_)
                            : reduce_from_tensor_parallel_region(e, tp_);
}

// ---- VocabParallelHead ----

VocabParallelHead::VocabParallelHead(const VocabParallelEmbedding& embedding, TPGroup tp,
                                     bool sequence_parallel)
    : Cloneable("VocabParallelHead"), tp_(std::move(tp)), sequence_parallel_(sequence_parallel) {
  register_parameter("weight", embedding.weight());  // the tie: one tensor
}

int64_t VocabParallelHead::split_dim(std::string_view name) const {
  COHORT_CHECK(name == "weight", "{}: no parameter called '{}'", describe(), name);
  return 0;
}

Tensor VocabParallelHead::forward(const Tensor& x) {
  return linear(sequence_parallel_ ? gather_from_sequence_parallel_region(x, tp_)
                                   : copy_to_tensor_parallel_region(x, tp_),
                weight());
}

// ---- attention, MLP, block ----

ParallelCausalSelfAttention::ParallelCausalSelfAttention(const nn::CausalSelfAttention& full,
                                                         const nn::GPTConfig& config, TPGroup tp,
                                                         bool sequence_parallel)
    : Cloneable("ParallelCausalSelfAttention") {
  check_divisible(config.n_head, "n_head", tp, "ParallelCausalSelfAttention");
  local_heads_ = config.n_head / tp->size();
  head_dim_ = config.head_dim();
  register_module(
      "c_attn", ColumnParallelLinear::from_full(
                    full.c_attn(), tp,
                    {.gather_output = false, .blocks = 3, .sequence_parallel = sequence_parallel}));
  register_module("c_proj", RowParallelLinear::from_full(full.c_proj(), std::move(tp),
                                                         {.input_is_parallel = true,
                                                          .sequence_parallel = sequence_parallel}));
}

Tensor ParallelCausalSelfAttention::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 3, "{}: input must be [B, T, C], got {}", describe(),
               shape_str(x.sizes()));
  // [B, T, 3 * local_heads * hs]: q | k | v of the local heads, over all T
  // positions (also under sequence parallelism, where x holds T/p of them).
  Tensor qkv = c_attn().forward(x);
  const int64_t b = qkv.size(0), t = qkv.size(1);
  Tensor s = permute(view(qkv, {b, t, 3, local_heads_, head_dim_}), {2, 0, 3, 1, 4});
  Tensor y = scaled_dot_product_attention(select(s, 0, 0), select(s, 0, 1), select(s, 0, 2),
                                          /*is_causal=*/true);  // [B, lh, T, hs]
  return c_proj().forward(reshape(transpose(y, 1, 2), {b, t, local_heads_ * head_dim_}));
}

ParallelGPTMLP::ParallelGPTMLP(const nn::MLP& full, TPGroup tp, bool sequence_parallel)
    : Cloneable("ParallelGPTMLP") {
  register_module("c_fc", ColumnParallelLinear::from_full(
                              full.c_fc(), tp,
                              {.gather_output = false, .sequence_parallel = sequence_parallel}));
  register_module("c_proj", RowParallelLinear::from_full(full.c_proj(), std::move(tp),
                                                         {.input_is_parallel = true,
                                                          .sequence_parallel = sequence_parallel}));
}

Tensor ParallelGPTMLP::forward(const Tensor& x) {
  return c_proj().forward(gelu(c_fc().forward(x), "tanh"));
}

ParallelBlock::ParallelBlock(const nn::Block& full, const nn::GPTConfig& config, TPGroup tp,
                             bool sequence_parallel)
    : Cloneable("ParallelBlock"), checkpointing_(config.checkpointing) {
  register_module("ln_1", full.ln_1().clone());
  register_module("attn", std::make_shared<ParallelCausalSelfAttention>(full.attn(), config, tp,
                                                                        sequence_parallel));
  register_module("ln_2", full.ln_2().clone());
  register_module("mlp",
                  std::make_shared<ParallelGPTMLP>(full.mlp(), std::move(tp), sequence_parallel));
}

Tensor ParallelBlock::attention(const Tensor& x) {
  return child<ParallelCausalSelfAttention>(1).forward(child<nn::LayerNorm>(0)(x));
}

Tensor ParallelBlock::mlp_residual(const Tensor& x, const Tensor& attn_out) {
  Tensor h = add(x, attn_out);
  return add(h, child<ParallelGPTMLP>(3).forward(child<nn::LayerNorm>(2)(h)));
}

Tensor ParallelBlock::forward(const Tensor& x) {
  switch (checkpointing_) {
    case nn::GPTCheckpointing::kNone:
      break;
    case nn::GPTCheckpointing::kBlock:
      return autograd::checkpoint(
          [this](const std::vector<Tensor>& in) { return mlp_residual(in[0], attention(in[0])); },
          {x});
    case nn::GPTCheckpointing::kAttention:
      return mlp_residual(
          x, autograd::checkpoint(
                 [this](const std::vector<Tensor>& in) { return attention(in[0]); }, {x}));
  }
  return mlp_residual(x, attention(x));
}

// ---- TensorParallelGPT ----

TensorParallelGPT::TensorParallelGPT(const nn::GPT& full, TPGroup tp,
                                     TensorParallelGPTOptions options)
    : Cloneable("TensorParallelGPT"),
      config_(full.config()),
      tp_(std::move(tp)),
      options_(options) {
  COHORT_CHECK(tp_ != nullptr, "TensorParallelGPT: the tensor-parallel group is null");
  check_divisible(config_.n_head, "n_head", tp_, "TensorParallelGPT");
  check_divisible(config_.vocab_size, "vocab_size", tp_, "TensorParallelGPT");
  const bool sp = options_.sequence_parallel;
  auto wte = std::make_shared<VocabParallelEmbedding>(full.wte(), tp_, sp);
  auto h = std::make_shared<nn::ModuleList>();
  for (int64_t i = 0; i < config_.n_layer; ++i)
    h->push_back(std::make_shared<ParallelBlock>(full.block(i), config_, tp_, sp));
  register_module(
      "transformer",
      std::make_shared<nn::ModuleDict>(std::vector<std::pair<std::string, nn::ModulePtr>>{
          {"wte", wte}, {"wpe", full.wpe().clone()}, {"h", h}, {"ln_f", full.ln_f().clone()}}));
  register_module("lm_head", std::make_shared<VocabParallelHead>(*wte, tp_, sp));
}

void TensorParallelGPT::reduce_sequence_parallel_gradients() {
  if (!options_.sequence_parallel || tp_->size() == 1) return;
  // Every replicated parameter: LayerNorms, wpe and the row-parallel biases
  // (the shards' gradients are complete on their rank). One flat all_reduce.
  std::vector<Tensor> params;
  int64_t numel = 0;
  for (const ParameterLayout& p : parameter_layouts(*this)) {
    if (p.split_dim != kReplicated) continue;
    Tensor t = p.tensor;
    if (!t.grad().defined()) t.set_grad(zeros_like(t));
    params.push_back(t);
    numel += t.numel();
  }
  NoGradGuard no_grad;
  Tensor flat = Tensor::empty({numel}, kFloat32);
  int64_t off = 0;
  for (const Tensor& p : params) {
    flat.narrow(0, off, p.numel()).copy_(p.grad().reshape({p.numel()}));
    off += p.numel();
  }
  tp_->all_reduce(flat, {});
  off = 0;
  for (const Tensor& p : params) {
    p.mutable_grad().copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
}

VocabParallelEmbedding& TensorParallelGPT::wte() const {
  return child<nn::ModuleDict>(0).at<VocabParallelEmbedding>("wte");
}

ParallelBlock& TensorParallelGPT::block(int64_t i) const {
  COHORT_CHECK(i >= 0 && i < config_.n_layer, "{}: block {} out of range [0, {})", describe(), i,
               config_.n_layer);
  return child<nn::ModuleDict>(0).at<nn::ModuleList>("h").at<ParallelBlock>(static_cast<size_t>(i));
}

Tensor TensorParallelGPT::local_logits(const Tensor& idx) {
  COHORT_CHECK(idx.defined() && idx.dtype() == kInt64 && idx.dim() == 2 && idx.size(1) >= 1 &&
                   idx.size(1) <= config_.block_size,
               "{} (rank {}): idx must be int64 [B, T] with 1 <= T <= block_size {}, got {}",
               describe(), tp_->rank(), config_.block_size,
               idx.defined() ? shape_str(idx.sizes()) : "undefined");
  nn::ModuleDict& tr = child<nn::ModuleDict>(0);
  int64_t first = 0, count = idx.size(1);
  if (options_.sequence_parallel) {
    COHORT_CHECK(count % tp_->size() == 0,
                 "{} (rank {}): sequence parallelism needs T ({}) divisible by the "
                 "tensor-parallel size {}",
                 describe(), tp_->rank(), count, tp_->size());
    count /= tp_->size();
    first = tp_->rank() * count;  // this rank's positions
  }
  Tensor pos =
      Tensor::arange(static_cast<double>(first), static_cast<double>(first + count), 1.0, kInt64);
  Tensor x =
      add(tr.at<VocabParallelEmbedding>("wte").forward(idx), tr.at<nn::Embedding>("wpe")(pos));
  for (int64_t i = 0; i < config_.n_layer; ++i) x = block(i).forward(x);
  return child<VocabParallelHead>(1).forward(tr.at<nn::LayerNorm>("ln_f")(x));
}

Tensor TensorParallelGPT::forward(const Tensor& idx) {
  return gather_from_tensor_parallel_region(local_logits(idx), tp_);
}

Tensor TensorParallelGPT::forward(const Tensor& idx, const Tensor& targets) {
  COHORT_CHECK(targets.defined() && targets.dtype() == kInt64 && targets.sizes() == idx.sizes(),
               "{}: targets must be int64 of the shape of idx {}, got {}", describe(),
               shape_str(idx.sizes()), targets.defined() ? shape_str(targets.sizes()) : "none");
  Tensor l = local_logits(idx);
  return vocab_parallel_cross_entropy(reshape(l, {-1, l.size(-1)}), reshape(targets, {-1}),
                                      wte().vocab_start(), tp_, -1);
}

// ---- vocab_parallel_cross_entropy ----

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    int64_t vocab_start, const TPGroup& tp, int64_t ignore_index) {
  COHORT_CHECK(tp != nullptr, "vocab_parallel_cross_entropy: the tensor-parallel group is null");
  COHORT_CHECK(logits.defined() && logits.dtype() == kFloat32 && logits.dim() == 2 &&
                   targets.defined() && targets.dtype() == kInt64 && targets.dim() == 1 &&
                   targets.size(0) == logits.size(0),
               "vocab_parallel_cross_entropy (rank {}): logits must be float32 [N, V/p] and "
               "targets int64 [N], got {} and {}",
               tp->rank(), logits.defined() ? shape_str(logits.sizes()) : "undefined",
               targets.defined() ? shape_str(targets.sizes()) : "undefined");
  const int64_t n = logits.size(0), vp = logits.size(1);
  const int64_t vocab = vp * tp->size();
  Tensor l = logits.detach().contiguous();
  Tensor t = targets.contiguous();
  const float* lp = l.data_ptr<float>();
  const int64_t* tg = t.data_ptr<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    COHORT_CHECK(tg[i] == ignore_index || (tg[i] >= 0 && tg[i] < vocab),
                 "vocab_parallel_cross_entropy (rank {}): target {} at row {} is outside [0, {}) "
                 "and not ignore_index {}",
                 tp->rank(), tg[i], i, vocab, ignore_index);
    count += tg[i] != ignore_index;
  }
  // Row maxima over the whole vocabulary.
  Tensor mx = Tensor::empty({n}, kFloat32);
  float* m = mx.data_ptr<float>();
  parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < vp; ++j) v = std::max(v, lp[i * vp + j]);
      m[i] = v;
    }
  });
  if (tp->size() > 1) tp->all_reduce(mx, {.op = distributed::ReduceOp::kMax});
  // Sums of exp(l - max) and the target's l - max (from the rank holding it).
  Tensor sums = Tensor::zeros({2, n}, kFloat64);
  double* se = sums.data_ptr<double>();
  double* zt = se + n;
  parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double s = 0;
      for (int64_t j = 0; j < vp; ++j) s += std::exp(double(lp[i * vp + j]) - m[i]);
      se[i] = s;
      const int64_t local = tg[i] - vocab_start;
      if (tg[i] != ignore_index && local >= 0 && local < vp)
        zt[i] = double(lp[i * vp + local]) - m[i];
    }
  });
  if (tp->size() > 1) tp->all_reduce(sums, {.op = distributed::ReduceOp::kSum});
  double total = 0;
  for (int64_t i = 0; i < n; ++i)
    if (tg[i] != ignore_index) total += std::log(se[i]) - zt[i];
  Tensor out = Tensor::scalar(count > 0 ? total / double(count) : std::nan(""), kFloat32);
  return autograd::record(
      out, "VocabParallelCrossEntropy", {logits},
      [l, t, mx, sums, vocab_start, ignore_index, count](const Tensor& g,
                                                         const std::vector<bool>&) {
        const int64_t n = l.size(0), vp = l.size(1);
        Tensor grad = Tensor::zeros({n, vp}, kFloat32);
        if (count == 0) return std::vector<Tensor>{grad};
        const double scale = g.item<double>() / double(count);
        const float* lp = l.data_ptr<float>();
        const int64_t* tg = t.data_ptr<int64_t>();
        const float* m = mx.data_ptr<float>();
        const double* se = sums.data_ptr<double>();
        float* gp = grad.data_ptr<float>();
        parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            if (tg[i] == ignore_index) continue;
            const double inv = scale / se[i];
            for (int64_t j = 0; j < vp; ++j)
              gp[i * vp + j] = static_cast<float>(std::exp(double(lp[i * vp + j]) - m[i]) * inv);
            const int64_t local = tg[i] - vocab_start;
            if (local >= 0 && local < vp) gp[i * vp + local] -= static_cast<float>(scale);
          }
        });
        return std::vector<Tensor>{grad};
      },
      {logits});
}

}  // namespace cohort::parallel
