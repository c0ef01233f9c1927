#include "cohort/parallel/flat_layout.h"

#include <algorithm>
#include <cstring>

#include "cohort/core/tensor_device_ops.h"

namespace cohort::parallel {

FlatLayout::FlatLayout(std::vector<int64_t> numels, int shards)
    : numels_(std::move(numels)), shards_(shards) {
  COHORT_CHECK(shards_ >= 1, "FlatLayout: shards must be >= 1, got {}", shards_);
  chunks_.reserve(numels_.size());
  offsets_.reserve(numels_.size());
  for (int64_t n : numels_) {
    COHORT_CHECK(n >= 0, "FlatLayout: a tensor of {} elements", n);
    const int64_t c = (n + shards_ - 1) / shards_;
    offsets_.push_back(shard_numel_);
    chunks_.push_back(c);
    shard_numel_ += c;
    data_numel_ += n;
  }
}

int64_t FlatLayout::local_numel(size_t i, int r) const {
  return std::clamp<int64_t>(numels_[i] - int64_t{r} * chunks_[i], 0, chunks_[i]);
}

namespace {

char* bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

}  // namespace

void FlatLayout::pack_segment(const std::vector<Tensor>& tensors, int r, void* segment,
                              size_t elem_size) const {
  COHORT_CHECK(tensors.size() == numels_.size(), "FlatLayout::pack: {} tensors for a layout of {}",
               tensors.size(), numels_.size());
  char* out = static_cast<char*>(segment);
  for (size_t i = 0; i < numels_.size(); ++i) {
    int64_t n = local_numel(i, r);
    char* dst = out + offsets_[i] * elem_size;
    const Tensor& t = tensors[i];
    if (n > 0 && t.defined()) {
      COHORT_CHECK(t.is_contiguous() && t.numel() == numels_[i],
                   "FlatLayout::pack: tensor {} must be contiguous with {} elements, got {}", i,
                   numels_[i],
                   fmt::format("{} {}", dtype_name((t).dtype()), shape_str((t).sizes())));
      std::memcpy(dst, bytes(t) + r * chunks_[i] * elem_size, n * elem_size);
    } else {
      n = 0;
    }
    std::memset(dst + n * elem_size, 0, (chunks_[i] - n) * elem_size);
  }
}

void FlatLayout::unpack_segment(const void* segment, int r, const std::vector<Tensor>& tensors,
                                size_t elem_size) const {
  COHORT_CHECK(tensors.size() == numels_.size(),
               "FlatLayout::unpack: {} tensors for a layout of {}", tensors.size(), numels_.size());
  const char* in = static_cast<const char*>(segment);
  for (size_t i = 0; i < numels_.size(); ++i) {
    const int64_t n = local_numel(i, r);
    if (n == 0 || !tensors[i].defined()) continue;
    const Tensor& t = tensors[i];
    COHORT_CHECK(t.is_contiguous() && t.numel() == numels_[i],
                 "FlatLayout::unpack: tensor {} must be contiguous with {} elements, got {}", i,
                 numels_[i], fmt::format("{} {}", dtype_name((t).dtype()), shape_str((t).sizes())));
    std::memcpy(bytes(t) + r * chunks_[i] * elem_size, in + offsets_[i] * elem_size, n * elem_size);
  }
}

void FlatLayout::pack(const std::vector<Tensor>& tensors, void* flat, size_t elem_size) const {
  for (int r = 0; r < shards_; ++r)
    pack_segment(tensors, r, static_cast<char*>(flat) + r * shard_numel_ * elem_size, elem_size);
}

void FlatLayout::unpack(const void* flat, const std::vector<Tensor>& tensors,
                        size_t elem_size) const {
  for (int r = 0; r < shards_; ++r)
    unpack_segment(static_cast<const char*>(flat) + r * shard_numel_ * elem_size, r, tensors,
                   elem_size);
}

namespace {

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t d = strides.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d];
  }
  return strides;
}

}  // namespace

Tensor FlatLayout::view(const Tensor& buffer, size_t i, const Shape& sizes) const {
  COHORT_CHECK(shards_ == 1, "FlatLayout::view: needs shards = 1, the layout has {}", shards_);
  COHORT_CHECK(shape_numel(sizes) == numels_[i], "FlatLayout::view: shape {} for {} elements",
               shape_str(sizes), numels_[i]);
  return Tensor::from_storage(buffer.storage(), sizes, contiguous_strides(sizes),
                              buffer.storage_offset() + offsets_[i], buffer.dtype());
}

