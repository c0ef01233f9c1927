// GPT: the GPT-2 family in nanoGPT's and llm.c's shape, as a plain module
// that knows nothing of how it is parallelised (pipeline and tensor-parallel
// forms are built from its children in cohort/parallel):
//
//   idx int64 [B, T] -> wte(idx) + wpe(0..T-1)                 [B, T, C]
//     -> n_layer x Block: x + attn(ln_1(x)); x + mlp(ln_2(x))   [B, T, C]
//     -> ln_f -> lm_head (weight tied to wte.weight)            [B, T, V]
//
// CausalSelfAttention: c_attn Linear(C, 3C) splits into q, k, v of n_head
// heads of C / n_head, softmax(q k^T / sqrt(hs)) over the causal prefix,
// c_proj Linear(C, C). MLP: c_fc Linear(C, 4C), tanh-approximated GELU,
// c_proj Linear(4C, C). LayerNorms with eps 1e-5. No dropout (nanoGPT's
// default 0.0).
//
// Parameter names are nanoGPT's: transformer.wte.weight, transformer.wpe.weight,
// transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj}.{weight,bias}, transformer.ln_f.{weight,bias}, lm_head.weight.
// lm_head.weight IS transformer.wte.weight (one tensor, one gradient):
// named_parameters() and parameters() list it once, under
// transformer.wte.weight, while state_dict() holds both keys, as PyTorch's.
// clone() keeps the tie (the copy's head is the copy's embedding).
//
// Initialisation (nanoGPT's distributions): every Linear and Embedding weight
// N(0, 0.02), the two c_proj weights of each block N(0, 0.02 / sqrt(2 *
// n_layer)), biases 0, LayerNorm weights 1 and biases 0. The draws are taken
// from the Generator in named_parameters() order, one fill per tensor
// (wte, wpe, then block 0's c_attn.weight, attn.c_proj.weight, mlp.c_fc.weight,
// mlp.c_proj.weight, block 1's ...).
//
// Kernels: GPTConfig::kernels chooses how the blocks compute: kFused (the
// default) runs attention as scaled_dot_product_attention (blocked, online
// softmax, no T x T matrix), the MLP as linear_gelu_linear (c_fc's GELU in its
// GEMM's epilogue; c_proj as linear after linear_gelu when c_proj has forward
// hooks), and the attention residual with ln_2 as add_layer_norm; kComposed builds each from
// generic ops (matmul, softmax over an additive causal mask, GELU from tanh and
// arithmetic), as nanoGPT's manual path. Both give the same results to float32
// rounding; the composed form stays as a second check. The loss is
// cross_entropy (vocabulary in chunks, no probability tensor) either way.
//
// Activation checkpointing (GPTConfig::checkpointing; autograd/checkpoint.h):
// kBlock runs each block as one checkpointed region, kAttention each block's
// ln_1 + attention; their activations are recomputed during backward instead
// of kept (the same gradients, one more forward of the region per step).
// GPTConfig::chunked_loss (set with checkpointing by `cohort train
// --activation-checkpointing`) computes the loss of forward(idx, targets)
// without the logits [B, T, V], a GPT-2 step's largest activation (824 MB at
// B 4, T 1024, and as much again for their gradient): linear_cross_entropy
// (autograd/linear_cross_entropy.h) runs the head in chunks of
// GPTConfig::loss_chunk_rows positions and keeps the head's gradients instead
// of its logits, at no extra work. The loss and gradients equal the plain
// head's up to float rounding; without grad mode it changes nothing.
// Evaluation and generation (grad mode off) are unaffected. The tensor-
// parallel blocks (cohort/parallel/tensor_parallel) follow the same setting.
//
// Generation: forward(idx, cache) appends the new positions' keys and values
// to a KVCache and returns only their logits, so one more token costs O(T)
// work instead of a forward over the whole prefix; generate()
// (gpt_generate.h) samples with it.
//
// Failure: InvalidArgument naming the model and the wrong shape or value
// (token ids out of [0, vocab_size), T > block_size, a cache of another batch).
// Thread safety: forward is stateless and safe to share between threads
// (see module.h); a KVCache belongs to one caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/core/random.h"
#include "cohort/nn/embedding.h"
#include "cohort/nn/layer_norm.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/module.h"
#include "cohort/nn/module_dict.h"
#include "cohort/nn/sequential.h"

