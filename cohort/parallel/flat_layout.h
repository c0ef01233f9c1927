// FlatLayout: where each of a list of tensors lives in one flat buffer that
// is split into `shards` equal, rank-major segments -- the one flat-buffer
// mechanism of DistributedDataParallel's buckets (shards = 1) and of ZeRO's
// units (shards = the world size).
//
// Tensor i of n_i elements is cut into `shards` chunks of c_i = ceil(n_i /
// shards) elements (the last chunks padded, possibly all padding when n_i <
// shards). The buffer holds shards() segments of shard_numel() = S = sum c_i
// elements; segment r is chunk r of every tensor, in list order, tensor i's
// chunk at r * S + offset(i). So rank r's segment is exactly what a
// reduce_scatter gives rank r and what an all_gather takes from it, and a
// tensor's chunk r is elements [r * c_i, r * c_i + local_numel(i, r)) of the
// tensor itself -- a contiguous piece of it. With shards = 1 this is the
// plain concatenation (no padding) and view() gives each tensor as a view
// into the buffer, which is how the reducer's .grad views are made.
//
//   FlatLayout l({5, 2}, 2);   // c = {3, 1}, S = 4
//   // buffer: [t0[0..3) t1[0..1) | t0[3..5) pad t1[1..2)]
//
// Pure data; pack/unpack touch only the given buffers (callers synchronise).
#pragma once

#include <cstdint>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::parallel {

class FlatLayout {
 public:
  FlatLayout() = default;
  // numels: elements of each tensor (>= 0); shards >= 1.
  FlatLayout(std::vector<int64_t> numels, int shards);

  int shards() const { return shards_; }
  size_t num_tensors() const { return numels_.size(); }
  int64_t numel(size_t i) const { return numels_[i]; }
  // Chunk length c_i (padded), its place in a segment, and the segment length S.
  int64_t chunk(size_t i) const { return chunks_[i]; }
  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t shard_numel() const { return shard_numel_; }
  // shards() * shard_numel(): the whole buffer.
  int64_t total_numel() const { return shard_numel_ * shards_; }
  // Real (unpadded) elements of tensor i in segment r: 0 .. chunk(i).
  int64_t local_numel(size_t i, int r) const;
  // Elements of real data, sum n_i (the buffer minus its padding).
  int64_t data_numel() const { return data_numel_; }

  // Copies every tensor (contiguous, numel(i) elements of elem_size bytes)
  // into its chunks of `flat` (total_numel() elements), padding zeroed.
  // Undefined tensors count as zeros. Raw copies: no autograd, no version bump.
  void pack(const std::vector<Tensor>& tensors, void* flat, size_t elem_size) const;
  // The reverse: each tensor's chunks from `flat` into the tensor.
  void unpack(const void* flat, const std::vector<Tensor>& tensors, size_t elem_size) const;
  // Segment r only: the chunks rank r owns, to or from `segment` (S elements).
  void pack_segment(const std::vector<Tensor>& tensors, int r, void* segment,
                    size_t elem_size) const;
  void unpack_segment(const void* segment, int r, const std::vector<Tensor>& tensors,
                      size_t elem_size) const;

  // The same with tensors as the flat buffer (elements of its dtype), on any
  // device: CPU buffers take the raw copies above; device buffers are copied
  // by the device's kernels (two small copies per tensor and segment), on the
  // current stream, without autograd or version bumps either.
  void pack(const std::vector<Tensor>& tensors, const Tensor& flat) const;
  void unpack(const Tensor& flat, const std::vector<Tensor>& tensors) const;
  void pack_segment(const std::vector<Tensor>& tensors, int r, const Tensor& segment) const;
  void unpack_segment(const Tensor& segment, int r, const std::vector<Tensor>& tensors) const;

  // shards() == 1 only: tensor i as a contiguous view of `buffer` with `sizes`.
  Tensor view(const Tensor& buffer, size_t i, const Shape& sizes) const;
  // Chunk r of tensor i as a 1-d view of `buffer`, a tensor laid out like
  // tensor i (contiguous): local_numel(i, r) elements from r * chunk(i).
  Tensor piece_of_tensor(const Tensor& tensor, size_t i, int r) const;
  // Chunk r of tensor i inside a segment buffer (S elements): local_numel(i, r)
  // elements from offset(i).
  Tensor piece_of_segment(const Tensor& segment, size_t i, int r) const;

 private:
  std::vector<int64_t> numels_, chunks_, offsets_;
  int shards_ = 1;
  int64_t shard_numel_ = 0;
  int64_t data_numel_ = 0;
};

}  // namespace cohort::parallel
