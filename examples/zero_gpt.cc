// ZeRO stage 3 (FSDP) on a small GPT: each rank keeps 1/N of the parameters,
// gradients and AdamW state; each Block is a unit whose parameters are
// gathered for its forward and backward and freed after (docs/zero.md).
// Rank 0 prints the loss every 10 steps and, at the end, its model state
// against DDP's 16 bytes per parameter.
//
//   cohort run --nproc-per-node 2 build/examples/zero_gpt [--stage 1|2|3] [--steps N]
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/adam.h"
#include "cohort/parallel/zero/sharded_optimizer.h"

using namespace cohort;

int main(int argc, char** argv) {
  int stage = 3;
  int steps = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--stage") == 0) {
      stage = std::stoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--steps") == 0) {
      steps = std::stoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: zero_gpt [--stage 1|2|3] [--steps N]\n");
      return 2;
    }
  }
  try {
    auto pg = distributed::init_process_group("native", "env://");
    nn::GPTConfig cfg;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 64;
    cfg.block_size = 32;
    cfg.vocab_size = 64;
    Generator gen(1);
    auto model = std::make_shared<nn::GPT>(cfg, gen);
    parallel::ShardedDataParallel zero(
        model, pg, {.stage = stage, .unit_policy = parallel::module_type_policy({"Block"})});
    // AdamW with weight decay on the matrices only: the groups are chosen
    // from the full parameters, the optimizer runs over their shards.
    nn::WeightDecayGroups groups = nn::weight_decay_groups(*model);
    std::vector<Tensor> decay, no_decay;
    for (const Tensor& p : groups.decay) decay.push_back(zero.shard_of(p));
    for (const Tensor& p : groups.no_decay) no_decay.push_back(zero.shard_of(p));
    optim::AdamWOptions o{.lr = 3e-3, .beta2 = 0.95, .weight_decay = 0.1};
    auto adamw = std::make_unique<optim::AdamW>(decay, o);
    o.weight_decay = 0;
    adamw->add_param_group(no_decay, o);
    parallel::ShardedOptimizer opt(zero, std::move(adamw));

    // Counting sequences (each token the previous + 1, mod the vocabulary)
    // from random starts, a different batch on every rank.
    Generator data(100 + static_cast<uint64_t>(pg->rank()));
    const int64_t len = cfg.block_size + 1;
    for (int step = 1; step <= steps; ++step) {
      std::vector<int64_t> start = randint(0, cfg.vocab_size, {8}, data).to_vector<int64_t>();
      std::vector<int64_t> tokens;
      for (int64_t s : start)
        for (int64_t t = 0; t < len; ++t) tokens.push_back((s + t) % cfg.vocab_size);
      Tensor seq = Tensor::from_vector(tokens, {8, len});
      Tensor x = seq.narrow(1, 0, cfg.block_size).contiguous();
      Tensor y = seq.narrow(1, 1, cfg.block_size).contiguous();
      opt.zero_grad();
      Tensor loss =
          zero.forward_with([&](nn::Module& m) { return static_cast<nn::GPT&>(m).forward(x, y); });
      loss.backward();
      opt.clip_grad_norm(1.0);
      opt.step();
      if (pg->rank() == 0 && step % 10 == 0)
        std::printf("step %d loss %.4f\n", step, loss.item<double>());
    }
    parallel::ZeroMemoryStats m = zero.memory_stats();
    const double bytes =
        static_cast<double>(m.parameter_bytes + m.gradient_bytes + opt.state_bytes());
    if (pg->rank() == 0) {
      std::printf("stage %d, %d ranks: model state %.0f bytes per rank, DDP would keep %.0f\n",
                  stage, pg->size(), bytes,
                  parallel::zero_model_state_bytes(0, zero.num_parameter_elements(), pg->size()));
    }
    distributed::destroy_process_group(pg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
