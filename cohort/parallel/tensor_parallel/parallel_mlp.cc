#include "cohort/parallel/tensor_parallel/parallel_mlp.h"

#include <utility>

#include "cohort/base/error.h"

namespace cohort::parallel {

namespace {

const char* activation_name(MlpActivation a) {
  switch (a) {
    case MlpActivation::kRelu:
      return "relu";
    case MlpActivation::kGelu:
      return "gelu";
    case MlpActivation::kTanh:
      return "tanh";
  }
  return "?";
}

}  // namespace

Tensor apply_activation(MlpActivation activation, const Tensor& x) {
  switch (activation) {
    case MlpActivation::kRelu:
      return relu(x);
    case MlpActivation::kGelu:
      return gelu(x);
    case MlpActivation::kTanh:
      return tanh(x);
  }
  throw InvalidArgument("apply_activation: unknown activation");
}

ParallelMLP::ParallelMLP(Private, const nn::Linear& fc1, const nn::Linear& fc2,
                         std::shared_ptr<distributed::ProcessGroup> tp,
                         const ParallelMlpOptions& options)
    : Cloneable("ParallelMLP"), options_(options) {
  build(fc1, fc2, std::move(tp));
}

ParallelMLP::ParallelMLP(int64_t in_features, int64_t hidden_features, int64_t out_features,
                         std::shared_ptr<distributed::ProcessGroup> tp, Generator& gen,
                         const ParallelMlpOptions& options)
    : Cloneable("ParallelMLP"), options_(options) {
  // The draws of the unsplit block: fc1's weight and bias, then fc2's.
  nn::Linear fc1(in_features, hidden_features, gen, options.bias);
  nn::Linear fc2(hidden_features, out_features, gen, options.bias);
  build(fc1, fc2, std::move(tp));
}

void ParallelMLP::build(const nn::Linear& fc1, const nn::Linear& fc2,
                        std::shared_ptr<distributed::ProcessGroup> tp) {
  COHORT_CHECK(fc1.out_features() == fc2.in_features(),
               "ParallelMLP: fc1 has {} outputs but fc2 takes {} inputs", fc1.out_features(),
               fc2.in_features());
  options_.bias = fc1.has_bias();
  register_module("fc1", ColumnParallelLinear::from_full(fc1, tp, {.gather_output = false}));
  register_module("fc2",
                  RowParallelLinear::from_full(fc2, std::move(tp), {.input_is_parallel = true}));
}

std::shared_ptr<ParallelMLP> ParallelMLP::from_full(const nn::Linear& fc1, const nn::Linear& fc2,
                                                    std::shared_ptr<distributed::ProcessGroup> tp,
                                                    const ParallelMlpOptions& options) {
  return std::make_shared<ParallelMLP>(Private{}, fc1, fc2, std::move(tp), options);
}

std::string ParallelMLP::extra_repr() const {
  return fmt::format("activation={}", activation_name(options_.activation));
}

Tensor ParallelMLP::forward(const Tensor& x) {
  return fc2().forward(apply_activation(options_.activation, fc1().forward(x)));
}

}  // namespace cohort::parallel
