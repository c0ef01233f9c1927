// What one process of a fault-tolerant replica trains (fault_tolerant_run.h):
// the whole model, its gradients averaged over the replica's processes (when
// it has several) and then over the replicas, or, under --strategy zero, its
// ZeRO shard over the replica's processes, the segments averaged over the
// replicas by the manager's sharded hook. Its state is what a process behind
// receives from the same process of a live replica: the full model, this
// process's optimizer state (its shard's under ZeRO), the cursor and the RNG.
// Collective over the replica's processes where ZeRO is (forward, backward,
// step, state, checkpoint); one training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cohort/checkpoint/async_checkpoint.h"
#include "cohort/data/dataset.h"
#include "cohort/parallel/fault_tolerance/replica_manager.h"
#include "cohort/train/train_options.h"
#include "cohort/train/zero_strategy.h"

namespace cohort::train {

class FaultTolerantModel {
 public:
  FaultTolerantModel(const TrainOptions& o, Generator& gen);
  // After the manager exists: ZeRO is built over its replica_group().
  void attach(parallel::ReplicaManager& m);

  // Forward and backward of this process's batch; returns its loss.
  Tensor forward_backward(const data::Batch& batch);
  // The gradients averaged over the replica's processes and the replicas
  // (ZeRO: done during backward by the hook); failures kept by the manager.
  void average_gradients(parallel::ReplicaManager& m);
  // After a commit: clip (every process holds the same average) and step.
  void step();

  TensorDict state_dict(int64_t cursor, const Generator& gen);
  // Returns the cursor.
  int64_t load_state_dict(const TensorDict& s, Generator& gen);

  // The full model, gathered (ZeRO stage 3: collective) for evaluation.
  nn::Module& full_model();
  // Collective over the replica's processes: the checkpoint of the
  // participant of rank 0 (sharded under ZeRO), in the background with a writer.
  std::string save_checkpoint(const std::string& root, const checkpoint::TrainingState& ts,
                              checkpoint::AsyncCheckpointWriter* writer);
  std::string layout() const;

 private:
  TrainOptions o_;
  std::shared_ptr<distributed::ProcessGroup> replica_;
  // Without ZeRO:
  nn::ModulePtr model_;
  std::unique_ptr<optim::Optimizer> opt_;
  // --strategy zero:
  std::unique_ptr<ZeroStrategy> zero_;
  double clip_ = 0;
};

}  // namespace cohort::train
