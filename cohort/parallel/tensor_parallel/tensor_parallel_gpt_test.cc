// The tensor-parallel GPT (tensor_parallel_gpt.h) on ranks that are threads
// of one process over one HashStore: block-wise shards (q | k | v), the
// vocabulary-parallel cross-entropy against cross_entropy and by finite
// differences, the collectives one block costs, the plain model's keys in
// full_state_dict, and logits, loss and every gradient of one step against
// the plain model. Training over 20 steps with real processes is in
// tests/tensor_parallel/gpt_tensor_parallel_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "cohort/autograd/gradcheck.h"
#include "cohort/base/cpu.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/mappings.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_gpt.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_testing.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::parallel {
namespace {

using distributed::ProcessGroup;

// Every rank a thread, over one in-process store.
void run_ranks(int n, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  testing::run_ranks("tpgpt", n, fn);
}

nn::GPTConfig tiny(int64_t heads = 2) {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = heads;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 64;
  return c;
}

uint64_t ops(const ProcessGroup& g) {
  const auto s = g.stats();
  return s.ops_inline + s.ops_queued;
}

TEST(TensorParallelGPT, BlockShardsTakeEachRanksPieceOfEveryBlock) {
  Tensor x = Tensor::arange(0.0, 12.0).view({6, 2});  // 3 blocks of 2 rows
  // Rank 1 of 2: row 1 of each block.
  Tensor want = cat({x.narrow(0, 1, 1), x.narrow(0, 3, 1), x.narrow(0, 5, 1)}, 0);
  EXPECT_TRUE(equal(shard_along_dim(x, 0, 1, 2, 3), want));
  EXPECT_THROW(shard_along_dim(x, 0, 0, 4, 3), InvalidArgument);
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    Tensor part = shard_along_dim(x, 0, tp->rank(), 2, 3);
    EXPECT_TRUE(equal(all_gather_along_dim(part, 0, *tp, 3), x));
  });
}

TEST(TensorParallelGPT, VocabParallelCrossEntropyIsCrossEntropy) {
  Generator gen(4);
  Tensor full = randn({6, 8}, gen);
  Tensor targets = Tensor::from_vector<int64_t>({0, 7, 3, -1, 4, 1}, {6});
  Tensor want_loss = cross_entropy(full, targets, Reduction::kMean, -1);
  Tensor leaf = full.clone();
  leaf.set_requires_grad(true);
  cross_entropy(leaf, targets, Reduction::kMean, -1).backward();
  Tensor want_grad = leaf.grad();
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    Tensor mine = shard_along_dim(full, 1, tp->rank(), 2);
    mine.set_requires_grad(true);
    Tensor loss = vocab_parallel_cross_entropy(mine, targets, 4 * tp->rank(), tp);
    EXPECT_NEAR(loss.item<double>(), want_loss.item<double>(), 1e-6);
    loss.backward();
    EXPECT_TRUE(allclose(mine.grad(), shard_along_dim(want_grad, 1, tp->rank(), 2), 1e-5, 1e-7));
    // Target ids beyond the vocabulary are named.
    Tensor beyond = Tensor::from_vector<int64_t>({8, 0, 0, 0, 0, 0}, {6});
    EXPECT_THROW(vocab_parallel_cross_entropy(mine, beyond, 4 * tp->rank(), tp), InvalidArgument);
  });
  // Finite differences over a group of one (on several ranks at once the
  // ranks' perturbations would meet in the shared loss).
  distributed::ProcessGroupOptions o;
  o.name = fmt::format("tpgpt-solo-{}", ::getpid());
  auto solo = ProcessGroup::create(distributed::BackendKind::kNative,
                                   std::make_shared<rendezvous::HashStore>(), 0, 1, o);
  Tensor x = full.clone();
  x.set_requires_grad(true);
  auto r = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return vocab_parallel_cross_entropy(in[0], targets, 0, solo);
      },
      {x}, {.eps = 1e-2, .atol = 2e-4, .rtol = 1e-2});
  EXPECT_TRUE(r.ok) << r.message;
}

void one_step_equals_the_plain_model(bool sequence_parallel) {
  KernelPathGuard exact(KernelPath::kBaseline);
  Generator gen(11);
  nn::GPT plain(tiny(), gen);
  Tensor seq = randint(0, 64, {3, 17}, gen);
  Tensor idx = seq.narrow(1, 0, 16).contiguous(), tgt = seq.narrow(1, 1, 16).contiguous();
  Tensor want_logits = plain.forward(idx);
  Tensor want_loss = plain.forward(idx, tgt);
  want_loss.backward();
  TensorDict want_grads;
  for (const auto& [name, p] : plain.named_parameters()) want_grads.insert(name, p.grad());
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    TensorParallelGPT model(plain, tp, {.sequence_parallel = sequence_parallel});
    EXPECT_TRUE(allclose(model.forward(idx), want_logits, 1e-4, 1e-5));
    Tensor loss = model.forward(idx, tgt);
    EXPECT_NEAR(loss.item<double>(), want_loss.item<double>(), 1e-5);
    loss.backward();
    model.reduce_sequence_parallel_gradients();
    for (const ParameterLayout& p : parameter_layouts(model)) {
      Tensor g = p.split_dim == kReplicated
                     ? p.tensor.grad()
                     : all_gather_along_dim(p.tensor.grad(), p.split_dim, *tp, p.split_blocks);
      EXPECT_TRUE(allclose(g, want_grads.at(p.name), 1e-3, 1e-6)) << p.name;
    }
    // The state has the plain model's keys, shapes and values.
    TensorDict full = full_state_dict(model, *tp);
    EXPECT_EQ(full.keys(), plain.state_dict().keys());
    for (const auto& [key, t] : plain.state_dict()) EXPECT_TRUE(equal(full.at(key), t)) << key;
    EXPECT_NEAR(grad_norm_tensor_parallel(model, *tp), optim::grad_norm(plain.parameters()), 1e-4);
  });
}

