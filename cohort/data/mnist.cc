#include "cohort/data/mnist.h"

#include <filesystem>

#include "cohort/data/idx_reader.h"

namespace cohort::data {
namespace {

std::string find_file(const std::filesystem::path& root, const std::string& stem,
                      const char* name) {
  for (const char* suffix : {".gz", ""}) {
    std::filesystem::path p = root / (stem + suffix);
    if (std::filesystem::exists(p)) return p.string();
  }
  throw IoError(
      fmt::format("{}: missing file '{}' (or '{}.gz') in '{}'", name, stem, stem, root.string()));
}

}  // namespace

Mnist::Mnist(const std::string& root, Split split) : Mnist(root, split, "MNIST", "") {}

Mnist::Mnist(const std::string& root, Split split, const char* name, const char* package) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) {
    std::string hint = package[0] != '\0'
                           ? fmt::format(" (install the Debian package '{}': apt-get install {})",
                                         package, package)
                           : std::string();
    throw IoError(fmt::format("{}: data directory '{}' does not exist{}", name, root, hint));
  }
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte", name);
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte", name);
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  if (images.dtype() != DType::kUInt8 || images.dim() != 3)
    throw IoError(fmt::format("{}: '{}' must hold ubyte images [N, H, W], got {} {}", name,
                              images_path, dtype_name(images.dtype()), shape_str(images.sizes())));
  if (labels.dtype() != DType::kUInt8 || labels.dim() != 1)
    throw IoError(fmt::format("{}: '{}' must hold ubyte labels [N], got {} {}", name, labels_path,
                              dtype_name(labels.dtype()), shape_str(labels.sizes())));
  if (images.size(0) != labels.size(0))
    throw IoError(fmt::format("{}: counts disagree: '{}' has {} images, '{}' has {} labels", name,
                              images_path, images.size(0), labels_path, labels.size(0)));
  const uint8_t* l = labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < labels.size(0); ++i) {
    if (l[i] >= kNumClasses)
      throw IoError(fmt::format("{}: '{}' label {} at index {} is not in [0, {})", name,
                                labels_path, int{l[i]}, i, kNumClasses));
  }
  images_ = std::move(images);
  labels_ = labels.to(DType::kInt64);
}

Example Mnist::get(int64_t index) const {
  check_index("Mnist::get", index, size());
  int64_t idx = index;
  Batch b = get_batch(std::span<const int64_t>(&idx, 1));
  return Example{b.input.select(0, 0), b.target.select(0, 0)};
}

Batch Mnist::get_batch(std::span<const int64_t> indices) const {
  COHORT_CHECK(!indices.empty(), "Mnist::get_batch: empty index list");
  // One pass from the uint8 rows straight into the float batch (no gathered
  // uint8 copy): this runs once per training step.
  const int64_t n = size();
  const int64_t rows = images_.size(1), cols = images_.size(2), pixels = rows * cols;
  const auto b = static_cast<int64_t>(indices.size());
  Tensor input = Tensor::empty({b, 1, rows, cols}, DType::kFloat32);
  Tensor target = Tensor::empty({b}, DType::kInt64);
  const uint8_t* src = images_.data_ptr<uint8_t>();
  const int64_t* labels = labels_.data_ptr<int64_t>();
  float* dst = input.data_ptr<float>();
  int64_t* y = target.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t idx = indices[static_cast<size_t>(i)];
    check_index("Mnist::get_batch", idx, n);
    const uint8_t* s = src + idx * pixels;
    float* d = dst + i * pixels;
    // Division (not a 256-entry table) vectorises; IEEE division is exact-
    // rounded, so the values equal torchvision's x.float() / 255.
    for (int64_t j = 0; j < pixels; ++j) d[j] = static_cast<float>(s[j]) / 255.0f;
    y[i] = labels[idx];
  }
  return Batch{std::move(input), std::move(target)};
}

Tensor pixels_to_float(const Tensor& pixels) {
  COHORT_CHECK(pixels.dtype() == DType::kUInt8 && pixels.dim() >= 1,
               "pixels_to_float: need uint8 [B, ...], got {} {}", dtype_name(pixels.dtype()),
               shape_str(pixels.sizes()));
  Tensor src = pixels.contiguous();
  Shape sizes = src.sizes();
  sizes.insert(sizes.begin() + 1, 1);
  Tensor out = Tensor::empty(sizes, DType::kFloat32);
  const uint8_t* s = src.data_ptr<uint8_t>();
  float* d = out.data_ptr<float>();
  const int64_t n = src.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]) / 255.0f;
  return out;
}

}  // namespace cohort::data
