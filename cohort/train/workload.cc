#include "cohort/train/workload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/ops.h"
#include "cohort/base/error.h"
#include "cohort/data/default_corpus.h"
#include "cohort/data/mnist.h"
#include "cohort/data/synthetic_dataset.h"
#include "cohort/data/tensor_dataset.h"
#include "cohort/data/token_corpus.h"
#include "cohort/data/window_dataset.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/net.h"
#include "cohort/nn/models/net_bn.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/models/toy_model.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/sgd.h"

namespace cohort::train {

namespace {

// The text or token corpus of a language model, split (token_corpus.h).
data::TokenCorpus load_corpus(const TrainOptions& options) {
  data::CorpusOptions co;
  co.val_fraction = options.val_fraction;
  co.block_size = gpt_config(options).block_size;
  co.vocab_size = gpt_config(options).vocab_size;
  if (options.dataset == DatasetKind::kTokens) {
    return data::load_token_corpus({options.data_file}, co);
  }
  if (options.data_file.empty()) return data::load_default_corpus(co);
  return data::load_text_corpus(options.data_file, co);
}

}  // namespace

nn::GPTConfig gpt_config(const TrainOptions& options) {
  nn::GPTConfig c =
      options.model == ModelKind::kGpt2 ? nn::GPTConfig::gpt2() : nn::GPTConfig::reference();
  if (options.model == ModelKind::kGpt && options.dataset == DatasetKind::kTokens) {
    c.vocab_size = nn::GPTConfig::gpt2().vocab_size;
  }
  c.n_layer = options.n_layer.value_or(c.n_layer);
  c.n_head = options.n_head.value_or(c.n_head);
  c.n_embd = options.n_embd.value_or(c.n_embd);
  c.block_size = options.block_size.value_or(c.block_size);
  c.vocab_size = options.vocab_size.value_or(c.vocab_size);
  c.checkpointing = options.activation_checkpointing;
  // The CLI's memory-saving switch saves the head's logits too (gpt.h).
  c.chunked_loss = options.activation_checkpointing != nn::GPTCheckpointing::kNone;
  return c;
}

namespace {

constexpr std::pair<const char*, int64_t nn::GPTConfig::*> kGptKeys[] = {
    {"gpt.n_layer", &nn::GPTConfig::n_layer},
    {"gpt.n_head", &nn::GPTConfig::n_head},
    {"gpt.n_embd", &nn::GPTConfig::n_embd},
    {"gpt.block_size", &nn::GPTConfig::block_size},
    {"gpt.vocab_size", &nn::GPTConfig::vocab_size}};

}  // namespace

void write_gpt_config(const nn::GPTConfig& config, checkpoint::Metadata& extra) {
  for (const auto& [key, field] : kGptKeys) extra[key] = std::to_string(config.*field);
}

std::optional<nn::GPTConfig> read_gpt_config(const checkpoint::Metadata& extra) {
  if (extra.find(kGptKeys[0].first) == extra.end()) return std::nullopt;
  nn::GPTConfig c;
  for (const auto& [key, field] : kGptKeys) {
    auto it = extra.find(key);
    int64_t v = 0;
    try {
      v = it != extra.end() ? std::stoll(it->second) : 0;
    } catch (const std::exception&) {
    }
    if (v < 1) {
      throw IoError(fmt::format("checkpoint metadata '{}' must be a positive integer, got '{}'",
                                key, it != extra.end() ? it->second : "(missing)"));
    }
    c.*field = v;
  }
  return c;
}

Splits make_splits(const TrainOptions& options) {
  switch (options.dataset) {
    case DatasetKind::kText:
    case DatasetKind::kTokens: {
      data::TokenCorpus corpus = load_corpus(options);
      const int64_t t = gpt_config(options).block_size;
      Splits s;
      s.train = std::make_shared<data::WindowDataset>(corpus.train, t, 1);
      // The first eval_batches x batch_size non-overlapping windows of the
      // validation stream (all of them with eval_batches 0).
      data::TokenStream val = corpus.val.empty() ? corpus.train : corpus.val;
      if (options.eval_batches > 0) {
        const int64_t windows = options.eval_batches * options.batch_size;
        val = val.slice(0, std::min(val.size(), windows * t + 1));
      }
      s.test = std::make_shared<data::WindowDataset>(val, t, t);
      s.train_tokens = std::make_shared<data::TokenStream>(corpus.train);
      s.description = corpus.description;
      return s;
    }
    case DatasetKind::kFashionMnist: {
      std::string dir = options.effective_data_dir();
      return {std::make_shared<data::FashionMnist>(dir, data::Split::kTrain),
              std::make_shared<data::FashionMnist>(dir, data::Split::kTest)};
    }
    case DatasetKind::kMnist: {
      std::string dir = options.effective_data_dir();
      return {std::make_shared<data::Mnist>(dir, data::Split::kTrain),
              std::make_shared<data::Mnist>(dir, data::Split::kTest)};
    }
    case DatasetKind::kSynthetic: {
      // One data set cut in two, so both splits share the class centres.
      data::SyntheticDataset::Options o;
      o.size = options.synthetic_train_size + options.synthetic_test_size;
      o.seed = options.seed;
      if (options.model == ModelKind::kToy) {
        o.input_shape = {10};
        o.num_classes = 0;
        o.target_shape = {5};
      } else {
        o.input_shape = {1, 28, 28};
        o.num_classes = 10;
      }
      data::SyntheticDataset all(o);
      int64_t n = options.synthetic_train_size;
      int64_t m = options.synthetic_test_size;
      return {std::make_shared<data::TensorDataset>(all.inputs().narrow(0, 0, n),
                                                    all.targets().narrow(0, 0, n)),
              std::make_shared<data::TensorDataset>(all.inputs().narrow(0, n, m),
                                                    all.targets().narrow(0, n, m))};
    }
  }
  throw InvalidArgument("make_splits: unknown data set");
}

nn::ModulePtr make_model(const TrainOptions& options, Generator& gen) {
  if (options.is_language_model()) return std::make_shared<nn::GPT>(gpt_config(options), gen);
  return make_model(options.model, gen);
}

nn::ModulePtr make_model(ModelKind kind, Generator& gen) {
  switch (kind) {
    case ModelKind::kGpt:
      return std::make_shared<nn::GPT>(nn::GPTConfig::reference(), gen);
    case ModelKind::kGpt2:
      return std::make_shared<nn::GPT>(nn::GPTConfig::gpt2(), gen);
    case ModelKind::kNet:
      return std::make_shared<nn::Net>(gen);
    case ModelKind::kNetBn:
      return std::make_shared<nn::NetBn>(gen);
    case ModelKind::kToy:
      return std::make_shared<nn::ToyModel>(gen);
    case ModelKind::kMlp:
      return nn::make_mlp(gen);
  }
  throw InvalidArgument("make_model: unknown model");
}

std::shared_ptr<nn::Sequential> make_sequential_model(ModelKind kind, Generator& gen) {
  switch (kind) {
    case ModelKind::kNet:
      return nn::make_net_sequential(gen);
    case ModelKind::kMlp:
      return nn::make_mlp(gen);
    case ModelKind::kGpt:
    case ModelKind::kGpt2:
      throw InvalidArgument("make_sequential_model: the GPT models have no nn::Sequential form");
    case ModelKind::kNetBn:
      throw InvalidArgument("make_sequential_model: net-bn has no nn::Sequential form");
    case ModelKind::kToy: {
      // ToyModel's names and draws: net1, relu, net2.
      auto s = std::make_shared<nn::Sequential>();
      s->add("net1", std::make_shared<nn::Linear>(10, 10, gen));
      s->add("relu", std::make_shared<nn::ReLU>());
      s->add("net2", std::make_shared<nn::Linear>(10, 5, gen));
      return s;
    }
  }
  throw InvalidArgument("make_sequential_model: unknown model");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& options,
                                                 std::vector<Tensor> params) {
  switch (options.optimizer) {
    case OptimizerKind::kSgd:
      return std::make_unique<optim::SGD>(
          std::move(params), optim::SGDOptions{.lr = options.effective_lr(),
                                               .momentum = options.effective_momentum()});
    case OptimizerKind::kAdam: {
      optim::AdamOptions o;
      o.lr = options.effective_lr();
      return std::make_unique<optim::Adam>(std::move(params), o);
    }
    case OptimizerKind::kAdamW: {
      optim::AdamWOptions o;
      o.lr = options.effective_lr();
      if (!options.is_language_model()) {
        o.weight_decay = options.weight_decay.value_or(o.weight_decay);
        return std::make_unique<optim::AdamW>(std::move(params), o);
      }
      // nanoGPT / llm.c: betas (0.9, 0.95); weight decay on the matrices
      // (embeddings and linear weights, dim >= 2) only: group 0 holds them,
      // group 1 the biases and LayerNorm parameters without decay.
      o.beta2 = 0.95;
      o.weight_decay = options.weight_decay.value_or(0.1);
      std::vector<Tensor> decay, no_decay;
      for (Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(std::move(p));
      auto opt = std::make_unique<optim::AdamW>(std::move(decay), o);
      if (!no_decay.empty()) opt->add_param_group(std::move(no_decay), {{"weight_decay", 0.0}});
      return opt;
    }
  }
  throw InvalidArgument("make_optimizer: unknown optimizer");
}

std::unique_ptr<optim::Optimizer> make_optimizer_over(OptimizerKind kind,
                                                      std::vector<optim::ParamGroup> groups) {
  COHORT_CHECK(!groups.empty(), "make_optimizer_over: no parameter groups");
  std::vector<Tensor> first = std::move(groups[0].params);
  std::unique_ptr<optim::Optimizer> opt;
  switch (kind) {
    case OptimizerKind::kSgd:
      opt = std::make_unique<optim::SGD>(std::move(first), optim::SGDOptions{});
      break;
    case OptimizerKind::kAdam:
      opt = std::make_unique<optim::Adam>(std::move(first), optim::AdamOptions{});
      break;
    case OptimizerKind::kAdamW:
      opt = std::make_unique<optim::AdamW>(std::move(first), optim::AdamWOptions{});
      break;
  }
  COHORT_CHECK(opt != nullptr, "make_optimizer_over: unknown optimizer");
  for (const auto& [name, value] : groups[0].options) opt->param_group(0).set_option(name, value);
  for (size_t g = 1; g < groups.size(); ++g)
    opt->add_param_group(std::move(groups[g].params), groups[g].options);
  return opt;
}

Tensor compute_loss(ModelKind kind, const Tensor& output, const Tensor& target) {
  if (kind == ModelKind::kGpt || kind == ModelKind::kGpt2) {
    // logits [B, T, V] against next tokens [B, T]: the mean over all tokens.
    return cross_entropy(reshape(output, {-1, output.size(-1)}), reshape(target, {-1}));
  }
  return is_classifier(kind) ? nll_loss(output, target) : mse_loss(output, target);
}

double clip_max_norm(ModelKind kind) {
  return kind == ModelKind::kNet || kind == ModelKind::kNetBn ? 10.0 : 0.0;
}

bool is_classifier(ModelKind kind) {
  return kind == ModelKind::kNet || kind == ModelKind::kNetBn || kind == ModelKind::kMlp;
}

Evaluation evaluate(nn::Module& model, ModelKind kind, const data::Dataset& test,
                    distributed::ProcessGroup* pg, int64_t batch_size) {
  const int64_t rank = pg != nullptr ? pg->rank() : 0;
  const int64_t world = pg != nullptr ? pg->size() : 1;
  const bool was_training = model.is_training();
  model.eval();
  // [loss sum, correct, examples]
  double sums[3] = {0, 0, 0};
  const Device device = model.device();
  {
    NoGradGuard no_grad;
    std::vector<int64_t> indices;
    for (int64_t i = rank; i < test.size(); i += world) {
      indices.push_back(i);
      if (static_cast<int64_t>(indices.size()) == batch_size || i + world >= test.size()) {
        data::Batch b = test.get_batch(indices);
        b.input = b.input.to(device);
        b.target = b.target.to(device);
        Tensor out = model.forward(b.input);
        int64_t n = static_cast<int64_t>(indices.size());
        sums[0] += compute_loss(kind, out, b.target).item<double>() * static_cast<double>(n);
        if (is_classifier(kind)) {
          sums[1] += sum(eq(argmax(out, 1), b.target)).item<double>();
        }
        sums[2] += static_cast<double>(n);
        indices.clear();
      }
    }
  }
  model.train(was_training);
  if (pg != nullptr && world > 1) {
    pg->all_reduce(sums, 3, distributed::DataType::kFloat64);
  }
  Evaluation e;
  e.examples = static_cast<int64_t>(sums[2]);
  e.loss = sums[2] > 0 ? sums[0] / sums[2] : std::numeric_limits<double>::quiet_NaN();
  e.accuracy = is_classifier(kind) && sums[2] > 0 ? sums[1] / sums[2]
                                                  : std::numeric_limits<double>::quiet_NaN();
  return e;
}

}  // namespace cohort::train
