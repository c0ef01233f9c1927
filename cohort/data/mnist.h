// MNIST and Fashion-MNIST from their IDX files in a directory (`root`):
// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
// t10k-labels-idx1-ubyte, each gzip-compressed (".gz") or plain. Debian's
// `dataset-fashion-mnist` installs Fashion-MNIST in
// /usr/share/datasets/fashion-mnist.
//
// Images stay uint8 in memory ([N, 28, 28], 47 MB for the training set) and are
// converted at batch time: input float32 [B, 1, 28, 28] = pixel / 255 (scaled
// to [0, 1], not normalized, as torchvision's ToTensor), target int64 [B].
//
// Construction throws IoError naming the path when the directory or a file is
// missing (and the Debian package for Fashion-MNIST), when a file is not IDX
// or truncated, and when image and label counts or sizes disagree.
// Immutable after construction; thread safe.
#pragma once

#include <string>

#include "cohort/data/dataset.h"

namespace cohort::data {

enum class Split { kTrain, kTest };

class Mnist : public Dataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/mnist";

  explicit Mnist(const std::string& root, Split split = Split::kTrain);

  int64_t size() const override { return labels_.size(0); }
  // input float32 [1, 28, 28], target int64 0-d.
  Example get(int64_t index) const override;
  // input float32 [B, 1, 28, 28], target int64 [B].
  Batch get_batch(std::span<const int64_t> indices) const override;

  // The raw data: uint8 [N, 28, 28] and int64 [N].
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }
  static constexpr int64_t kNumClasses = 10;

 protected:
  // `name` names the data set in errors, `package` (may be empty) the Debian
  // package that provides it.
  Mnist(const std::string& root, Split split, const char* name, const char* package);

 private:
  Tensor images_;  // uint8 [N, H, W]
  Tensor labels_;  // int64 [N]
};

class FashionMnist : public Mnist {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr const char* kDebianPackage = "dataset-fashion-mnist";

  explicit FashionMnist(const std::string& root = kDefaultRoot, Split split = Split::kTrain)
      : Mnist(root, split, "Fashion-MNIST", kDebianPackage) {}
};

// Converts uint8 pixels [B, ...] to float32 pixel / 255 with a new dim 1 of
// size 1: [B, H, W] -> [B, 1, H, W]. Exact: same values as x.float() / 255.
Tensor pixels_to_float(const Tensor& pixels);

}  // namespace cohort::data
