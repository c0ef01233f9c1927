// SyncBatchNorm over ranks on threads, each with its own share of a batch
// (shares of different sizes, one of them empty), checked against one
// process's BatchNorm on the concatenated batch: outputs, input gradients,
// weight and bias gradients (summed over the ranks: each rank's are its
// share, as PyTorch's), running statistics after a few steps; then eval
// mode and a group of one (no communication), convert_sync_batchnorm (in
// place, typed members, names, mode), the errors every rank throws together,
// and DDP training a small CNN equal to one process on the whole batch.
#include "cohort/parallel/sync_batchnorm.h"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

#include "cohort/autograd/gradcheck.h"
#include "cohort/distributed/thread_ranks_testing.h"
#include "cohort/nn/activation.h"
#include "cohort/nn/conv2d.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/sequential.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {
namespace {

using distributed::ProcessGroup;
using distributed::testing::run_ranks_with;

constexpr int64_t kChannels = 3;

void run_ranks(int n, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  distributed::ProcessGroupOptions o;
  o.name = "sbn";
  o.timeout = std::chrono::seconds(60);
  run_ranks_with(n, o, fn);
}

int64_t offset_of(const std::vector<int64_t>& sizes, int rank) {
  return std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0});
}

// Rows [offset, offset + n) of t: this rank's share of the batch.
Tensor share(const Tensor& t, const std::vector<int64_t>& sizes, int rank) {
  return t.narrow(0, offset_of(sizes, rank), sizes[static_cast<size_t>(rank)]).clone();
}

// Sums t over the group (a copy; t is left alone).
Tensor summed(const Tensor& t, ProcessGroup& pg) {
  Tensor s = t.clone();
  pg.all_reduce(s);
  return s;
}

void expect_close(const Tensor& got, const Tensor& want, int rank, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << "rank " << rank << ": " << what;
  EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5))
      << "rank " << rank << ": " << what << " differs from BatchNorm on the whole batch";
}

// One step's global batch and loss weights: x [N, C, 4, 3] (or [N, C] for
// the 1d layer), the loss sum(out * r) so that the ranks' losses add up to
// the reference's.
struct Step {
  Tensor x, r;
};
Step step_of(int step, int64_t n, bool two_d) {
  Generator gen(100 + static_cast<uint64_t>(step));
  Shape s = two_d ? Shape{n, kChannels, 4, 3} : Shape{n, kChannels};
  return {randn(s, gen) * 2.0 + 0.5, randn(s, gen)};
}

void set_affine(nn::BatchNormBase& bn) {
  Generator gen(7);
  NoGradGuard g;
  bn.weight().copy_(randn({kChannels}, gen) * 0.2 + 1.0);
  bn.bias().copy_(randn({kChannels}, gen));
}

// Three training steps of a synced layer on this rank's shares against
// BatchNorm on the whole batch, with the momentum given (nullopt: the
// cumulative average).
void check_against_batch_norm(ProcessGroup& pg, nn::BatchNormBase& synced,
                              nn::BatchNormBase& reference, const std::vector<int64_t>& sizes,
                              bool two_d) {
  const int rank = pg.rank();
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  set_affine(synced);
  set_affine(reference);
  for (int s = 0; s < 3; ++s) {
    Step st = step_of(s, total, two_d);
    Tensor x_all = st.x.clone().set_requires_grad(true);
    reference.zero_grad(true);
    Tensor out_all = reference(x_all);
    sum(out_all * st.r).backward();

    Tensor x = share(st.x, sizes, rank).set_requires_grad(true);
    synced.zero_grad(true);
    Tensor out = synced(x);
    sum(out * share(st.r, sizes, rank)).backward();

    const std::string at = "step " + std::to_string(s) + ": ";
    expect_close(out, share(out_all, sizes, rank), rank, at + "output");
    expect_close(x.grad(), share(x_all.grad(), sizes, rank), rank, at + "input gradient");
    expect_close(summed(synced.weight().grad(), pg), reference.weight().grad(), rank,
                 at + "weight gradient summed over the ranks");
    expect_close(summed(synced.bias().grad(), pg), reference.bias().grad(), rank,
                 at + "bias gradient summed over the ranks");
    expect_close(synced.running_mean(), reference.running_mean(), rank, at + "running_mean");
    expect_close(synced.running_var(), reference.running_var(), rank, at + "running_var");
  }
  EXPECT_EQ(synced.num_batches_tracked().item<int64_t>(), 3);
}

struct Case {
  std::vector<int64_t> sizes;  // per rank
  bool two_d;
};

class SyncBatchNormMatchesBatchNorm : public ::testing::TestWithParam<Case> {};

