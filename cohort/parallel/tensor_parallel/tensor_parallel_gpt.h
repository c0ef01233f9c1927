// A GPT (nn/models/gpt.h) in Megatron-LM's tensor-parallel layout over a
// group tp of p ranks, built from the plain model (its weights copied):
//
//   transformer.wte   VocabParallelEmbedding: rank r holds vocabulary rows
//                     [r V/p, (r+1) V/p); ids outside give zero rows; one
//                     all_reduce forward.
//   transformer.wpe   replicated (a copy).
//   transformer.h.i   ParallelBlock: ln_1, ln_2 replicated;
//     attn            ParallelCausalSelfAttention: c_attn column-parallel by
//                     heads (rank r holds heads [r nh/p, (r+1) nh/p) of q, k
//                     and v: c_attn's [3C, C] weight packs q | k | v, so each
//                     rank takes its rows from all three thirds, blocks = 3),
//                     causal attention on the local heads, c_proj
//                     row-parallel (bias replicated);
//     mlp             ParallelGPTMLP: c_fc column-parallel, tanh GELU on the
//                     shard, c_proj row-parallel.
//                     Each attention and each MLP costs one all_reduce
//                     forward (row-parallel output) and one backward
//                     (column-parallel input gradient).
//   transformer.ln_f  replicated.
//   lm_head           VocabParallelHead: the embedding's shard (the tie, one
//                     tensor) -> this rank's slice of the logits [B, T, V/p].
//
// forward(idx, targets) ends in vocab_parallel_cross_entropy on the local
// logits: the full [B, T, V] logits are never gathered (only per-token max,
// sum of exponentials and target logit are all-reduced). forward(idx)
// gathers them, for inference.
//
// Parameter names, order and the state dict's keys are the plain model's;
// full_state_dict() (full_state_dict.h) gives the plain model's keys and
// shapes (both transformer.wte.weight and lm_head.weight), and
// load_full_state_dict() takes a plain checkpoint.
//
// Sequence parallelism (options.sequence_parallel, Megatron-LM's): between
// the tensor-parallel regions (embedding sum, LayerNorms, residual adds) each
// rank holds only its positions [B, T/p, C]; the column-parallel inputs are
// all-gathered along T and the row-parallel outputs (and the embedding's)
// reduce-scattered along T, instead of copied and all-reduced (the same
// bytes on the wire, 1/p of the activations kept between the regions). The
// gradients of the parameters used on a rank's positions only (LayerNorms,
// wpe, the row-parallel biases) are then partial: call
// reduce_sequence_parallel_gradients() after backward (one all_reduce), as
// Megatron's finalize_model_grads does. Needs T divisible by p.
//
// Needs n_head, vocab_size and 4 n_embd divisible by p: InvalidArgument
// naming the numbers and the rank otherwise. Every rank must feed the same
// batch; the loss and the replicated gradients are the same on every rank.
// Collectives: forward and backward run collectives on tp (mappings.h), so
// every rank of tp calls them in the same order. Thread safety: module.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/module.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_layer.h"

