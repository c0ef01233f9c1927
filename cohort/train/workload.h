// The reference workloads of docs/reference.md as the training loop needs them:
// a model built from a seed, the train and test splits of a data set, the
// loss, the optimizer, and the evaluation of a model on a test split
// (optionally sharded over the ranks of a process group).
//
//   Net      on fashion-mnist | mnist | synthetic (10 classes, [1, 28, 28]):
//            NLL loss on log-probabilities, clip_grad_norm 10, accuracy
//   MLP      as Net (nn/models/sequential_models.h: 784 -> 4 x 1024 -> 10), no clipping
//   ToyModel on synthetic regression ([10] -> [5]): MSE loss, no accuracy
//   GPT      on text | tokens (windows of block_size + 1 tokens, data/window_dataset.h):
//            logits [B, T, V], the mean cross-entropy over all tokens (no accuracy;
//            perplexity = exp(loss)), AdamW with nanoGPT's betas and weight decay
//
// Ownership: the returned objects are the caller's. Thread safety: none.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cohort/checkpoint/safetensors.h"
#include "cohort/core/random.h"
#include "cohort/data/dataset.h"
#include "cohort/data/token_corpus.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/module.h"
#include "cohort/nn/sequential.h"
#include "cohort/optim/optimizer.h"
#include "cohort/train/train_options.h"

namespace cohort::train {

struct Splits {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> test;
  // Language models: the training token stream (what the random windows are
  // drawn from) and what was loaded, for the start-up line.
  std::shared_ptr<const data::TokenStream> train_tokens;
  std::string description;
};

// The GPT's shape for these options (TrainOptions::n_layer ...).
nn::GPTConfig gpt_config(const TrainOptions& options);
// A GPT's shape as checkpoint metadata ("gpt.n_layer", ...) and back; read
// returns nullopt when the keys are absent and throws IoError naming a key
// whose value is not a positive integer.
void write_gpt_config(const nn::GPTConfig& config, checkpoint::Metadata& extra);
std::optional<nn::GPTConfig> read_gpt_config(const checkpoint::Metadata& extra);

// Loads (or generates) the data set. Real data sets throw IoError naming the
// directory and the Debian package when it is missing.
Splits make_splits(const TrainOptions& options);

// The model, initialised from gen (PyTorch's initialisation, registration order).
// The ModelKind form builds a GPT at its preset's shape.
nn::ModulePtr make_model(const TrainOptions& options, Generator& gen);
nn::ModulePtr make_model(ModelKind kind, Generator& gen);
// The same model as an nn::Sequential (what a pipeline cuts into stages):
// the same parameter names and the same draws from gen.
std::shared_ptr<nn::Sequential> make_sequential_model(ModelKind kind, Generator& gen);

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& options,
                                                 std::vector<Tensor> params);

// An optimizer of `kind` whose group g holds groups[g].params with exactly
// groups[g].options: a full optimizer's groups (make_optimizer's) carried
// over to the shards a sharded strategy steps, whose shapes could not be
// grouped the way make_optimizer groups whole tensors. groups must not be
// empty (InvalidArgument).
std::unique_ptr<optim::Optimizer> make_optimizer_over(OptimizerKind kind,
                                                      std::vector<optim::ParamGroup> groups);

// 0-d loss of `output` (the model's output) against `target`.
Tensor compute_loss(ModelKind kind, const Tensor& output, const Tensor& target);

// The max_norm of clip_grad_norm for this model, or 0 for none.
double clip_max_norm(ModelKind kind);

// Whether the model is a classifier (test accuracy is defined).
bool is_classifier(ModelKind kind);

struct Evaluation {
  double loss = 0;      // mean loss over the examples
  double accuracy = 0;  // NaN for regression
  int64_t examples = 0;
};

// Evaluates `model` (in eval mode, without gradients; restores train mode)
// over `test`. With a group, rank r takes examples r, r + R, ... and the sums
// are all-reduced, so every rank gets the result over the whole test set
// (collective: every rank must call it).
Evaluation evaluate(nn::Module& model, ModelKind kind, const data::Dataset& test,
                    distributed::ProcessGroup* pg = nullptr, int64_t batch_size = 1000);

}  // namespace cohort::train
