// Join: training with uneven inputs (PyTorch's
// torch.distributed.algorithms.Join). When the ranks hold different numbers
// of batches, a rank that runs out calls finish(): until every rank has run
// out, it shadows each iteration of the ranks still training -- issues the
// same collectives, with zeros -- so nobody waits for a collective that never
// comes; then every joinable makes the replicas equal again (DDP broadcasts
// the model from the last rank to run out).
//
//   cohort::parallel::Join join({&ddp});
//   for (auto& [x, y] : loader) { ... ddp.forward(x) ... backward, step }
//   join.finish();        // this rank is out of batches
//
// Per iteration of a training rank the first joinable calls
// notify_join_context() (DDP from forward): an all_reduce of a one, matched
// on joined ranks by finish()'s all_reduce of a zero, which counts the ranks
// still training; with throw_on_early_termination a second all_reduce tells
// every rank which ranks ran out, and every rank throws, naming them.
//
// Joinables (joinable.h's interface): DistributedDataParallel,
// ShardedDataParallel and its ShardedOptimizer, the LibTorch adapter's DDP
// and ZeroRedundancyOptimizer, each shadowing its own collectives. The joinables of one Join share
// one process group.
//
// Ownership: refers to the joinables, which must outlive it; attaches itself
// to them while it lives. Failure: a failed collective propagates from
// finish() or from the joinables' calls with its type (PeerLost,
// TimeoutError); a Join destroyed without finish() (an exception ended the
// loop) detaches and issues nothing, like leaving Python's `with` by an
// exception. Thread safety: the training thread only.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/parallel/joinable.h"

namespace cohort::parallel {

class Join {
 public:
  explicit Join(std::vector<Joinable*> joinables, JoinOptions options = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank is out of inputs: shadows the others until all are, then runs
  // every joinable's join_finish. With throw_on_early_termination, throws
  // (naming this rank) at the first iteration the others still train.
  void finish();

  // From a joinable's per-iteration entry, before its collectives: tells
  // the Join that this rank still trains. Does nothing unless `j` is the
  // first joinable of an enabled Join. Returns the Work of the count (its
  // tensor: the number of ranks still training, once waited for), or
  // nothing. With throw_on_early_termination, throws when some rank ran out.
  static std::optional<JoinCount> notify_join_context(Joinable& j);

  // In finish(), during a joinable's join_shadow_iteration: how many ranks
  // train in the iteration shadowed (for divide_by_initial_world_size = false).
  int ranks_training() const { return ranks_training_; }

 private:
  std::vector<Joinable*> joinables_;
  JoinOptions options_;
  distributed::ProcessGroup* pg_ = nullptr;
  Device device_ = kCPU;
  bool finished_ = false;
  int ranks_training_ = 0;
};

// Runs body (this rank's training loop) in a Join, then finish(); an
// exception from body propagates without the shadowing.
void run_joined(std::vector<Joinable*> joinables, JoinOptions options,
                const std::function<void()>& body);

}  // namespace cohort::parallel