TEST(TensorParallelGPT, OneStepEqualsThePlainModel) { one_step_equals_the_plain_model(false); }

TEST(TensorParallelGPT, OneStepWithSequenceParallelismEqualsThePlainModel) {
  one_step_equals_the_plain_model(true);
}

// Checkpointed blocks recompute their region, collectives included, during
// backward; every rank's shard gradients equal those without checkpointing.
void checkpointed_step_equals_uncheckpointed(nn::GPTCheckpointing mode, bool sequence_parallel) {
  nn::GPTConfig cfg = tiny();
  nn::GPTConfig ckpt_cfg = cfg;
  ckpt_cfg.checkpointing = mode;
  Generator g1(12), g2(12);
  nn::GPT plain(cfg, g1), ckpt(ckpt_cfg, g2);
  Generator data(13);
  Tensor seq = randint(0, 64, {2, 17}, data);
  Tensor idx = seq.narrow(1, 0, 16).contiguous(), tgt = seq.narrow(1, 1, 16).contiguous();
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    TensorParallelGPT a(plain, tp, {.sequence_parallel = sequence_parallel});
    TensorParallelGPT b(ckpt, tp, {.sequence_parallel = sequence_parallel});
    Tensor la = a.forward(idx, tgt), lb = b.forward(idx, tgt);
    EXPECT_NEAR(la.item<double>(), lb.item<double>(), 1e-6);
    la.backward();
    lb.backward();
    a.reduce_sequence_parallel_gradients();
    b.reduce_sequence_parallel_gradients();
    auto pa = a.named_parameters(), pb = b.named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      ASSERT_TRUE(pb[i].second.grad().defined()) << pb[i].first;
      EXPECT_TRUE(allclose(pa[i].second.grad(), pb[i].second.grad(), 0, 1e-6)) << pa[i].first;
    }
  });
}

TEST(TensorParallelGPT, CheckpointedBlocksGiveTheSameGradients) {
  checkpointed_step_equals_uncheckpointed(nn::GPTCheckpointing::kBlock, false);
  checkpointed_step_equals_uncheckpointed(nn::GPTCheckpointing::kAttention, false);
}

TEST(TensorParallelGPT, CheckpointedBlocksWithSequenceParallelismGiveTheSameGradients) {
  checkpointed_step_equals_uncheckpointed(nn::GPTCheckpointing::kBlock, true);
}

TEST(TensorParallelGPT, EachAttentionAndMLPCostOneAllReduceEachWay) {
  Generator gen(12);
  nn::GPT plain(tiny(4), gen);
  Tensor x0 = randn({2, 8, 32}, gen);
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    TensorParallelGPT model(plain, tp);
    Tensor x = x0.clone();
    x.set_requires_grad(true);
    const uint64_t before = ops(*tp);
    Tensor y = model.block(0).forward(x);
    const uint64_t forward = ops(*tp) - before;
    sum(y).backward();
    const uint64_t backward = ops(*tp) - before - forward;
    EXPECT_EQ(forward, 2u);   // attention's and the MLP's row-parallel outputs
    EXPECT_EQ(backward, 2u);  // attention's and the MLP's column-parallel input gradients
  });
}

TEST(TensorParallelGPT, SequenceParallelBlocksAllGatherAndReduceScatter) {
  // Each attention and MLP: an all-gather of its input and a reduce-scatter
  // of its output forward, the reverse backward.
  Generator gen(12);
  nn::GPT plain(tiny(4), gen);
  Tensor x0 = randn({2, 8, 32}, gen);
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    TensorParallelGPT model(plain, tp, {.sequence_parallel = true});
    Tensor x = x0.narrow(1, 4 * tp->rank(), 4).contiguous();  // this rank's positions
    x.set_requires_grad(true);
    const uint64_t before = ops(*tp);
    Tensor y = model.block(0).forward(x);
    const uint64_t forward = ops(*tp) - before;
    EXPECT_EQ(y.sizes(), (Shape{2, 4, 32}));
    sum(y).backward();
    EXPECT_EQ(forward, 4u);
    EXPECT_EQ(ops(*tp) - before - forward, 4u);
    // Positions not divisible by the group are named.
    EXPECT_THROW(model.forward(Tensor::zeros({1, 3}, kInt64)), InvalidArgument);
  });
}

TEST(TensorParallelGPT, CheckpointsOfThePlainModelLoadAndSizesAreChecked) {
  Generator gen(13);
  nn::GPT plain(tiny(), gen), other(tiny(), gen);
  Tensor idx = randint(0, 64, {2, 16}, gen);
  Tensor want = plain.forward(idx);
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    TensorParallelGPT model(other, tp);
    load_full_state_dict(model, plain.state_dict(), *tp);
    EXPECT_TRUE(allclose(model.forward(idx), want, 1e-4, 1e-5));
    // The head's weight is the embedding's shard, one tensor.
    EXPECT_EQ(model.named_parameters().size(), plain.named_parameters().size());
  });
  run_ranks(3, [&](std::shared_ptr<ProcessGroup> tp) {
    try {
      TensorParallelGPT model(plain, tp);
      ADD_FAILURE() << "2 heads split over 3 ranks";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("n_head 2"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace cohort::parallel
