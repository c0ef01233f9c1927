// Cutting an nn::Sequential into pipeline stages: runs of consecutive
// children, balanced by measured cost or cut where the caller says. A stage is
// an nn::Sequential holding the original children (shared, not copied) under
// their original names, so its parameters are the full model's tensors and
// keep the full model's names ("fc1.weight", "3.bias").
//
// Cuts are given as stage starts: starts[s] is the index of stage s's first
// child, starts[0] = 0, starts[S] = number of children, strictly increasing
// (every stage holds at least one child).
// Thread safety: measure_layer_costs runs the model; nothing else may use it
// meanwhile. The other functions are pure.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cohort/nn/sequential.h"

namespace cohort::parallel::pipeline {

// Seconds of forward + backward of each child on `sample` (one micro-batch,
// fed through the children in order), the minimum of `repeats` runs.
// Parameter gradients are restored to what they were before.
std::vector<double> measure_layer_costs(const nn::Sequential& model, const Tensor& sample,
                                        int repeats = 3);

// The contiguous cut into `stages` stages that minimises the largest stage
// cost (exact, dynamic programming). InvalidArgument when there are fewer
// costs than stages.
std::vector<int64_t> balanced_cuts(const std::vector<double>& costs, int stages);

// Stage starts from the S-1 interior cut points a user gives (the indices of
// the first child of stages 1 .. S-1); checks them against the model size.
std::vector<int64_t> starts_from_cut_points(const std::vector<int64_t>& cut_points, int stages,
                                            int64_t children);

// The largest sum of costs over the stages given by starts.
double max_stage_cost(const std::vector<double>& costs, const std::vector<int64_t>& starts);

// Stage s of the model: a Sequential of children [starts[s], starts[s+1])
// under their original names.
std::shared_ptr<nn::Sequential> make_stage(const nn::Sequential& model,
                                           const std::vector<int64_t>& starts, int stage);

}  // namespace cohort::parallel::pipeline
