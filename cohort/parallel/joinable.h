// Joinable: what a training wrapper gives Join (join.h) so that a rank out of
// inputs can shadow its collectives (PyTorch's Joinable and JoinHook).
// DistributedDataParallel implements it; a wrapper that issues collectives
// every iteration implements it the same way.
//
// Thread safety: the training thread only. Ownership: a Join refers to its
// joinables, and attaches itself (join_config()) while it lives.
#pragma once

#include "cohort/core/tensor.h"
#include "cohort/distributed/process_group.h"

namespace cohort::parallel {

struct JoinOptions {
  bool enable = true;  // false: the Join does nothing (finish() returns at once)
  // Every rank throws at the first iteration in which some rank ran out.
  bool throw_on_early_termination = false;
  // DDP's gradients are averaged over the initial world size (the ranks out
  // of inputs count as zeros), as PyTorch's default; false: over the ranks
  // still training in that iteration.
  bool divide_by_initial_world_size = true;
};

// The count of ranks still training in an iteration, in flight.
struct JoinCount {
  distributed::Work work;
  Tensor count;  // [1] float32 on join_device(); valid once work is waited for
};

class Join;

class Joinable {
 public:
  virtual ~Joinable() = default;

  // What a rank out of inputs runs once per iteration of the others: the
  // collectives one iteration of this joinable issues, in the same order,
  // with zeros in place of this rank's data (PyTorch's JoinHook.main_hook).
  virtual void join_shadow_iteration() = 0;
  // After every rank ran out: make the ranks' states equal again;
  // is_last_joiner: this rank trained in the last iteration (post_hook).
  virtual void join_finish(bool is_last_joiner) = 0;
  virtual distributed::ProcessGroup& join_process_group() = 0;
  // Called by the Join's constructor: throws (NotSupported, InvalidArgument)
  // when this joinable cannot take part with these options, or at this
  // place in the Join's list (position of count; the first one tells the
  // Join each iteration that its rank still trains, so it must be the one
  // whose collectives come first).
  virtual void check_joinable(const JoinOptions& options, size_t position, size_t count) const {}
  // Where the Join's small exchanges run (the CPU, or the model's device
  // for a group that carries only device tensors).
  virtual Device join_device() const = 0;

  // The Join this joinable is attached to and its options (nullptr: none).
  const Join* join() const { return join_; }
  const JoinOptions& join_options() const { return join_options_; }
  bool join_enabled() const { return join_ != nullptr && join_options_.enable; }

 private:
  friend class Join;
  const Join* join_ = nullptr;
  JoinOptions join_options_;
  bool first_joinable_ = false;
};

}  // namespace cohort::parallel
