// TensorParallelLayer: what a module whose own parameters are split over a
// tensor-parallel group tells the functions that need the full layout
// (full_state_dict and load_full_state_dict in full_state_dict.h,
// clip_grad_norm_tensor_parallel in clip_grad_tensor_parallel.h). Those walk
// the module tree (parameter_layouts below) and ask every
// module that implements this interface how each of its own parameters is
// split; parameters of other modules are replicated (the same on every rank).
//
// A split parameter is cut into tensor_parallel_group().size() equal,
// contiguous pieces along split_dim, rank r holding piece r, so that the
// full tensor is the rank-order concatenation along that dim. A parameter of
// split_blocks(name) = k > 1 blocks (an attention projection packing q | k |
// v) is first cut into k equal blocks along split_dim, each block into the
// ranks' pieces; rank r holds piece r of every block, in block order
// (shard_along_dim / all_gather_along_dim with blocks = k, mappings.h).
// Thread safety: const queries, safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include <string>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"

namespace cohort::parallel {

inline constexpr int64_t kReplicated = -1;

class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;

  // The dim along which own parameter `name` ("weight", "bias") is split, or
  // kReplicated when every rank holds all of it.
  virtual int64_t split_dim(std::string_view name) const = 0;
  // The blocks along split_dim of own parameter `name` (see above); 1 unless
  // the layer says otherwise.
  virtual int64_t split_blocks(std::string_view name) const { return 1; }
  // The group the layer is split over (shared with the layer).
  virtual const std::shared_ptr<distributed::ProcessGroup>& tensor_parallel_group() const = 0;

 protected:
  TensorParallelLayer() = default;
  TensorParallelLayer(const TensorParallelLayer&) = default;
  TensorParallelLayer& operator=(const TensorParallelLayer&) = default;
};

// One parameter of a model and how it is laid out over the group.
struct ParameterLayout {
  std::string name;  // dotted, as in named_parameters() / state_dict()
  Tensor tensor;     // this rank's (the shard when split)
  int64_t split_dim = kReplicated;
  int64_t split_blocks = 1;                    // see TensorParallelLayer::split_blocks
  const TensorParallelLayer* layer = nullptr;  // the owner when it is one, else null
};

// Every parameter of model in named_parameters() order (a tensor registered
// twice listed once), each with its split dim.
std::vector<ParameterLayout> parameter_layouts(const nn::Module& model);

}  // namespace cohort::parallel
