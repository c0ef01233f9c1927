// A tiny GPT in Megatron's tensor-parallel layout (tensor_parallel_gpt.h)
// trained with real processes (cohort::spawn) against one process training
// the plain model on the same batches: 20 AdamW steps (nanoGPT's
// weight-decay groups, gradient clipping over the whole model) on 2 ranks (2
// heads) and 4 ranks (4 heads), with and without sequence parallelism;
// losses every step, and the final full state
// (the plain model's keys and shapes) against the plain model's. Each rank
// computes the reference itself and throws on a mismatch, which spawn
// reports.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/adam.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_gpt.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

nn::GPTConfig tiny(int64_t heads) {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = heads;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 64;
  return c;
}

std::pair<Tensor, Tensor> batch_of(int step, int64_t rows) {
  Generator gen(900 + static_cast<uint64_t>(step));
  Tensor seq = randint(0, 64, {rows, 17}, gen);
  return {seq.narrow(1, 0, 16).contiguous(), seq.narrow(1, 1, 16).contiguous()};
}

// nanoGPT's grouping. eps 1e-6: the key bias's gradient is zero in exact
// arithmetic and its rounding noise, which depends on the order of sums,
// would take full Adam steps with eps 1e-8.
std::unique_ptr<optim::AdamW> make_adamw(const nn::NamedTensors& named) {
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : named) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamWOptions o{.lr = 3e-3, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
  auto opt = std::make_unique<optim::AdamW>(decay, o);
  o.weight_decay = 0;
  opt->add_param_group(no_decay, o);
  return opt;
}

constexpr double kClip = 1.0;
constexpr int kSteps = 20;
constexpr int64_t kRows = 4;

void run_equivalence(int world_size, int64_t heads, bool sequence_parallel = false) {
  spawn(
      [=](int) {
        KernelPathGuard exact_kernels(KernelPath::kBaseline);
        auto tp = distributed::init_process_group("native", "env://", -1, -1, 60s);
        const int rank = tp->rank();
        Generator gen(7);
        nn::GPT plain(tiny(heads), gen);
        TensorParallelGPT model(plain, tp, {.sequence_parallel = sequence_parallel});
        auto ref_opt = make_adamw(plain.named_parameters());
        auto opt = make_adamw(model.named_parameters());
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = batch_of(s, kRows);
          ref_opt->zero_grad();
          Tensor ref_loss = plain.forward(x, y);
          ref_loss.backward();
          optim::clip_grad_norm(plain.parameters(), kClip);
          ref_opt->step();
          opt->zero_grad();
          Tensor loss = model.forward(x, y);
          loss.backward();
          model.reduce_sequence_parallel_gradients();
          clip_grad_norm_tensor_parallel(model, kClip, *tp);
          opt->step();
          const double want = ref_loss.item<double>(), got = loss.item<double>();
          if (std::fabs(got - want) > 1e-4 * std::max(1.0, std::fabs(want)))
            throw Error(
                fmt::format("rank {}: step {} loss {} vs one process {}", rank, s, got, want));
        }
        TensorDict full = full_state_dict(model, *tp);
        for (const auto& [name, t] : plain.state_dict()) {
          const Tensor& got = full.at(name);
          if (got.sizes() != t.sizes() || !allclose(got, t, 1e-3, 1e-5))
            throw Error(fmt::format("rank {}: {} differs from one process", rank, name));
        }
        distributed::destroy_process_group(tp);
      },
      world_size);
}

TEST(GPTTensorParallel, TwoRanksMatchOneProcess) { run_equivalence(2, 2); }

TEST(GPTTensorParallel, FourRanksMatchOneProcess) { run_equivalence(4, 4); }

TEST(GPTTensorParallel, SequenceParallelMatchesOneProcess) {
  run_equivalence(2, 2, true);
  run_equivalence(4, 4, true);
}

}  // namespace
}  // namespace cohort::parallel