namespace cohort::nn {

// How the blocks compute; all give the same numbers to float32 rounding.
enum class GPTKernels {
  kFused,     // scaled_dot_product_attention (memory O(T)), linear_gelu_linear, add_layer_norm
  kComposed,  // generic ops: matmul, softmax over an additive causal mask, composed tanh GELU
};

// "fused", "composed".
const char* gpt_kernels_name(GPTKernels kernels);

// What each block recomputes during backward instead of keeping.
enum class GPTCheckpointing {
  kNone,       // everything kept
  kBlock,      // the whole block: only its input is kept
  kAttention,  // ln_1 and attention: its input and output are kept, the MLP's activations too
};

// "none", "block", "attention"; parse_gpt_checkpointing throws
// InvalidArgument naming the value and the choices.
const char* gpt_checkpointing_name(GPTCheckpointing checkpointing);
GPTCheckpointing parse_gpt_checkpointing(std::string_view name);

struct GPTConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 256;
  int64_t block_size = 128;  // longest sequence (positions of wpe)
  int64_t vocab_size = 256;
  GPTKernels kernels = GPTKernels::kFused;
  GPTCheckpointing checkpointing = GPTCheckpointing::kNone;
  // The loss head in chunks, its logits never kept (see above); positions per
  // chunk, 0: as many as make about 16M logits (64 MiB), e.g. 333 for
  // GPT-2's vocabulary.
  bool chunked_loss = false;
  int64_t loss_chunk_rows = 0;

  // Throws InvalidArgument naming the field: sizes must be positive and
  // n_embd a multiple of n_head.
  void validate() const;
  int64_t head_dim() const { return n_embd / n_head; }
  // "n_layer=4, n_head=4, n_embd=256, block_size=128, vocab_size=256".
  std::string str() const;

  // The reference workload (docs): 4 layers, 4 heads, width 256, block 128,
  // byte vocabulary: 3,257,856 parameters.
  static GPTConfig reference();
  // GPT-2 124M's shape: 12/12/768, block 1024, vocabulary 50257 padded to
  // 50304 (a multiple of 64, as nanoGPT and llm.c do).
  static GPTConfig gpt2();
};

// Keys and values of the positions seen so far, per layer:
// k[l], v[l] [B, n_head, block_size, head_dim], the first `length` positions
// filled. Made by GPT::make_cache; reset() empties it for a new sequence.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t batch = 0;
  int64_t length = 0;

  void reset() { length = 0; }
};

class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  // Initialises c_attn.weight, then c_proj.weight from gen (GPT's init).
  CausalSelfAttention(const GPTConfig& config, Generator& gen);

  // x [B, T, C] -> [B, T, C], position t attending to 0..t.
  Tensor forward(const Tensor& x) override;
  // x [B, Tn, C], the positions after the cache's `length`; appends their
  // keys and values to k_cache/v_cache [B, nh, block_size, hs] at
  // [past, past + Tn) and attends over positions 0..past + Tn - 1.
  Tensor forward(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t past);
  std::string extra_repr() const override;

  Linear& c_attn() const { return *c_attn_; }
  Linear& c_proj() const { return *c_proj_; }

 private:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, int64_t past) const;

  GPTConfig config_;
  Child<Linear> c_attn_, c_proj_;
};

class MLP : public Cloneable<MLP> {
 public:
  // Initialises c_fc.weight, then c_proj.weight from gen (GPT's init).
  MLP(const GPTConfig& config, Generator& gen);
  // x [B, T, C] -> c_proj(gelu_tanh(c_fc(x))) [B, T, C] (kFused:
  // linear_gelu_linear).
  Tensor forward(const Tensor& x) override;

  Linear& c_fc() const { return *c_fc_; }
  Linear& c_proj() const { return *c_proj_; }

 private:
  GPTConfig config_;
  Child<Linear> c_fc_, c_proj_;
};

class Block : public Cloneable<Block> {
 public:
  // Initialises attn, then mlp from gen.
  Block(const GPTConfig& config, Generator& gen);
  // x [B, T, C] -> x + attn(ln_1(x)), then + mlp(ln_2(.)); checkpointed as
  // config.checkpointing says while grad mode is on.
  Tensor forward(const Tensor& x) override;
  // The cached form (CausalSelfAttention's second forward).
  Tensor forward(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t past);

