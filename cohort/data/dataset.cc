#include "cohort/data/dataset.h"

#include <cstring>

#include "cohort/data/transforms.h"

namespace cohort::data {

void check_index(const char* op, int64_t index, int64_t size) {
  COHORT_CHECK(index >= 0 && index < size, "{}: index {} out of range for a dataset of size {}", op,
               index, size);
}

namespace {

// Stacks same-shaped, same-dtype tensors along a new dim 0.
Tensor stack_rows(const std::vector<Tensor>& rows, const char* what) {
  const Tensor& first = rows.front();
  Shape sizes = first.sizes();
  sizes.insert(sizes.begin(), static_cast<int64_t>(rows.size()));
  Tensor out = Tensor::empty(sizes, first.dtype());
  const size_t row_bytes = first.nbytes();
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Tensor& r = rows[i];
    COHORT_CHECK(r.sizes() == first.sizes() && r.dtype() == first.dtype(),
                 "Stack (Dataset::get_batch): {} {} has shape {} {}, the first has {} {}", what, i,
                 shape_str(r.sizes()), dtype_name(r.dtype()), shape_str(first.sizes()),
                 dtype_name(first.dtype()));
    Tensor c = r.contiguous();
    if (row_bytes > 0) std::memcpy(dst + i * row_bytes, c.raw_data(), row_bytes);
  }
  return out;
}

}  // namespace

Batch Dataset::get_batch(std::span<const int64_t> indices) const {
  COHORT_CHECK(!indices.empty(), "Dataset::get_batch: empty index list");
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return transforms::Stack()(examples);
}

namespace transforms {

Batch Stack::operator()(std::span<const Example> examples) const {
  COHORT_CHECK(!examples.empty(), "Stack: no examples to stack");
  std::vector<Tensor> inputs, targets;
  inputs.reserve(examples.size());
  targets.reserve(examples.size());
  for (const Example& e : examples) {
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return Batch{stack_rows(inputs, "input"), stack_rows(targets, "target")};
}

}  // namespace transforms

Tensor gather_rows(const Tensor& source, std::span<const int64_t> indices, const char* op) {
  COHORT_CHECK(source.dim() >= 1, "{}: source must have a batch dim, got shape {}", op,
               shape_str(source.sizes()));
  COHORT_ASSERT(source.is_contiguous());
  const int64_t n = source.size(0);
  Shape sizes = source.sizes();
  sizes[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(sizes, source.dtype());
  const size_t row_bytes = n > 0 ? source.nbytes() / static_cast<size_t>(n) : 0;
  const auto* src = static_cast<const uint8_t*>(source.raw_data());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (size_t i = 0; i < indices.size(); ++i) {
    check_index(op, indices[i], n);
    std::memcpy(dst + i * row_bytes, src + static_cast<size_t>(indices[i]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace cohort::data
