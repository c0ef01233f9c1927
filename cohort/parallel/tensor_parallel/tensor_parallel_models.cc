#include "cohort/parallel/tensor_parallel/tensor_parallel_models.h"

#include <string>
#include <utility>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/conv2d.h"
#include "cohort/nn/linear.h"

namespace cohort::parallel {

TensorParallelNet::TensorParallelNet(const nn::Net& full,
                                     std::shared_ptr<distributed::ProcessGroup> tp)
    : Cloneable("TensorParallelNet") {
  COHORT_CHECK(tp != nullptr, "TensorParallelNet: the tensor-parallel group is null");
  register_module("conv1", full.conv1().clone());
  register_module("conv2", full.conv2().clone());
  register_module("fc1", ColumnParallelLinear::from_full(full.fc1(), tp, {.gather_output = false}));
  register_module(
      "fc2", RowParallelLinear::from_full(full.fc2(), std::move(tp), {.input_is_parallel = true}));
}

Tensor TensorParallelNet::forward(const Tensor& x) {
  COHORT_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == 28 && x.size(3) == 28,
               "TensorParallelNet: input must be [N, 1, 28, 28], got {}", shape_str(x.sizes()));
  // Net::forward with fc1/fc2 replaced; relu acts on fc1's shard elementwise.
  Tensor h = conv1().forward_relu(x);
  h = conv2().forward_relu(h);
  h = max_pool2d(h, {2, 2});
  h = flatten(h, 1);
  h = relu(fc1().forward(h));
  return log_softmax(fc2().forward(h), 1);
}

nn::ModulePtr make_tensor_parallel_net(const nn::Net& full,
                                       std::shared_ptr<distributed::ProcessGroup> tp) {
  return std::make_shared<TensorParallelNet>(full, std::move(tp));
}

namespace {

// Modules that act on each element alone, so they may run on a shard.
bool is_elementwise(const nn::Module& m) {
  return dynamic_cast<const nn::ReLU*>(&m) != nullptr ||
         dynamic_cast<const nn::GELU*>(&m) != nullptr ||
         dynamic_cast<const nn::Tanh*>(&m) != nullptr ||
         dynamic_cast<const nn::Sigmoid*>(&m) != nullptr;
}

}  // namespace

std::shared_ptr<nn::Sequential> make_tensor_parallel_mlp(
    const nn::Sequential& full_mlp, std::shared_ptr<distributed::ProcessGroup> tp) {
  COHORT_CHECK(tp != nullptr, "make_tensor_parallel_mlp: the tensor-parallel group is null");
  const auto children = full_mlp.named_children();
  const size_t n = children.size();
  // role[i]: 'c' column, 'r' row, 0 copied as is.
  std::vector<char> role(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (role[i] != 0 || dynamic_cast<const nn::Linear*>(children[i].second.get()) == nullptr)
      continue;
    size_t j = i + 1;
    while (j < n && is_elementwise(*children[j].second)) ++j;
    if (j < n && dynamic_cast<const nn::Linear*>(children[j].second.get()) != nullptr) {
      role[i] = 'c';
      role[j] = 'r';
      i = j;
    }
  }
  auto out = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < n; ++i) {
    const auto& [name, m] = children[i];
    if (role[i] == 'c') {
      out->add(name, ColumnParallelLinear::from_full(static_cast<const nn::Linear&>(*m), tp,
                                                     {.gather_output = false}));
    } else if (role[i] == 'r') {
      out->add(name, RowParallelLinear::from_full(static_cast<const nn::Linear&>(*m), tp,
                                                  {.input_is_parallel = true}));
    } else {
      out->add(name, m->clone());
    }
  }
  return out;
}

}  // namespace cohort::parallel
