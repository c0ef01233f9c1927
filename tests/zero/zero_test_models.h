// The models, batches and optimizers the ZeRO tests train (zero_test.cc,
// zero_features_test.cc, zero_checkpoint_test.cc): Net with SGD + momentum,
// an MLP with AdamW, a tiny GPT with AdamW in two weight-decay groups, and
// Odd (tensors smaller than the world size, frozen parameters) with Adam;
// batch `step` of every run is the same on every rank and world size, and
// `train_reference` is one process training on the whole batch, what every
// parallel run is checked against. Test scaffolding only.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/zero/sharded_data_parallel.h"

namespace cohort::parallel::zero_testing {

using namespace std::chrono_literals;

enum class Model { kNet, kMlp, kGpt, kOdd };

// Tensors smaller than 4 (empty chunks at 4 ranks), a frozen tensor in the
// root unit and a frozen bias inside unit "a".
class Odd : public nn::Cloneable<Odd> {
 public:
  explicit Odd(Generator& gen) : Cloneable("Odd") {
    a_ = register_module("a", std::make_shared<nn::Linear>(6, 5, gen));
    b_ = register_module("b", std::make_shared<nn::Linear>(5, 1, gen));  // 5 + 1 elements
    frozen_ = register_parameter("frozen", rand({5}, gen), false);
    scale_ = register_parameter("scale", Tensor::ones({1}));
    a_->bias().set_requires_grad(false);
  }
  Tensor forward(const Tensor& x) override {
    return mul(b_(mul(relu(a_(x)), param(frozen_))), param(scale_));
  }

 private:
  nn::Child<nn::Linear> a_, b_;
  size_t frozen_ = 0, scale_ = 0;
};

inline nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 16;
  return c;
}

// Rank 0's model; other ranks start elsewhere and must be overwritten.
inline nn::ModulePtr make_model(Model m, int rank) {
  Generator gen(rank == 0 ? 42 : 4242 + static_cast<uint64_t>(rank));
  switch (m) {
    case Model::kNet:
      return std::make_shared<nn::Net>(gen);
    case Model::kMlp:
      return nn::make_mlp(gen, {.in_features = 20, .width = 32, .hidden_layers = 2, .classes = 5});
    case Model::kGpt:
      return std::make_shared<nn::GPT>(tiny_gpt(), gen);
    case Model::kOdd:
      return std::make_shared<Odd>(gen);
  }
  return nullptr;
}

constexpr int64_t kBatch = 16;

struct Batch {
  Tensor x, y;
};

inline Batch batch_of(Model m, int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  switch (m) {
    case Model::kNet:
      return {rand({kBatch, 1, 28, 28}, gen), randint(0, 10, {kBatch}, gen)};
    case Model::kMlp:
      return {rand({kBatch, 20}, gen), randint(0, 5, {kBatch}, gen)};
    case Model::kGpt:
      return {randint(0, 16, {kBatch, 8}, gen), randint(0, 16, {kBatch, 8}, gen)};
    case Model::kOdd:
      return {rand({kBatch, 6}, gen), rand({kBatch, 1}, gen)};
  }
  return {};
}

// Part `part` of `parts` equal row ranges of b.
inline Batch slice(const Batch& b, int64_t part, int64_t parts) {
  const int64_t n = b.x.size(0) / parts;
  return {b.x.narrow(0, part * n, n), b.y.narrow(0, part * n, n)};
}

inline Tensor loss_of(Model m, nn::Module& model, const Batch& b) {
  switch (m) {
    case Model::kNet:
    case Model::kMlp:
      return nll_loss(model(b.x), b.y);
    case Model::kGpt:
      return static_cast<nn::GPT&>(model).forward(b.x, b.y);
    case Model::kOdd:
      return mse_loss(model(b.x), b.y);
  }
  return {};
}

// The GPT's AdamW in its two weight-decay groups over map(p) of its
// parameters.
inline std::unique_ptr<optim::Optimizer> gpt_adamw(
    const nn::Module& model, const std::function<Tensor(const Tensor&)>& map) {
  nn::WeightDecayGroups g = nn::weight_decay_groups(model);
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : g.decay) decay.push_back(map(p));
  for (const Tensor& p : g.no_decay) no_decay.push_back(map(p));
  optim::AdamWOptions o{.lr = 3e-3, .weight_decay = 0.1};
  auto opt = std::make_unique<optim::AdamW>(decay, o);
  o.weight_decay = 0;
  opt->add_param_group(no_decay, o);
  return opt;
}

// The optimizer of each model over `params` (full tensors or their shards,
// mapped by `map`), with GPT's two weight-decay groups.
inline std::unique_ptr<optim::Optimizer> make_opt(Model m, const nn::Module& model,
                                                  const std::function<Tensor(const Tensor&)>& map) {
  std::vector<Tensor> all;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) all.push_back(map(p));
  switch (m) {
    case Model::kNet:
      return std::make_unique<optim::SGD>(all, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    case Model::kMlp:
      return std::make_unique<optim::AdamW>(all, optim::AdamWOptions{.lr = 1e-3});
    case Model::kGpt:
      return gpt_adamw(model, map);
    case Model::kOdd:
      return std::make_unique<optim::Adam>(all, optim::AdamOptions{.lr = 1e-2});
  }
  return nullptr;
}

constexpr double kClip = 0.5;  // the GPT runs clip at this global norm

inline nn::NamedTensors snapshot(const nn::Module& m) {
  nn::NamedTensors out;
  for (const auto& [name, t] : m.named_parameters()) out.emplace_back(name, t.clone());
  return out;
}

inline nn::NamedTensors train_reference(Model m, int steps) {
  auto model = make_model(m, 0);
  auto opt = make_opt(m, *model, [](const Tensor& t) { return t; });
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    loss_of(m, *model, batch_of(m, s)).backward();
    if (m == Model::kGpt) optim::clip_grad_norm(model->parameters(), kClip);
    opt->step();
  }
  return snapshot(*model);
}

inline UnitPolicy policy_of(Model m) {
  if (m == Model::kGpt) return module_type_policy({"Block"});
  return child_unit_policy();
}

// Throws naming the first parameter of `got` that is not close to `want`
// and its largest difference.
inline void check_params(const nn::NamedTensors& got, const nn::NamedTensors& want,
                         const std::string& what) {
  COHORT_ASSERT(got.size() == want.size(), "parameter count");
  for (size_t i = 0; i < got.size(); ++i) {
    if (allclose(got[i].second, want[i].second, 1e-3, 1e-4)) continue;
    std::vector<float> a = got[i].second.to_vector<float>();
    std::vector<float> b = want[i].second.to_vector<float>();
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, double(std::fabs(a[k] - b[k])));
    throw Error(fmt::format("{}: parameter {} differs (max |diff| {})", what, got[i].first, worst));
  }
}

inline std::shared_ptr<distributed::ProcessGroup> join() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

}  // namespace cohort::parallel::zero_testing
