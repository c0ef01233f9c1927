// Model checks of the data-parallel wrappers (DistributedDataParallel,
// ShardedDataParallel, the LibTorch adapter's DDP): at construction every
// rank must wrap the same model, and rank 0's values become everyone's.
//
// A model is compared as a list of entries, one line per parameter and then
// per buffer ("parameter 'fc1.weight' float32 [50, 2000]"), so that a wrapper
// over another framework's modules (cohort/libtorch) writes its own entries
// and shares the comparison and its messages. verify_same_entries first
// gathers a hash of each rank's list and only on a mismatch the lists
// themselves, to name the first difference and the ranks that differ.
//
// Every function here is collective over `pg` (every rank calls it, in the
// same order); a failed collective is rethrown with its type and `what`, the
// rank and the step in front. Thread safety: as the process group's calls.
#pragma once

#include <string>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/module.h"

namespace cohort::parallel {

// Where the wrappers' small exchanges (model checks, norms) put their
// tensors: a group that carries device tensors only (nccl) gets them on the
// model's device, every other group on the CPU.
Device exchange_device(const distributed::ProcessGroup& pg, Device model_device);
// The device of a module's first parameter (the CPU without parameters).
Device module_device(const nn::Module& module);

// Fully-qualified names of parameters and buffers that a wrapper leaves
// alone (DDP's params_and_buffers_to_ignore): not checked, not broadcast.
using IgnoredNames = std::vector<std::string>;

// One entry per parameter, then per buffer, in the module's order.
std::vector<std::string> model_entries(const nn::Module& module, const IgnoredNames& ignore = {});

// Throws InvalidArgument on every rank unless every rank passed the same
// entries (the message names the first difference and the ranks). `what`
// prefixes errors ("DistributedDataParallel (rank 1): ...").
// device: the model's (exchange_device picks where the exchange runs).
void verify_same_entries(distributed::ProcessGroup& pg, const std::vector<std::string>& entries,
                         const std::string& what, Device device = kCPU);

// verify_same_entries of model_entries(module): the same parameter and buffer
// names, dtypes and shapes on every rank.
void verify_same_model(distributed::ProcessGroup& pg, const nn::Module& module,
                       const std::string& what, const IgnoredNames& ignore = {});

// Copies rank `root`'s parameters and buffers into every rank's.
void broadcast_module_state(distributed::ProcessGroup& pg, const nn::Module& module, int root = 0,
                            const IgnoredNames& ignore = {});

}  // namespace cohort::parallel
