// Dataset: a random-access collection of (input, target) examples, as
// torch.utils.data.Dataset. Besides get(i), every dataset has get_batch(),
// which gathers a list of indices straight into two contiguous batch tensors
// (input [B, ...], target [B, ...]) without building per-example tensors: this
// is the hot path the DataLoader's prefetch thread runs. The default
// get_batch() stacks get() results; the in-memory datasets override it.
//
// Ownership: a Dataset owns its data; DataLoaders share it via
// std::shared_ptr<const Dataset>. Thread safety: datasets are immutable after
// construction, so const calls may run on any number of threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::data {

// One example: input [...] and target [...] (a 0-d int64 label for
// classification).
struct Example {
  Tensor input;
  Tensor target;
};

// A batch: input [B, ...], target [B, ...], both contiguous.
struct Batch {
  Tensor input;
  Tensor target;
  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of examples.
  virtual int64_t size() const = 0;
  // Example `index` in [0, size()); throws InvalidArgument when out of range.
  virtual Example get(int64_t index) const = 0;
  // Gathers `indices` (each in [0, size()), repeats allowed) into one batch.
  // Throws InvalidArgument on an empty list or an index out of range.
  virtual Batch get_batch(std::span<const int64_t> indices) const;
};

// Throws InvalidArgument naming `op` unless 0 <= index < size.
void check_index(const char* op, int64_t index, int64_t size);

// Copies rows `indices` of `source` (dim 0, any dtype, contiguous) into a new
// contiguous tensor [indices.size(), ...]. The building block of get_batch.
Tensor gather_rows(const Tensor& source, std::span<const int64_t> indices, const char* op);

}  // namespace cohort::data
