#include "cohort/parallel/pipeline/pipeline_grid.h"

#include "cohort/base/error.h"

namespace cohort::parallel::pipeline {

PipelineGrid make_pipeline_grid(std::shared_ptr<distributed::ProcessGroup> world, int stages) {
  COHORT_CHECK(world != nullptr, "make_pipeline_grid: the world group is null");
  const int n = world->size();
  if (stages == 0) stages = n;
  COHORT_CHECK(stages >= 1 && n % stages == 0,
               "make_pipeline_grid (rank {}): {} pipeline stages do not divide the world of {} "
               "ranks",
               world->rank(), stages, n);
  PipelineGrid grid;
  grid.world = world;
  grid.stages = stages;
  grid.replicas = n / stages;
  grid.stage = world->rank() % stages;
  grid.replica = world->rank() / stages;
  if (grid.replicas == 1) {
    grid.pp = world;
    return grid;
  }
  // Every rank creates every group in the same order (new_group's contract).
  for (int d = 0; d < grid.replicas; ++d) {
    std::vector<int> ranks;
    for (int s = 0; s < stages; ++s) ranks.push_back(d * stages + s);
    auto g = world->new_group(ranks, {.name = world->name() + "/pp" + std::to_string(d)});
    if (d == grid.replica) grid.pp = g;
  }
  for (int s = 0; s < stages; ++s) {
    std::vector<int> ranks;
    for (int d = 0; d < grid.replicas; ++d) ranks.push_back(d * stages + s);
    auto g = world->new_group(ranks, {.name = world->name() + "/dp" + std::to_string(s)});
    if (s == grid.stage) grid.dp = g;
  }
  return grid;
}

}  // namespace cohort::parallel::pipeline
