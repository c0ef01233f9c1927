// The backward engine: runs the graph behind `roots` in the calling thread.
// Nodes are executed when all gradients flowing into them have arrived
// (dependency counting), latest-created first among the ready ones; gradients
// reaching one node along several paths are summed before it runs. Leaves
// receive their gradient through AccumulateGrad, which fires the leaf's
// grad-ready hooks. Grad mode is off while backward runs.
// Failure: an exception from a node or a hook propagates out of
// run_backward; the graph is then partly consumed and must not be reused.
// Thread safety: independent graphs may run on different threads at once.
#pragma once

#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::autograd {

// grads[i] is the gradient of roots[i] (same shape); an undefined entry means
// ones (only allowed for one-element roots).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads);

}  // namespace cohort::autograd
