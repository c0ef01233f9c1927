// `cohort eval`: the test loss and accuracy of a training checkpoint, loaded
// into a single-process model and evaluated with train::evaluate, the
// function a training run uses at each epoch's end (same batches, same sums),
// so it prints the numbers of the epoch that wrote the checkpoint.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/train/workload.h"
#include "tools/cohort/checkpoint_model.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string model;    // "": the checkpoint's metadata, else net
  std::string dataset;  // "": fashion-mnist; a GPT's: the checkpoint's
  // train::evaluate's default, which the training run uses: other sizes sum
  // the loss in another order and may differ in the last digits.
  int64_t batch_size = 1000;
  std::string device = "cpu";
  train::TrainOptions options;
};

int run_eval(CLI::App* app, EvalArgs* args) {
  train::TrainOptions& o = args->options;
  if (o.threads > 0) {
    set_default_num_threads(o.threads);
    set_num_threads(o.threads);
  }
  CheckpointModel cm = load_checkpoint_model(args->checkpoint, args->model);
  const auto saved = [&](const char* key) {
    auto it = cm.extra.find(key);
    return it != cm.extra.end() ? it->second : std::string();
  };
  try {
    o.model = cm.kind;
    const bool lm = o.is_language_model();
    std::string dataset = args->dataset;
    if (dataset.empty()) dataset = lm ? saved("dataset") : "fashion-mnist";
    if (dataset.empty()) dataset = "text";
    o.dataset = train::parse_dataset(dataset);
    if (lm) {
      // The training run's corpus and split, unless given; the whole
      // validation split in batches of --batch-size windows.
      if (o.data_file.empty()) o.data_file = saved("data_file");
      if (app->count("--val-fraction") == 0 && !saved("val_fraction").empty())
        o.val_fraction = std::stod(saved("val_fraction"));
      o.n_layer = cm.gpt.n_layer;
      o.n_head = cm.gpt.n_head;
      o.n_embd = cm.gpt.n_embd;
      o.block_size = cm.gpt.block_size;
      o.vocab_size = cm.gpt.vocab_size;
      o.eval_batches = 0;
      if (app->count("--batch-size") == 0) args->batch_size = 16;
      o.batch_size = args->batch_size;
      o.optimizer = train::OptimizerKind::kAdamW;
    }
    o.device = Device(args->device);
    if (args->batch_size <= 0)
      throw InvalidArgument(fmt::format("--batch-size must be positive, got {}", args->batch_size));
    o.validate();
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "cohort eval: error: %s\n\n%s", e.what(), app->help().c_str());
    return 2;
  }
  train::Splits splits = train::make_splits(o);
  cm.model->to(o.device);  // checkpoints are device-independent: loaded on the CPU, then moved
  train::Evaluation ev =
      train::evaluate(*cm.model, cm.kind, *splits.test, nullptr, args->batch_size);
  std::string acc = std::isfinite(ev.accuracy) ? fmt::format(", test accuracy {:.4f}", ev.accuracy)
                                               : std::string();
  if (o.is_language_model()) {
    std::printf(
        "cohort eval: %s (model %s, %s, %s): validation loss %.4f, perplexity %.2f on %lld "
        "windows of %lld tokens\n",
        cm.file.c_str(), std::string(train::model_name(cm.kind)).c_str(), cm.gpt.str().c_str(),
        cm.plain_weights ? "plain weights" : fmt::format("step {}", cm.step).c_str(), ev.loss,
        std::exp(ev.loss), static_cast<long long>(ev.examples),
        static_cast<long long>(cm.gpt.block_size));
    return 0;
  }
  const std::string what =
      cm.plain_weights ? std::string("plain weights") : fmt::format("step {}", cm.step);
  std::printf("cohort eval: %s (model %s, %s): test loss %.4f%s on %lld examples\n",
              cm.file.c_str(), std::string(train::model_name(cm.kind)).c_str(), what.c_str(),
              ev.loss, acc.c_str(), static_cast<long long>(ev.examples));
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  train::TrainOptions& o = args->options;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--checkpoint", args->checkpoint,
                 "Checkpoint directory, checkpoint root (its latest checkpoint) or "
                 "model.safetensors file")
      ->required();
  app.add_option("--model", args->model,
                 "net, mlp, toy, gpt or gpt2 (default: the checkpoint's \"model\" metadata, else "
                 "net)")
      ->check(CLI::IsMember({"net", "mlp", "toy", "gpt", "gpt2"}));
  app.add_option("--dataset", args->dataset,
                 "Data set: fashion-mnist (default), mnist or synthetic; a gpt: text or tokens "
                 "(default: the training run's)")
      ->check(CLI::IsMember({"fashion-mnist", "mnist", "synthetic", "text", "tokens"}));
  app.add_option("--data-file", o.data_file,
                 "gpt: the text file or token shards (default: the training run's)");
  app.add_option("--val-fraction", o.val_fraction,
                 "gpt: the validation share of the corpus (default: the training run's)");
  app.add_option("--data-dir", o.data_dir,
                 "Directory of the IDX files (default: /usr/share/datasets/fashion-mnist; "
                 "/usr/share/datasets/mnist for mnist)");
  app.add_option("--batch-size", args->batch_size,
                 "Test examples per forward pass (a gpt: windows, default 16)")
      ->capture_default_str();
  app.add_option("--device", args->device, "cpu (default), cuda or cuda:N")->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads (0: COHORT_NUM_THREADS, else all cores)")
      ->capture_default_str();
  // --dataset synthetic is generated from these: pass the training run's values.
  app.add_option("--seed", o.seed, "Seed of --dataset synthetic (the training run's --seed)")
      ->capture_default_str();
  app.add_option("--synthetic-train-size", o.synthetic_train_size,
                 "Training examples of --dataset synthetic (the training run's value)")
      ->capture_default_str();
  app.add_option("--synthetic-test-size", o.synthetic_test_size,
                 "Test examples of --dataset synthetic (the training run's value)")
      ->capture_default_str();
  CLI::App* self = &app;
  return [self, args] { return run_eval(self, args.get()); };
}

CommandRegistrar reg({"eval",
                      "Evaluate a training checkpoint (any strategy's) on a data set's test split "
                      "in one process",
                      setup});

}  // namespace
}  // namespace cohort::cli