Tensor FlatLayout::piece_of_tensor(const Tensor& tensor, size_t i, int r) const {
  const int64_t n = local_numel(i, r);
  const int64_t at = n > 0 ? r * chunks_[i] : 0;
  return Tensor::from_storage(tensor.storage(), {n}, {1}, tensor.storage_offset() + at,
                              tensor.dtype());
}

Tensor FlatLayout::piece_of_segment(const Tensor& segment, size_t i, int r) const {
  return Tensor::from_storage(segment.storage(), {local_numel(i, r)}, {1},
                              segment.storage_offset() + offsets_[i], segment.dtype());
}

namespace {

// `n` elements of `buffer` from element `at` (of its storage offset), 1-d.
Tensor span(const Tensor& buffer, int64_t at, int64_t n) {
  return Tensor::from_storage(buffer.storage(), {n}, {1}, buffer.storage_offset() + at,
                              buffer.dtype());
}

void check_flat(const char* what, const Tensor& flat, int64_t numel) {
  COHORT_CHECK(flat.is_contiguous() && flat.numel() == numel,
               "FlatLayout::{}: the buffer must be contiguous with {} elements, got {} {}", what,
               numel, dtype_name(flat.dtype()), shape_str(flat.sizes()));
}

}  // namespace

void FlatLayout::pack_segment(const std::vector<Tensor>& tensors, int r,
                              const Tensor& segment) const {
  check_flat("pack_segment", segment, shard_numel_);
  if (segment.is_cpu()) {
    pack_segment(tensors, r, segment.raw_data(), dtype_size(segment.dtype()));
    return;
  }
  COHORT_CHECK(tensors.size() == numels_.size(), "FlatLayout::pack: {} tensors for a layout of {}",
               tensors.size(), numels_.size());
  const Device d = segment.device();
  for (size_t i = 0; i < numels_.size(); ++i) {
    int64_t n = local_numel(i, r);
    const Tensor& t = tensors[i];
    if (n > 0 && t.defined()) {
      COHORT_CHECK(t.is_contiguous() && t.numel() == numels_[i] && t.device() == d,
                   "FlatLayout::pack: tensor {} must be contiguous with {} elements on {}, got {}",
                   i, numels_[i], d.str(),
                   fmt::format("{} {} on {}", dtype_name(t.dtype()), shape_str(t.sizes()),
                               t.device().str()));
      copy_device(d, span(segment, offsets_[i], n), piece_of_tensor(t, i, r));
    } else {
      n = 0;
    }
    if (chunks_[i] > n) fill_device(d, span(segment, offsets_[i] + n, chunks_[i] - n), 0.0);
  }
}

void FlatLayout::unpack_segment(const Tensor& segment, int r,
                                const std::vector<Tensor>& tensors) const {
  check_flat("unpack_segment", segment, shard_numel_);
  if (segment.is_cpu()) {
    unpack_segment(segment.raw_data(), r, tensors, dtype_size(segment.dtype()));
    return;
  }
  COHORT_CHECK(tensors.size() == numels_.size(),
               "FlatLayout::unpack: {} tensors for a layout of {}", tensors.size(), numels_.size());
  const Device d = segment.device();
  for (size_t i = 0; i < numels_.size(); ++i) {
    const int64_t n = local_numel(i, r);
    if (n == 0 || !tensors[i].defined()) continue;
    const Tensor& t = tensors[i];
    COHORT_CHECK(
        t.is_contiguous() && t.numel() == numels_[i] && t.device() == d,
        "FlatLayout::unpack: tensor {} must be contiguous with {} elements on {}, got {}", i,
        numels_[i], d.str(),
        fmt::format("{} {} on {}", dtype_name(t.dtype()), shape_str(t.sizes()), t.device().str()));
    copy_device(d, piece_of_tensor(t, i, r), span(segment, offsets_[i], n));
  }
}

void FlatLayout::pack(const std::vector<Tensor>& tensors, const Tensor& flat) const {
  check_flat("pack", flat, total_numel());
  for (int r = 0; r < shards_; ++r)
    pack_segment(tensors, r, span(flat, r * shard_numel_, shard_numel_));
}

void FlatLayout::unpack(const Tensor& flat, const std::vector<Tensor>& tensors) const {
  check_flat("unpack", flat, total_numel());
  for (int r = 0; r < shards_; ++r)
    unpack_segment(span(flat, r * shard_numel_, shard_numel_), r, tensors);
}

}  // namespace cohort::parallel
