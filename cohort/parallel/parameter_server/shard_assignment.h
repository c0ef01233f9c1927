// ShardAssignment: which parameter-server shard holds which parameter.
//
// A parameter server splits the model's parameters (in named_parameters()
// order) over S servers so that each carries about the same number of bytes:
// the bytes a server receives and sends per step, and so its time on the
// wire, grow with the bytes it holds. Tensors are never cut (a shard holds
// whole parameters), which keeps a server's optimizer a plain optim::SGD/Adam
// over whole tensors and a checkpoint name-for-name.
//
// The rule is greedy largest-first (LPT scheduling): parameters sorted by
// bytes, largest first (ties: lower index first), each placed on the server
// with the fewest bytes so far (ties: lower server index). It is a pure
// function of the sizes and S, so every process computes the same
// assignment without talking to the others. LPT's heaviest server carries at
// most 4/3 of the optimum; when one tensor is bigger than an equal share
// (Net's fc1.weight is 85% of Net) that tensor alone sets the maximum, and no
// whole-tensor assignment can do better.
//
// Thread safety: plain values; functions are pure.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cohort/nn/module.h"

namespace cohort::parallel {

struct ShardAssignment {
  // server_of[i]: the server that holds parameter i (named_parameters order).
  std::vector<int> server_of;
  // params_of[s]: the parameters of server s, ascending (named_parameters order).
  std::vector<std::vector<size_t>> params_of;
  // bytes_of[s]: the bytes server s holds.
  std::vector<size_t> bytes_of;

  int num_servers() const { return static_cast<int>(params_of.size()); }
  size_t num_params() const { return server_of.size(); }
  size_t max_bytes() const;
  size_t total_bytes() const;
};

// Assigns parameters of the given byte sizes to num_servers servers (see the
// header comment). Throws InvalidArgument when num_servers < 1. A server may
// end up empty when there are fewer parameters than servers.
ShardAssignment assign_shards(const std::vector<size_t>& param_bytes, int num_servers);

// The same over a model's parameters (their nbytes, named_parameters order).
ShardAssignment assign_shards(const nn::NamedTensors& params, int num_servers);

// "server 0: 2 tensors, 400.0 KB (fc1.weight, fc1.bias); server 1: ..." for logs and benchmarks.
std::string describe(const ShardAssignment& a, const nn::NamedTensors& params);

}  // namespace cohort::parallel
