// The default communication hook (PyTorch's default_hooks.allreduce_hook):
// all_reduce(average) directly in the bucket's buffer, one collective, no
// copy. Stateless; see comm_hook.h for ownership and threading.
#pragma once

#include "cohort/parallel/comm_hooks/comm_hook.h"

namespace cohort::parallel {

class AllreduceHook final : public CommHook {
 public:
  BucketFuture run(distributed::ProcessGroup& pg, GradBucket& bucket) override;
  std::string name() const override { return "allreduce"; }
};

CommHookPtr allreduce_hook();

// The reduction allreduce_hook starts, for hooks that fall back to it
// (PowerSGD before start_powerSGD_iter).
BucketReduction allreduce_average(distributed::ProcessGroup& pg, const Tensor& buffer);

}  // namespace cohort::parallel