  GPTCheckpointing checkpointing() const { return checkpointing_; }
  // From the next forward on (a graph recorded before keeps its own form).
  void set_checkpointing(GPTCheckpointing checkpointing) { checkpointing_ = checkpointing; }

  LayerNorm& ln_1() const { return *ln_1_; }
  CausalSelfAttention& attn() const { return *attn_; }
  LayerNorm& ln_2() const { return *ln_2_; }
  MLP& mlp() const { return *mlp_; }

 private:
  // x + attn_out, then + mlp(ln_2(.)).
  Tensor mlp_residual(const Tensor& x, const Tensor& attn_out);

  GPTKernels kernels_;
  GPTCheckpointing checkpointing_;
  Child<LayerNorm> ln_1_;
  Child<CausalSelfAttention> attn_;
  Child<LayerNorm> ln_2_;
  Child<MLP> mlp_;
};

class GPT : public Cloneable<GPT> {
 public:
  // Validates config and initialises from gen (see the header comment).
  GPT(const GPTConfig& config, Generator& gen);

  // idx int64 [B, T], 1 <= T <= block_size, ids in [0, vocab_size) ->
  // logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx) override;
  // Mean cross-entropy of the logits against targets int64 [B, T] (ids in
  // [0, vocab_size), or -1 for positions to ignore, as nanoGPT) -> 0-d.
  Tensor forward(const Tensor& idx, const Tensor& targets);
  // Incremental decoding, without recording autograd: idx [B, Tn] are the
  // positions cache.length .. cache.length + Tn - 1; their keys and values
  // are appended to the cache and their logits [B, Tn, vocab_size] returned.
  // Throws when cache.length + Tn > block_size (generate() then restarts the
  // cache from the last block_size tokens, as nanoGPT crops its context).
  Tensor forward(const Tensor& idx, KVCache& cache);
  // An empty cache for `batch` sequences (2 * n_layer * batch * block_size *
  // n_embd floats).
  KVCache make_cache(int64_t batch) const;

  std::string extra_repr() const override;
  const GPTConfig& config() const { return config_; }
  // Sets config().checkpointing and every block's, from the next forward on
  // (e.g. to compare the modes on one model, bench/gpt).
  void set_checkpointing(GPTCheckpointing checkpointing);
  // Sets config().chunked_loss, from the next forward on.
  void set_chunked_loss(bool chunked) { config_.chunked_loss = chunked; }
  // Parameters without the position embedding (nanoGPT's get_num_params()).
  int64_t num_parameters_without_positions() const;

  ModuleDict& transformer() const { return *transformer_; }
  Embedding& wte() const;
  Embedding& wpe() const;
  ModuleList& h() const;
  Block& block(int64_t i) const;
  LayerNorm& ln_f() const;
  Linear& lm_head() const { return *lm_head_; }

 private:
  Tensor embed(const Tensor& idx, int64_t past);
  // idx -> the last block's output [B, T, C].
  Tensor trunk(const Tensor& idx);
  Tensor head(const Tensor& x);
  // x [B, T, C], targets [B, T] -> the mean loss, the head in chunks.
  Tensor chunked_head_loss(const Tensor& x, const Tensor& targets);
  void check_idx(const Tensor& idx, const char* what, int64_t past) const;

  GPTConfig config_;
  Child<ModuleDict> transformer_;
  Child<Linear> lm_head_;
};

// The tanh approximation of GELU (GPT-2's, PyTorch's approximate="tanh"):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), composed from
// differentiable ops.
Tensor gelu_tanh_composed(const Tensor& x);

// nanoGPT's AdamW grouping: tensors of 2 or more dims (matmul and embedding
// weights) get weight decay, the rest (biases, LayerNorm) none. Tied tensors
// appear once. Use with optim::AdamW's typed groups:
//   auto g = nn::weight_decay_groups(model);
//   optim::AdamWOptions o{.lr = 3e-4, .beta2 = 0.95, .weight_decay = 0.1};
//   optim::AdamW opt(g.decay, o);
//   o.weight_decay = 0;
//   opt.add_param_group(g.no_decay, o);
struct WeightDecayGroups {
  std::vector<Tensor> decay;
  std::vector<Tensor> no_decay;
};
WeightDecayGroups weight_decay_groups(const Module& model);

}  // namespace cohort::nn
