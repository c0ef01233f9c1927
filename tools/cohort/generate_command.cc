// `cohort generate`: samples text from a GPT checkpoint with a KV cache
// (nn::generate, nn/models/gpt_generate.h). A byte-level model (vocabulary
// 256, the `--dataset text` runs) takes the prompt as text and prints text; a model
// trained on token shards has no tokenizer here, so it takes and prints
// token ids (--prompt-tokens "15496,11").
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/nn/models/gpt_generate.h"
#include "cohort/train/workload.h"
#include "tools/cohort/checkpoint_model.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint;
  std::string prompt = "\n";
  std::string prompt_tokens;
  int64_t max_new_tokens = 200;
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu";
};

std::vector<int64_t> parse_token_list(const std::string& text, int64_t vocab) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || v < 0 || v >= vocab)
      throw InvalidArgument(fmt::format(
          "--prompt-tokens: '{}' is not a token id in [0, {}) (expected ids separated by commas)",
          item, vocab));
    out.push_back(v);
  }
  if (out.empty()) throw InvalidArgument("--prompt-tokens: no token ids given");
  return out;
}

int run_generate(CLI::App* app, GenerateArgs* args) {
  if (args->threads > 0) {
    set_default_num_threads(args->threads);
    set_num_threads(args->threads);
  }
  CheckpointModel cm;
  std::vector<int64_t> prompt;
  bool bytes = false;
  try {
    if (args->max_new_tokens < 0)
      throw InvalidArgument(
          fmt::format("--max-new-tokens must be >= 0, got {}", args->max_new_tokens));
    if (args->temperature < 0)
      throw InvalidArgument(
          fmt::format("--temperature must be >= 0 (0: always the most likely token), got {}",
                      args->temperature));
    if (args->top_k < 0)
      throw InvalidArgument(
          fmt::format("--top-k must be >= 0 (0: all tokens), got {}", args->top_k));
    cm = load_checkpoint_model(args->checkpoint, "");
    if (cm.kind != train::ModelKind::kGpt && cm.kind != train::ModelKind::kGpt2)
      throw InvalidArgument(fmt::format(
          "checkpoint '{}' holds model {}; cohort generate needs a gpt or gpt2 checkpoint", cm.file,
          train::model_name(cm.kind)));
    auto it = cm.extra.find("dataset");
    bytes = cm.gpt.vocab_size == 256 && (it == cm.extra.end() || it->second == "text");
    if (!args->prompt_tokens.empty()) {
      prompt = parse_token_list(args->prompt_tokens, cm.gpt.vocab_size);
    } else if (bytes) {
      if (args->prompt.empty()) throw InvalidArgument("--prompt is empty");
      for (unsigned char c : args->prompt) prompt.push_back(c);
    } else {
      throw InvalidArgument(fmt::format(
          "checkpoint '{}' was trained on token shards (vocabulary {}), and cohort has no "
          "tokenizer for them: pass the prompt as --prompt-tokens ID,ID,...",
          cm.file, cm.gpt.vocab_size));
    }
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "cohort generate: error: %s\n\n%s", e.what(), app->help().c_str());
    return 2;
  }
  Tensor idx = Tensor::empty({1, static_cast<int64_t>(prompt.size())}, DType::kInt64);
  std::copy(prompt.begin(), prompt.end(), idx.data_ptr<int64_t>());
  nn::GenerateOptions go;
  go.temperature = args->temperature;
  go.top_k = args->top_k;
  // Tokens are printed as they come (bytes as text, ids comma-separated).
  bool first = true;
  go.on_token = [&](const Tensor& ids) {
    const int64_t id = ids.data_ptr<int64_t>()[0];
    if (bytes) {
      std::fputc(static_cast<int>(id), stdout);
    } else {
      std::printf("%s%lld", first ? "" : ",", static_cast<long long>(id));
    }
    first = false;
    std::fflush(stdout);
  };
  if (bytes) {
    std::fwrite(args->prompt.data(), 1, args->prompt.size(), stdout);
  } else {
    std::printf("%s", args->prompt_tokens.c_str());
    first = false;
  }
  Generator gen(args->seed);
  auto& gpt = dynamic_cast<nn::GPT&>(*cm.model);
  gpt.to(Device(args->device));
  nn::generate(gpt, idx, args->max_new_tokens, go, gen);
  std::printf("\n");
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--checkpoint", args->checkpoint,
                 "A gpt checkpoint: directory, checkpoint root (its latest) or model.safetensors")
      ->required();
  app.add_option("--prompt", args->prompt, "Text the sample continues (byte-level models)")
      ->capture_default_str();
  app.add_option("--prompt-tokens", args->prompt_tokens,
                 "Token ids the sample continues, comma-separated (models trained on token "
                 "shards)");
  app.add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate")
      ->capture_default_str();
  app.add_option("--temperature", args->temperature,
                 "Divides the logits: below 1 more likely tokens, 0 always the most likely")
      ->capture_default_str();
  app.add_option("--top-k", args->top_k, "Sample among the K most likely tokens only (0: all)")
      ->capture_default_str();
  app.add_option("--seed", args->seed, "Seed of the sampling")->capture_default_str();
  app.add_option("--device", args->device, "cpu (default), cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", args->threads,
                 "Intra-op threads (0: COHORT_NUM_THREADS, else all cores)")
      ->capture_default_str();
  CLI::App* self = &app;
  return [self, args] { return run_generate(self, args.get()); };
}

CommandRegistrar reg({"generate",
                      "Sample text from a GPT checkpoint (a KV cache makes each new token cost "
                      "one position's work)",
                      setup});

}  // namespace
}  // namespace cohort::cli
