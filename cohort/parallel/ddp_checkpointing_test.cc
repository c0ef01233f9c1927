// DistributedDataParallel over a GPT whose blocks are checkpointed
// (autograd/checkpoint.h), 2 ranks as threads: the parameters after a few SGD
// steps equal those of the same DDP run without checkpointing (also with
// find_unused_parameters, whose graph walk must find the parameters used
// inside the checkpointed regions), and the buckets are still launched while
// backward runs (each parameter's grad-ready hook fires once, right after its
// region's recomputation).
#include <gtest/gtest.h>

#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/comm_hooks/allreduce_hook.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {
namespace {

using distributed::ProcessGroup;

nn::GPTConfig tiny(nn::GPTCheckpointing mode) {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 13;
  c.checkpointing = mode;
  return c;
}

// The global batch of step `step`; rank r trains on rows [2r, 2r + 2).
std::pair<Tensor, Tensor> batch_of(int step) {
  Generator gen(100 + static_cast<uint64_t>(step));
  return {randint(0, 13, {4, 8}, gen), randint(0, 13, {4, 8}, gen)};
}

// Every rank's parameters after `steps` DDP steps, by rank.
std::vector<nn::NamedTensors> train_ddp(nn::GPTCheckpointing mode, bool find_unused, int steps) {
  std::vector<nn::NamedTensors> out(2);
  distributed::testing::run_ranks_named(
      fmt::format("ddp-ckpt-{}-{}", nn::gpt_checkpointing_name(mode), find_unused), 2,
      [&](std::shared_ptr<ProcessGroup> pg) {
        Generator gen(7);
        auto model = std::make_shared<nn::GPT>(tiny(mode), gen);
        DistributedDataParallelOptions options;
        options.find_unused_parameters = find_unused;
        DistributedDataParallel ddp(model, pg, options);
        optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
        const int r = pg->rank();
        for (int s = 0; s < steps; ++s) {
          auto [x, y] = batch_of(s);
          opt.zero_grad();
          ddp.forward_with([&](nn::Module& m) {
               return static_cast<nn::GPT&>(m).forward(x.narrow(0, 2 * r, 2),
                                                       y.narrow(0, 2 * r, 2));
             })
              .backward();
          opt.step();
        }
        nn::NamedTensors params;
        for (const auto& [name, p] : model->named_parameters())
          params.emplace_back(name, p.detach().clone());
        out[static_cast<size_t>(r)] = std::move(params);
      });
  return out;
}

void expect_same_parameters(const nn::NamedTensors& want, const nn::NamedTensors& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].first, got[i].first);
    EXPECT_TRUE(allclose(want[i].second, got[i].second, 0, 1e-6)) << want[i].first;
  }
}

TEST(DDPCheckpointing, TwoRanksGiveTheParametersOfTheRunWithout) {
  for (bool find_unused : {false, true}) {
    SCOPED_TRACE(find_unused ? "find_unused_parameters" : "all parameters used");
    auto want = train_ddp(nn::GPTCheckpointing::kNone, find_unused, 3);
    for (auto mode : {nn::GPTCheckpointing::kBlock, nn::GPTCheckpointing::kAttention}) {
      SCOPED_TRACE(nn::gpt_checkpointing_name(mode));
      auto got = train_ddp(mode, find_unused, 3);
      for (size_t r = 0; r < 2; ++r) expect_same_parameters(want[r], got[r]);
    }
  }
}

TEST(DDPCheckpointing, BucketsLaunchDuringBackwardAndEachHookFiresOnce) {
  distributed::testing::run_ranks_named(
      "ddp-ckpt-overlap", 2, [&](std::shared_ptr<ProcessGroup> pg) {
        Generator gen(7);
        auto model = std::make_shared<nn::GPT>(tiny(nn::GPTCheckpointing::kBlock), gen);
        // The position embedding's gradient is the last one backward makes.
        std::vector<bool> wpe_done_at_launch;
        CommHookPtr spy = make_comm_hook(
            "spy", allreduce_hook(),
            [&](CommHookPtr& inner, distributed::ProcessGroup& g, GradBucket& b) {
              Tensor wpe_grad = model->wpe().weight().grad();
              wpe_done_at_launch.push_back(sum(abs(wpe_grad)).item<double>() != 0.0);
              return inner->run(g, b);
            });
        DistributedDataParallelOptions options;
        options.bucket_cap_mb = 0.001;
        options.comm_hook = spy;
        DistributedDataParallel ddp(model, pg, options);
        std::vector<int> fired(model->parameters().size(), 0);
        std::vector<GradHookHandle> handles;
        {
          auto params = model->parameters();
          for (size_t i = 0; i < params.size(); ++i)
            handles.push_back(
                params[i].register_grad_ready_hook([&fired, i](Tensor&) { ++fired[i]; }));
        }
        for (int step = 1; step <= 2; ++step) {
          auto [x, y] = batch_of(step);
          const int r = pg->rank();
          ddp.zero_grad();
          wpe_done_at_launch.clear();
          ddp.forward_with([&](nn::Module& m) {
               return static_cast<nn::GPT&>(m).forward(x.narrow(0, 2 * r, 2),
                                                       y.narrow(0, 2 * r, 2));
             })
              .backward();
          for (size_t i = 0; i < fired.size(); ++i)
            EXPECT_EQ(fired[i], step) << "parameter " << i << ", step " << step;
          ASSERT_GE(wpe_done_at_launch.size(), 3u);
          EXPECT_FALSE(wpe_done_at_launch.front()) << "the first bucket waited for backward's end";
          EXPECT_TRUE(wpe_done_at_launch.back());
        }
        for (auto& h : handles) h.remove();
      });
}

}  // namespace
}  // namespace cohort::parallel
