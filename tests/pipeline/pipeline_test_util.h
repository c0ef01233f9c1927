// Scaffolding of the pipeline's end-to-end tests (pipeline_test.cc,
// gpt_pipeline_test.cc, pipeline_zero_test.cc): joining the spawned world,
// a tiny GPT and its batches of token windows, nanoGPT's AdamW groups, and the
// comparison with one process that names the tensor, the rank and the worst
// difference. Test scaffolding only.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/adam.h"

namespace cohort::parallel::pipeline::testing_util {

inline std::shared_ptr<distributed::ProcessGroup> join() {
  using namespace std::chrono_literals;
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

// A tiny GPT of `layers` blocks over windows of 16 tokens out of 64.
inline nn::GPTConfig tiny_gpt(int64_t layers = 2) {
  nn::GPTConfig c;
  c.n_layer = layers;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 64;
  return c;
}

// `rows` windows of 16 tokens out of 64 drawn by gen: idx and the next tokens.
inline std::pair<Tensor, Tensor> token_windows(Generator& gen, int64_t rows) {
  Tensor seq = randint(0, 64, {rows, 17}, gen);
  return {seq.narrow(1, 0, 16).contiguous(), seq.narrow(1, 1, 16).contiguous()};
}

// nanoGPT's optimizer: the matrices of `named` decayed, the rest not (a
// stage of LayerNorms alone has no matrices), each handed as `to_train(p)`:
// the parameter itself, or its shard under ZeRO. eps 1e-6, not 1e-8: the key
// bias's gradient is zero in exact arithmetic (softmax ignores a constant
// added to every score) and rounding noise of 1e-9 there, which depends on
// the order of sums, would take full Adam steps.
inline std::unique_ptr<optim::AdamW> make_adamw(
    const nn::NamedTensors& named,
    const std::function<Tensor(const Tensor&)>& to_train = [](const Tensor& t) { return t; }) {
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : named) (p.dim() >= 2 ? decay : no_decay).push_back(to_train(p));
  optim::AdamWOptions o{.lr = 3e-3, .beta2 = 0.95, .eps = 1e-6};
  std::unique_ptr<optim::AdamW> opt;
  for (auto [group, wd] : {std::pair{&decay, 0.1}, std::pair{&no_decay, 0.0}}) {
    if (group->empty()) continue;
    o.weight_decay = wd;
    if (opt == nullptr)
      opt = std::make_unique<optim::AdamW>(*group, o);
    else
      opt->add_param_group(*group, o);
  }
  return opt;
}

// Throws naming `what`, the rank and the largest difference unless got is
// within float32 tolerance of want.
inline void check_close(const Tensor& got, const Tensor& want, const std::string& what, int rank) {
  if (got.sizes() != want.sizes())
    throw Error(fmt::format("rank {}: {}: shape {} vs {}", rank, what, shape_str(got.sizes()),
                            shape_str(want.sizes())));
  if (!allclose(got, want, 1e-3, 1e-5)) {
    std::vector<float> a = got.to_vector<float>(), b = want.to_vector<float>();
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, double(std::fabs(a[k] - b[k])));
    throw Error(
        fmt::format("rank {}: {} differs from one process (max |diff| {})", rank, what, worst));
  }
}

}  // namespace cohort::parallel::pipeline::testing_util
