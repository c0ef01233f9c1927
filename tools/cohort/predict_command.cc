// `cohort predict`: classifies 28x28 grayscale images with a training
// checkpoint's model, printing the top classes of each with probabilities.
// The images are an IDX3 ubyte file (the data sets' format, optionally
// gzip-compressed) or one raw 784-byte image, and are scaled exactly as the
// data sets feed training (data::pixels_to_float: pixel / 255, no mean/std
// normalisation), since any other scaling would shift every prediction.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/base/error.h"
#include "cohort/base/parallel.h"
#include "cohort/data/idx_reader.h"
#include "cohort/data/mnist.h"
#include "cohort/train/workload.h"
#include "tools/cohort/checkpoint_model.h"
#include "tools/cohort/command.h"

namespace cohort::cli {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kPixels = kSide * kSide;
constexpr int64_t kClasses = 10;
// Images per forward pass: bounds memory on large files.
constexpr int64_t kBatch = 1000;

constexpr const char* kFashionNames[kClasses] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};

struct PredictArgs {
  std::string checkpoint;
  std::string model;
  std::string images;
  int top = 1;
  int64_t limit = 0;
  int threads = 0;
};

// The images of `path` as uint8 [N, 28, 28]. The two formats cannot be
// confused: an IDX3 file of 28x28 images is 16 + 784 N bytes, never 784.
Tensor read_images(const std::string& path) {
  const std::string bytes = data::read_maybe_gzip(path);  // IoError naming path if unreadable
  if (static_cast<int64_t>(bytes.size()) == kPixels) {
    Tensor t = Tensor::empty({1, kSide, kSide}, DType::kUInt8);
    std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
    return t;
  }
  const bool idx3 =
      bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 && bytes[3] == 0x03;
  if (!idx3) {
    uint32_t magic = 0;
    for (size_t i = 0; i < 4 && i < bytes.size(); ++i)
      magic = (magic << 8) | static_cast<uint8_t>(bytes[i]);
    throw IoError(fmt::format(
        "--images '{}': not an IDX3 ubyte file (magic 0x{:08x}, expected 0x00000803) nor a "
        "784-byte raw 28x28 image ({} bytes)",
        path, magic, bytes.size()));
  }
  Tensor t = data::read_idx(path);  // validates the header and the length
  if (t.dim() != 3 || t.size(1) != kSide || t.size(2) != kSide)
    throw IoError(fmt::format("--images '{}': expected IDX3 images of 28x28, got {}", path,
                              shape_str(t.sizes())));
  return t;
}

// Class names: Fashion-MNIST's unless the checkpoint says it trained on
// something else (a checkpoint without the key is taken as Fashion-MNIST,
// the default data set).
bool fashion_names(const checkpoint::Metadata& extra) {
  auto it = extra.find("dataset");
  return it == extra.end() || it->second == "fashion-mnist";
}

int run_predict(CLI::App* app, PredictArgs* args) {
  try {
    if (args->top < 1 || args->top > kClasses)
      throw InvalidArgument(fmt::format("--top must be in [1, {}], got {}", kClasses, args->top));
    if (args->limit < 0)
      throw InvalidArgument(fmt::format("--limit must be >= 0 (0: all), got {}", args->limit));
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "cohort predict: error: %s\n\n%s", e.what(), app->help().c_str());
    return 2;
  }
  if (args->threads > 0) {
    set_default_num_threads(args->threads);
    set_num_threads(args->threads);
  }
  CheckpointModel cm = load_checkpoint_model(args->checkpoint, args->model);
  if (!train::is_classifier(cm.kind))
    throw InvalidArgument(fmt::format(
        "cohort predict: checkpoint '{}' holds model {}, a regression model; predict needs a "
        "classifier (net or mlp)",
        cm.file, train::model_name(cm.kind)));
  Tensor images = read_images(args->images);
  int64_t n = images.size(0);
  if (args->limit > 0) n = std::min(n, args->limit);
  const bool names = fashion_names(cm.extra);

  NoGradGuard no_grad;
  for (int64_t start = 0; start < n; start += kBatch) {
    const int64_t b = std::min(kBatch, n - start);
    Tensor out = cm.model->forward(data::pixels_to_float(images.narrow(0, start, b)));
    // The models end in log_softmax: exp gives the probabilities.
    std::vector<float> logp = out.to_vector<float>();
    for (int64_t i = 0; i < b; ++i) {
      const float* row = logp.data() + i * kClasses;
      std::vector<int> order(kClasses);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return row[a] > row[c]; });
      std::string line = fmt::format("image {}:", start + i);
      for (int k = 0; k < args->top; ++k) {
        const int c = order[static_cast<size_t>(k)];
        line += fmt::format("{} class {}", k == 0 ? "" : ",", c);
        if (names) line += fmt::format(" ({})", kFashionNames[c]);
        line += fmt::format(" p={:.2f}", std::exp(static_cast<double>(row[c])));
      }
      std::printf("%s\n", line.c_str());
    }
  }
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--checkpoint", args->checkpoint,
                 "Checkpoint directory, checkpoint root (its latest checkpoint) or "
                 "model.safetensors file")
      ->required();
  app.add_option("--images", args->images,
                 "IDX3 ubyte file of 28x28 images (optionally .gz), or one raw 784-byte 28x28 "
                 "grayscale image")
      ->required();
  app.add_option("--model", args->model,
                 "net or mlp (default: the checkpoint's \"model\" metadata, else net)")
      ->check(CLI::IsMember({"net", "mlp", "toy"}));
  app.add_option("--top", args->top, "Classes printed per image, most probable first")
      ->capture_default_str();
  app.add_option("--limit", args->limit, "Classify only the first N images (0: all)")
      ->capture_default_str();
  app.add_option("--threads", args->threads,
                 "Intra-op threads (0: COHORT_NUM_THREADS, else all cores)")
      ->capture_default_str();
  CLI::App* self = &app;
  return [self, args] { return run_predict(self, args.get()); };
}

CommandRegistrar reg({"predict",
                      "Classify 28x28 images (IDX3 file or raw 784 bytes) with a training "
                      "checkpoint's model",
                      setup});

}  // namespace
}  // namespace cohort::cli
