// Communication hooks of DistributedDataParallel (PyTorch's
// ddp_comm_hooks): how one bucket of local gradients becomes the average
// over the ranks. A hook starts the reduction and returns at once with a
// BucketReduction; the reducer waits on its Work and then runs `finish`,
// after which the bucket must hold the averaged gradients (float32, in place:
// the parameters' .grad are views into it).
//
//   ddp.register_comm_hook(cohort::parallel::bf16_compress_hook());
//
// Ownership: the hook keeps whatever temporary buffers it needs alive in the
// closures it returns. Thread safety: a hook is called on the thread that
// runs backward, one bucket at a time, in bucket order on every rank.
#pragma once

#include <functional>

#include "cohort/core/tensor.h"
#include "cohort/distributed/process_group.h"
#include "cohort/parallel/reduction_scheduler.h"

namespace cohort::parallel {

// One bucket as a hook sees it.
struct GradBucket {
  size_t index = 0;      // position in the reduction order (same on every rank)
  Tensor buffer;         // flat, contiguous [numel]: this rank's gradients
  bool is_last = false;  // the last bucket of the iteration
};

// BucketReduction (reduction_scheduler.h): the started reduction a hook
// returns; `bytes` is the size of the tensor the hook handed to the
// collective, i.e. what this rank puts on the wire for the bucket (times the
// algorithm's factor, 2 (n - 1) / n for a ring); the reducer sums it
// (Reducer::reduced_bytes).
using CommHook = std::function<BucketReduction(distributed::ProcessGroup& pg, GradBucket& bucket)>;

// The default: all_reduce(average) directly in the bucket; no copy.
CommHook allreduce_hook();

// Gradient compression: the bucket is converted to bfloat16 (half the bytes
// on the wire), all-reduced as a sum (the collectives add in float32 and
// round after each step), converted back into the float32 bucket and divided
// by the world size. Costs precision: about 3 significant digits.
CommHook bf16_compress_hook();

// The hook for gradients reduced in `dtype`: float32 -> allreduce_hook(),
// bfloat16 -> bf16_compress_hook(); other dtypes throw InvalidArgument.
CommHook grad_reduce_hook(DType dtype);

}  // namespace cohort::parallel
