// The ranks of a job arranged as replicas x stages for pipeline parallelism
// combined with data parallelism: world rank = replica * stages + stage. The
// pipeline group holds the ranks of one replica (group rank = stage); the
// data-parallel group holds the ranks of one stage across replicas (group
// rank = replica).
//
//   auto grid = make_pipeline_grid(world, /*stages=*/2);  // 4 ranks: 2 replicas x 2 stages
//   grid.pp->size() == 2; grid.dp->size() == 2 (null when there is one replica)
//
// Ownership: the grid shares the groups; the world group must outlive none of
// them (subgroups hold their own connections). Collective: every rank of the
// world calls make_pipeline_grid with the same stages, at the same point
// relative to its other ops on the world group.
#pragma once

#include <memory>

#include "cohort/distributed/process_group.h"

namespace cohort::parallel::pipeline {

struct PipelineGrid {
  std::shared_ptr<distributed::ProcessGroup> world;
  std::shared_ptr<distributed::ProcessGroup> pp;  // this rank's pipeline
  std::shared_ptr<distributed::ProcessGroup> dp;  // this stage's replicas; null with one replica
  int stages = 1;
  int replicas = 1;
  int stage = 0;    // this rank's place in its pipeline (pp->rank())
  int replica = 0;  // this rank's replica (dp->rank() when dp is set)
};

// stages 0 = the whole world in one pipeline. InvalidArgument when stages
// does not divide the world size. With one replica pp is the world group
// itself (no new group); with one stage per pipeline each pp is a group of one.
PipelineGrid make_pipeline_grid(std::shared_ptr<distributed::ProcessGroup> world, int stages);

}  // namespace cohort::parallel::pipeline