TEST_P(SyncBatchNormMatchesBatchNorm, OnTheConcatenatedBatch) {
  const Case c = GetParam();
  run_ranks(static_cast<int>(c.sizes.size()), [&](std::shared_ptr<ProcessGroup> pg) {
    SyncBatchNorm synced(kChannels, pg);
    if (c.two_d) {
      nn::BatchNorm2d reference(kChannels);
      check_against_batch_norm(*pg, synced, reference, c.sizes, true);
    } else {
      nn::BatchNorm1d reference(kChannels);
      check_against_batch_norm(*pg, synced, reference, c.sizes, false);
    }
  });
}

// 2 and 3 ranks with different shares; one rank holding a single sample of
// a 1d layer (alone it could not train) and one holding none.
INSTANTIATE_TEST_SUITE_P(Shares, SyncBatchNormMatchesBatchNorm,
                         ::testing::Values(Case{{3, 5}, true}, Case{{2, 6, 1}, true},
                                           Case{{4, 0, 3}, true}, Case{{1, 4}, false},
                                           Case{{5, 2, 1}, false}),
                         [](const auto& info) {
                           std::string name = info.param.two_d ? "BatchNorm2d" : "BatchNorm1d";
                           for (int64_t n : info.param.sizes) name += "_" + std::to_string(n);
                           return name;
                         });

TEST(SyncBatchNorm, CumulativeMomentumOverTheGroup) {
  const std::vector<int64_t> sizes{2, 5};
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> pg) {
    nn::BatchNormOptions o{.momentum = std::nullopt};
    SyncBatchNorm synced(kChannels, pg, o);
    nn::BatchNorm2d reference(kChannels, o);
    check_against_batch_norm(*pg, synced, reference, sizes, true);
  });
}

TEST(SyncBatchNorm, EvalUsesRunningStatsWithoutCommunicating) {
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> pg) {
    SyncBatchNorm synced(kChannels, pg);
    nn::BatchNorm2d reference(kChannels);
    Step st = step_of(0, 6, true);
    synced(share(st.x, {3, 3}, pg->rank()));
    reference(st.x);
    synced.eval();
    reference.eval();
    const distributed::ProcessGroupStats before = pg->stats();
    // Only rank 1 evaluates, a different batch size: nothing waits for rank 0.
    if (pg->rank() == 1) {
      Tensor x = step_of(1, 5, true).x;
      expect_close(synced(x), reference(x), 1, "eval output");
    }
    const distributed::ProcessGroupStats after = pg->stats();
    EXPECT_EQ(after.ops_inline + after.ops_queued, before.ops_inline + before.ops_queued);
  });
}

TEST(SyncBatchNorm, GroupOfOneIsBatchNorm) {
  run_ranks(1, [&](std::shared_ptr<ProcessGroup> pg) {
    SyncBatchNorm synced(kChannels, pg);
    nn::BatchNorm2d reference(kChannels);
    check_against_batch_norm(*pg, synced, reference, {6}, true);
    // The reference's own checks, with no collective: one value per channel.
    EXPECT_THROW(synced(Tensor::ones({1, kChannels, 1, 1})), InvalidArgument);
  });
}

// Finite differences through the collectives: both ranks hold the same
// inputs and run gradcheck in lockstep, so each perturbation moves both
// ranks' inputs at once; by symmetry that derivative of this rank's loss is
// the derivative of the sum of both ranks' losses with respect to this
// rank's input, which is what backward's all-reduce computes. The weight and
// bias are each rank's own, so their gradients are this rank's share.
TEST(SyncBatchNorm, GradcheckThroughTheGroup) {
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> pg) {
    Generator gen(11);
    Tensor x = randn({3, 2, 4}, gen, kFloat64).set_requires_grad(true);
    Tensor w = randn({2}, gen, kFloat64).set_requires_grad(true);
    Tensor b = randn({2}, gen, kFloat64).set_requires_grad(true);
    auto fn = [&](const std::vector<Tensor>& in) {
      return sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], 0.1, 1e-5, pg);
    };
    autograd::GradcheckResult r = autograd::gradcheck(fn, {x, w, b});
    EXPECT_TRUE(r.ok) << "rank " << pg->rank() << ": " << r.message;
  });
}

