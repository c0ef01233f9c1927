// SyncBatchNorm: batch normalisation whose training statistics are those of
// the whole batch spread over a process group, as torch.nn.SyncBatchNorm.
// Under data parallelism each rank sees only its share of the batch; a plain
// BatchNorm would normalise every share by its own mean and variance, which
// for small per-rank batches is noisy and differs from one process training
// on the whole batch. SyncBatchNorm makes them equal:
//
//   forward   each rank's per-channel mean, biased variance and count are
//             all-gathered and combined, weighted by count (ranks may hold
//             different batch sizes, even 0): PyTorch's
//             batch_norm_gather_stats_with_counts. The running buffers take
//             the global mean and the global unbiased variance (count - 1),
//             with BatchNorm's momentum (or cumulative average).
//   backward  the per-channel sums of grad and grad * xhat are all-reduced,
//             so the input gradient is that of the whole batch's statistics;
//             weight and bias gradients stay this rank's share (their sum
//             over the ranks is the whole batch's gradient; DDP then
//             averages them like any other gradient, as in PyTorch).
//   eval      the running buffers, no communication; a group of one rank is
//             plain BatchNorm.
//
//   auto model = std::make_shared<MyCnn>(gen);              // with BatchNorm2d
//   parallel::convert_sync_batchnorm(*model, pg);           // before DDP
//   parallel::DistributedDataParallel ddp(model, pg);
//
// convert_sync_batchnorm converts in place: every BatchNorm1d/2d of the tree
// keeps its object, parameters, buffers, names (state_dict keys), mode and
// type, and its training forwards from then on go through the group (the
// BatchNormSync seam of nn/batch_norm.h). In place, rather than PyTorch's
// swap of the child for a new module, because a C++ parent reaches its layer
// through a typed member (nn::Child<BatchNorm2d>) that a swap in the
// registry would leave on the old layer, and that no other type could fill.
// SyncBatchNorm itself is the layer to build directly (input [N, C, *]).
//
// Collectives: one all_gather per training forward and one all_reduce per
// backward that needs the input's gradient, on `group`, from the thread that
// runs forward and backward; every rank must run the same layers in the same
// order, like any collective (DDP's bucket all_reduces interleave with them
// in the same order on every rank). Not with DataParallel's threads, which
// would issue them concurrently.
// Ownership: shares the group; it must outlive the layer's forwards and the
// backwards through them.
// Thread safety: as BatchNorm (one thread per instance).
// Failure: every rank throws together, naming the layer, the rank and the
// group: InvalidArgument when some rank's input does not fit (wrong dims or
// channels: that rank's own message, and the others name it), when the group
// holds at most one value per channel (e.g. an empty batch on every rank);
// the group's error (PeerLost, TimeoutError) when a rank fails or never
// arrives. Layers whose num_features differ between ranks make the
// all_gather a size mismatch: InvalidArgument naming the layer on every rank.
// CPU tensors only (like BatchNorm).
#pragma once

#include <cstdint>
#include <memory>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/batch_norm.h"

namespace cohort::parallel {

class SyncBatchNorm final : public nn::BatchNormBase {
 public:
  // Throws InvalidArgument for a null group (and as BatchNorm for the options).
  SyncBatchNorm(int64_t num_features, std::shared_ptr<distributed::ProcessGroup> group,
                const nn::BatchNormOptions& options = {});

 protected:
  nn::ModulePtr copy_shell() const override { return std::make_shared<SyncBatchNorm>(*this); }
  void check_input(const Tensor& x) const override;
};

// Makes every BatchNorm of `module`'s tree (the root included, SyncBatchNorm
// too: it moves to `group`) compute its training statistics over `group`, in
// place (see the header). Returns how many layers it converted. Throws
// InvalidArgument for a null group.
int64_t convert_sync_batchnorm(nn::Module& module,
                               std::shared_ptr<distributed::ProcessGroup> group);

// The functional form, as cohort::batch_norm(x, running_mean, running_var,
// weight, bias, training = true, momentum, eps) but over `group`'s batch
// (collective). x [N, C, *]; weight, bias, running_mean, running_var [C] or
// undefined. Updates the running buffers in place; the output's backward
// all-reduces as described above.
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps,
                       const std::shared_ptr<distributed::ProcessGroup>& group);

}  // namespace cohort::parallel