namespace cohort::parallel {

using TPGroup = std::shared_ptr<distributed::ProcessGroup>;

struct TensorParallelGPTOptions {
  bool sequence_parallel = false;  // see the header comment
};

// Embedding of a vocabulary split by rows: weight [V/p, C] (rank r: rows
// [r V/p, (r+1) V/p) of the full table).
class VocabParallelEmbedding : public nn::Cloneable<VocabParallelEmbedding>,
                               public TensorParallelLayer {
 public:
  // This rank's rows of full's weight (copied); V % p == 0.
  // sequence_parallel: forward's output is reduce-scattered along dim 1.
  VocabParallelEmbedding(const nn::Embedding& full, TPGroup tp, bool sequence_parallel = false);

  // idx int64 [*] in [0, V) -> [*, C], the same on every rank: each rank
  // looks up the ids in its range (zeros elsewhere), then an all_reduce
  // (sequence parallel: idx [B, T] -> this rank's positions [B, T/p, C]).
  Tensor forward(const Tensor& idx) override;
  std::string extra_repr() const override;

  int64_t split_dim(std::string_view name) const override;
  const TPGroup& tensor_parallel_group() const override { return tp_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t vocab_size() const { return vocab_size_; }  // the full vocabulary
  const Tensor& weight() const { return param(0); }   // [V/p, C]

 private:
  TPGroup tp_;
  int64_t vocab_size_;
  int64_t vocab_start_;
  bool sequence_parallel_;
};

// The tied head: logits of this rank's vocabulary slice with the
// embedding's shard (one tensor with it), x [..., C] -> [..., V/p]. The
// input passes copy_to_tensor_parallel_region (all_reduce of its gradient).
class VocabParallelHead : public nn::Cloneable<VocabParallelHead>, public TensorParallelLayer {
 public:
  // sequence_parallel: x is [B, T/p, C], all-gathered along T first.
  VocabParallelHead(const VocabParallelEmbedding& embedding, TPGroup tp,
                    bool sequence_parallel = false);

  Tensor forward(const Tensor& x) override;
  int64_t split_dim(std::string_view name) const override;
  const TPGroup& tensor_parallel_group() const override { return tp_; }
  const Tensor& weight() const { return param(0); }

 private:
  TPGroup tp_;
  bool sequence_parallel_;
};

class ParallelCausalSelfAttention : public nn::Cloneable<ParallelCausalSelfAttention> {
 public:
  ParallelCausalSelfAttention(const nn::CausalSelfAttention& full, const nn::GPTConfig& config,
                              TPGroup tp, bool sequence_parallel = false);
  // x [B, T, C] (the same on every rank) -> [B, T, C]; sequence parallel:
  // [B, T/p, C] -> [B, T/p, C].
  Tensor forward(const Tensor& x) override;
  ColumnParallelLinear& c_attn() const { return child<ColumnParallelLinear>(0); }
  RowParallelLinear& c_proj() const { return child<RowParallelLinear>(1); }

 private:
  int64_t local_heads_;
  int64_t head_dim_;
};

class ParallelGPTMLP : public nn::Cloneable<ParallelGPTMLP> {
 public:
  ParallelGPTMLP(const nn::MLP& full, TPGroup tp, bool sequence_parallel = false);
  // x [B, T, C] -> c_proj(gelu_tanh(c_fc(x))) [B, T, C].
  Tensor forward(const Tensor& x) override;
  ColumnParallelLinear& c_fc() const { return child<ColumnParallelLinear>(0); }
  RowParallelLinear& c_proj() const { return child<RowParallelLinear>(1); }
};

class ParallelBlock : public nn::Cloneable<ParallelBlock> {
 public:
  ParallelBlock(const nn::Block& full, const nn::GPTConfig& config, TPGroup tp,
                bool sequence_parallel = false);
  // x [B, T, C] -> x + attn(ln_1(x)), then + mlp(ln_2(.)); checkpointed as
  // config.checkpointing says (nn/models/gpt.h), the recomputation running
  // the region's collectives again, in the same order on every rank.
  Tensor forward(const Tensor& x) override;

 private:
  Tensor attention(const Tensor& x);
  Tensor mlp_residual(const Tensor& x, const Tensor& attn_out);

  nn::GPTCheckpointing checkpointing_;
};

class TensorParallelGPT : public nn::Cloneable<TensorParallelGPT> {
 public:
  // Copies full's weights (full is not kept). Collective-free.
  TensorParallelGPT(const nn::GPT& full, TPGroup tp, TensorParallelGPTOptions options = {});

  // idx int64 [B, T] -> this rank's logits [B, T, V/p].
  Tensor local_logits(const Tensor& idx);
  // idx -> the full logits [B, T, V] (all-gathered; for inference).
  Tensor forward(const Tensor& idx) override;
  // Mean cross-entropy against targets int64 [B, T] (-1: ignored), by
  // vocab_parallel_cross_entropy on the local logits -> 0-d, every rank.
  Tensor forward(const Tensor& idx, const Tensor& targets);

  // Sequence parallel: sums over tp the gradients that each rank computed
  // on its positions only (LayerNorms, wpe, row-parallel biases), one
  // all_reduce; call after backward, before clipping and the optimizer.
  // Nothing (no collective) without sequence parallelism.
  void reduce_sequence_parallel_gradients();

  const nn::GPTConfig& config() const { return config_; }
  bool sequence_parallel() const { return options_.sequence_parallel; }
  const TPGroup& tensor_parallel_group() const { return tp_; }
  VocabParallelEmbedding& wte() const;
  ParallelBlock& block(int64_t i) const;

 private:
  nn::GPTConfig config_;
  TPGroup tp_;
  TensorParallelGPTOptions options_;
};

// Megatron's vocab-parallel cross-entropy: logits [N, V/p] are this rank's
// vocabulary slice [vocab_start, vocab_start + V/p) of the full [N, V];
// targets int64 [N] hold full-vocabulary ids, or ignore_index. The row max
// is all-reduced (max), then the sums of exp and the target logits (sum):
// two all_reduces of N and 2N numbers, never the full logits. Returns the
// mean over the non-ignored rows (0-d, the same on every rank); the gradient
// of the local logits is (softmax - onehot) / count, with no communication.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    int64_t vocab_start, const TPGroup& tp,
                                    int64_t ignore_index = -1);

}  // namespace cohort::parallel