// A parent that reaches its layers through typed members, as the house style
// writes modules: conversion must reach them too.
class SmallCnn : public nn::Cloneable<SmallCnn> {
 public:
  explicit SmallCnn(Generator& gen) : Cloneable("SmallCnn") {
    conv_ = register_module("conv", std::make_shared<nn::Conv2d>(1, 4, 3, gen));
    bn_ = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    head_ = register_module(
        "head",
        std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
            std::make_shared<nn::Linear>(4 * 6 * 6, 8, gen), std::make_shared<nn::BatchNorm1d>(8),
            std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3, gen)}));
  }
  Tensor forward(const Tensor& x) override { return head_(flatten(relu(bn_(conv_(x))), 1)); }
  nn::BatchNorm2d& bn() const { return *bn_; }

 private:
  nn::Child<nn::Conv2d> conv_;
  nn::Child<nn::BatchNorm2d> bn_;
  nn::Child<nn::Sequential> head_;
};

TEST(ConvertSyncBatchnorm, ConvertsInPlaceKeepingStateNamesAndMode) {
  run_ranks(1, [&](std::shared_ptr<ProcessGroup> pg) {
    Generator gen(3);
    SmallCnn model(gen);
    model.child("head")->child("1")->eval();
    const nn::NamedTensors params = model.named_parameters(), buffers = model.named_buffers();
    const std::vector<std::string> keys = model.state_dict().keys();

    EXPECT_EQ(convert_sync_batchnorm(model, pg), 2);

    EXPECT_EQ(model.state_dict().keys(), keys);
    const nn::NamedTensors params_after = model.named_parameters();
    const nn::NamedTensors buffers_after = model.named_buffers();
    ASSERT_EQ(params_after.size(), params.size());
    ASSERT_EQ(buffers_after.size(), buffers.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(params_after[i].second.is_same(params[i].second)) << params[i].first;
    for (size_t i = 0; i < buffers.size(); ++i)
      EXPECT_TRUE(buffers_after[i].second.is_same(buffers[i].second)) << buffers[i].first;
    // The typed member is the converted layer; modes are kept.
    EXPECT_NE(model.bn().sync(), nullptr);
    EXPECT_TRUE(model.bn().is_training());
    auto& bn1d = dynamic_cast<nn::BatchNormBase&>(*model.child("head")->child("1"));
    EXPECT_NE(bn1d.sync(), nullptr);
    EXPECT_FALSE(bn1d.is_training());
    EXPECT_EQ(bn1d.type_name(), "BatchNorm1d");

    EXPECT_THROW(convert_sync_batchnorm(model, nullptr), InvalidArgument);
    EXPECT_THROW(SyncBatchNorm(2, nullptr), InvalidArgument);
  });
}

// Runs fn on n ranks and returns each rank's error message ("" if none).
std::vector<std::string> errors_of(int n,
                                   const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  std::vector<std::string> what(static_cast<size_t>(n));
  run_ranks(n, [&](std::shared_ptr<ProcessGroup> pg) {
    try {
      fn(pg);
    } catch (const InvalidArgument& e) {
      what[static_cast<size_t>(pg->rank())] = e.what();
    }
  });
  return what;
}

void expect_has(const std::string& what, std::initializer_list<std::string> fragments) {
  EXPECT_FALSE(what.empty()) << "expected an error";
  for (const auto& f : fragments)
    EXPECT_NE(what.find(f), std::string::npos) << "'" << f << "' not in: " << what;
}

TEST(SyncBatchNorm, EveryRankFailsWhenInputDimsDiffer) {
  auto what = errors_of(2, [](std::shared_ptr<ProcessGroup> pg) {
    SyncBatchNorm bn(kChannels, pg);
    Generator gen(1);
    bn(pg->rank() == 0 ? randn({4, kChannels, 2, 2}, gen) : randn({4, kChannels, 5}, gen));
  });
  expect_has(what[0], {"SyncBatchNorm(3", "on rank 0", "rank 0: 4-D", "rank 1: 3-D"});
  expect_has(what[1], {"on rank 1", "rank 0: 4-D", "rank 1: 3-D"});
}

TEST(SyncBatchNorm, EveryRankFailsWhenOneRanksInputDoesNotFit) {
  auto what = errors_of(3, [](std::shared_ptr<ProcessGroup> pg) {
    nn::BatchNorm2d bn(kChannels);
    convert_sync_batchnorm(bn, pg);
    Generator gen(1);
    bn(randn({2, pg->rank() == 1 ? kChannels + 1 : kChannels, 2, 2}, gen));
  });
  expect_has(what[1], {"BatchNorm2d(3", "on rank 1", "[N, 3, H, W]", "[2, 4, 2, 2]"});
  expect_has(what[0], {"on rank 0", "rank(s) 1 does not fit"});
  expect_has(what[2], {"on rank 2", "rank(s) 1 does not fit"});
}

TEST(SyncBatchNorm, EveryRankFailsWhenTheGroupHasNoBatch) {
  auto empty = errors_of(2, [](std::shared_ptr<ProcessGroup> pg) {
    SyncBatchNorm bn(kChannels, pg);
    bn(Tensor::zeros({0, kChannels, 2, 2}));
  });
  for (int r = 0; r < 2; ++r)
    expect_has(empty[static_cast<size_t>(r)],
               {"on rank " + std::to_string(r), "empty on every rank"});
  auto single = errors_of(2, [](std::shared_ptr<ProcessGroup> pg) {
    nn::BatchNorm1d bn(kChannels);
    convert_sync_batchnorm(bn, pg);
    bn(Tensor::ones({pg->rank() == 0 ? 1 : 0, kChannels}));
  });
  for (int r = 0; r < 2; ++r)
    expect_has(single[static_cast<size_t>(r)],
               {"on rank " + std::to_string(r), "more than one value per channel", "[1, 0]"});
}

TEST(SyncBatchNorm, EveryRankFailsWhenNumFeaturesDiffer) {
  // Different models on the ranks: the all_gather's sizes differ, which the
  // group reports as a mismatch on both sides.
  auto what = errors_of(2, [](std::shared_ptr<ProcessGroup> pg) {
    const int64_t c = pg->rank() == 0 ? 3 : 4;
    SyncBatchNorm bn(c, pg);
    Generator gen(1);
    bn(randn({2, c, 2, 2}, gen));
  });
  expect_has(what[0], {"SyncBatchNorm(3", "on rank 0", "same num_features? here 3", "all_gather"});
  expect_has(what[1], {"SyncBatchNorm(4", "on rank 1", "same num_features? here 4", "all_gather"});
}

// One step's global batch for the CNN: x [N, 1, 8, 8], labels [N] in [0, 3).
std::pair<Tensor, Tensor> cnn_batch(int step, int64_t n) {
  Generator gen(500 + static_cast<uint64_t>(step));
  return {randn({n, 1, 8, 8}, gen), randint(0, 3, {n}, gen)};
}

constexpr int kCnnSteps = 4;

nn::NamedTensors train_cnn_reference(int64_t total) {
  Generator gen(42);
  SmallCnn model(gen);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < kCnnSteps; ++s) {
    auto [x, y] = cnn_batch(s, total);
    opt.zero_grad();
    cross_entropy(model(x), y).backward();
    opt.step();
  }
  nn::NamedTensors state = model.named_parameters();
  for (auto& b : model.named_buffers())
    if (is_floating(b.second.dtype())) state.push_back(b);
  return state;
}

