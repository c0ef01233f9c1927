// Activation checkpointing, as torch.utils.checkpoint.checkpoint(fn, *inputs,
// use_reentrant=False): trades compute for memory. checkpoint(fn, inputs)
// returns fn(inputs) attached to one CheckpointNode; the activations fn
// computes inside are not kept. When backward reaches the node, it runs fn
// again with grad mode on and backpropagates through that recomputed graph,
// so only one checkpointed region's activations live at a time (plus each
// region's inputs).
//
//   Tensor y = autograd::checkpoint([&](const std::vector<Tensor>& in) {
//     return block(in[0]);
//   }, {x});
//
// Parameters: fn may use tensors it is not given (a module's parameters, or
// any tensor computed outside it). The first run records fn's graph only to
// find them, then frees it, so the node's edges lead to the inputs AND to
// those outside tensors. Their gradients then leave the node like any other
// op's: a leaf's AccumulateGrad runs in the engine's usual order, once per
// backward however many nodes feed it, and its grad-ready hooks (DDP's and
// ZeRO's reducers) fire once, right after the node; graph walks (DDP's
// find_unused_parameters) and the split backward see them.
// Randomness: the draws fn makes on the calling thread (dropout) are
// recorded and replayed in the recomputation (core/random.h's
// GeneratorReplay), which draws the same numbers and leaves the generators
// where the forward left them. The precision policy in force at the call is
// reopened for the recomputation.
// Requirements: fn must compute the same function when run again (same ops
// and shapes) and run its ops on the calling thread (draws, and graph nodes,
// made on other threads are neither replayed nor told from outside ones); it
// returns one tensor (a Node has one output). When the engine runs the node
// on one of its threads (a graph of concurrent branches, engine.h), the
// recomputation runs there. An input modified in place between forward
// and backward is reported at backward, as for any saved tensor. Nested
// checkpoints work (the inner one is re-run inside the outer recomputation).
// Grad mode off (or nothing requiring grad): fn(inputs), nothing recorded.
// Failure: an exception from fn propagates; at backward, a recomputation
// whose output shape differs from the first run's throws Error; a second
// backward through the node throws Error (the graph was freed).
// Thread safety: as any op: a node runs on one thread at a time.
#pragma once

#include <functional>
#include <vector>

#include "cohort/core/tensor.h"

namespace cohort::autograd {

// Given the inputs (detached, requiring grad where the caller's did),
// returns the region's output.
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// fn(inputs) without keeping fn's activations; see above. fn is kept (and
// called once more at backward), so what it captures must outlive the
// backward.
Tensor checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs);

}  // namespace cohort::autograd
