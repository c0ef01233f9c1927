// AutogradMeta: the autograd record of a tensor, kept by core as plain data so
// that core does not depend on the autograd library (see tensor.h). Only the
// autograd library and Tensor's own members touch the fields.
// Thread safety: `mu` guards grad, hooks and grad_accumulator, because leaves
// (parameters) may be shared by graphs running on several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort {

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  // Producer of this tensor (non-leaf) -- set by the ops; null for leaves.
  std::shared_ptr<autograd::Node> grad_fn;
  // The leaf's gradient-accumulating node, shared by every use of the leaf in
  // one graph so that its inputs are summed before the ready hook fires.
  std::weak_ptr<autograd::Node> grad_accumulator;
  std::vector<std::pair<uint64_t, std::function<void(Tensor&)>>> hooks;
  uint64_t next_hook_id = 1;
  std::mutex mu;
};

}  // namespace cohort