class SyncBatchNormUnderDdp : public ::testing::TestWithParam<std::vector<int64_t>> {};

TEST_P(SyncBatchNormUnderDdp, TrainsAsOneProcessOnTheWholeBatch) {
  const std::vector<int64_t> sizes = GetParam();
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const nn::NamedTensors want = train_cnn_reference(total);
  const int world = static_cast<int>(sizes.size());
  run_ranks(world, [&](std::shared_ptr<ProcessGroup> pg) {
    const int rank = pg->rank();
    Generator gen(42 + static_cast<uint64_t>(rank));  // DDP broadcasts rank 0's
    auto model = std::make_shared<SmallCnn>(gen);
    ASSERT_EQ(convert_sync_batchnorm(*model, pg), 2);
    DistributedDataParallel ddp(model, pg);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < kCnnSteps; ++s) {
      auto [x, y] = cnn_batch(s, total);
      opt.zero_grad();
      // DDP averages over the ranks: scaling each rank's summed loss by
      // world / total makes that average the whole batch's mean loss even
      // though the shares differ in size.
      Tensor loss = cross_entropy(ddp.forward(share(x, sizes, rank)), share(y, sizes, rank),
                                  Reduction::kSum) *
                    (static_cast<double>(world) / static_cast<double>(total));
      loss.backward();
      opt.step();
    }
    nn::NamedTensors got = model->named_parameters();
    for (auto& b : model->named_buffers())
      if (is_floating(b.second.dtype())) got.push_back(b);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first);
      expect_close(got[i].second, want[i].second, rank, got[i].first);
      expect_close(summed(got[i].second, *pg) * (1.0 / world), got[i].second, rank,
                   got[i].first + " (the ranks' mean)");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shares, SyncBatchNormUnderDdp,
                         ::testing::Values(std::vector<int64_t>{5, 3},
                                           std::vector<int64_t>{2, 4, 3}),
                         [](const auto& info) {
                           std::string name = "ranks";
                           for (int64_t n : info.param) name += "_" + std::to_string(n);
                           return name;
                         });

}  // namespace
}  // namespace cohort::parallel
