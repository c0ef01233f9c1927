// The fault-tolerance harness's model, data and optimizer: a small MLP,
// samples by their index in a global order, SGD with momentum. Test-only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cohort/core/tensor_dict.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"

namespace cohort::parallel::ft_testing {

inline nn::ModulePtr make_model(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 8, gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(8, 1, gen)});
}

// Samples [begin, end) of the global order.
inline std::pair<Tensor, Tensor> samples(int64_t begin, int64_t end) {
  std::vector<float> x, y;
  for (int64_t i = begin; i < end; ++i) {
    Generator g(1000 + static_cast<uint64_t>(i));
    std::vector<float> xi = randn({4}, g).to_vector<float>();
    x.insert(x.end(), xi.begin(), xi.end());
    y.push_back(xi[0] * 0.5f - xi[2] + 0.1f);
  }
  const int64_t n = end - begin;
  return {Tensor::from_vector<float>(x, {n, 4}), Tensor::from_vector<float>(y, {n, 1})};
}

inline optim::SGDOptions sgd() { return {.lr = 0.05, .momentum = 0.9}; }

// A replica's state as the harness sends it: parameters, optimizer state,
// the cursor; and its loading.
inline TensorDict replica_state(const nn::Module& model, const optim::Optimizer& opt,
                                int64_t cursor) {
  TensorDict s;
  for (const auto& [name, p] : model.named_parameters()) s.insert("model." + name, p.detach());
  s.merge(opt.state_dict(), "optim.");
  s.insert("cursor", Tensor::from_vector<int64_t>({cursor}));
  return s;
}
inline int64_t load_replica_state(const TensorDict& s, nn::Module& model, optim::Optimizer& opt) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters())
    const_cast<Tensor&>(p).copy_(s.at("model." + name));
  opt.load_state_dict(s.sub("optim."));
  return s.at("cursor").to_vector<int64_t>()[0];
}

}  // namespace cohort::parallel::ft_testing
