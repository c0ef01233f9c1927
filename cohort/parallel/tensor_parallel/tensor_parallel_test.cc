// Tensor-parallel layers in one process: argument errors, the split helpers,
// and a group of one (or a few ranks on threads over one HashStore), where
// the layers must be exactly nn::Linear. The multi-process equivalence tests
// are in tests/tensor_parallel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "cohort/nn/activation.h"
#include "cohort/nn/flatten.h"
#include "cohort/nn/linear.h"
#include "cohort/nn/sequential.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/mappings.h"
#include "cohort/parallel/tensor_parallel/parallel_mlp.h"
#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_models.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_testing.h"
#include "cohort/rendezvous/hash_store.h"

namespace cohort::parallel {
namespace {

using distributed::ProcessGroup;

// Every rank a thread, over one in-process store.
void run_ranks(int n, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn) {
  testing::run_ranks("tp", n, fn);
}

std::shared_ptr<ProcessGroup> solo() {
  static int counter = 0;
  distributed::ProcessGroupOptions o;
  o.name = fmt::format("tp-solo-{}-{}", ::getpid(), counter++);
  return ProcessGroup::create(distributed::BackendKind::kNative,
                              std::make_shared<rendezvous::HashStore>(), 0, 1, o);
}

template <typename Fn>
std::string invalid_message(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return "";
}

TEST(TensorParallelLayers, NullGroupIsAnError) {
  Generator gen(1);
  nn::Linear l(4, 4, gen);
  EXPECT_THROW(ColumnParallelLinear::from_full(l, nullptr), InvalidArgument);
  EXPECT_THROW(RowParallelLinear::from_full(l, nullptr), InvalidArgument);
  EXPECT_THROW(copy_to_tensor_parallel_region(Tensor::ones({2}), nullptr), InvalidArgument);
  nn::Sequential s{std::make_shared<nn::Linear>(4, 4, gen)};
  EXPECT_THROW(make_tensor_parallel_mlp(s, nullptr), InvalidArgument);
}

TEST(TensorParallelLayers, SizesNotDivisibleByTheGroupNameBothNumbers) {
  run_ranks(3, [](std::shared_ptr<ProcessGroup> tp) {
    Generator gen(2);
    nn::Linear l(6, 4, gen);
    std::string m = invalid_message([&] { ColumnParallelLinear::from_full(l, tp); });
    EXPECT_NE(m.find("out_features 4"), std::string::npos) << m;
    EXPECT_NE(m.find("size 3"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("rank {}", tp->rank())), std::string::npos) << m;
    nn::Linear l2(4, 6, gen);
    m = invalid_message([&] { RowParallelLinear::from_full(l2, tp); });
    EXPECT_NE(m.find("in_features 4"), std::string::npos) << m;
    m = invalid_message([&] { ParallelMLP(3, 4, 3, tp, gen); });
    EXPECT_NE(m.find("out_features 4"), std::string::npos) << m;
    m = invalid_message([&] { scatter_to_tensor_parallel_region(Tensor::ones({2, 4}), tp); });
    EXPECT_NE(m.find("last dim 4"), std::string::npos) << m;
  });
}

TEST(TensorParallelLayers, ShardAndGatherHelpers) {
  Tensor x = Tensor::arange(0.0, 24.0).view({2, 3, 4});
  EXPECT_TRUE(equal(shard_along_dim(x, 2, 1, 2), x.narrow(2, 2, 2).contiguous()));
  EXPECT_TRUE(equal(shard_along_dim(x, 0, 1, 2), x.narrow(0, 1, 1).contiguous()));
  EXPECT_THROW(shard_along_dim(x, 1, 0, 2), InvalidArgument);
  EXPECT_THROW(shard_along_dim(x, 1, 3, 3), InvalidArgument);
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> tp) {
    for (int64_t dim : {0, 1, 2, -1}) {
      if (x.size(dim) % 2 != 0) continue;
      Tensor part = shard_along_dim(x, dim, tp->rank(), 2);
      EXPECT_TRUE(equal(all_gather_along_dim(part, dim, *tp), x)) << "dim " << dim;
    }
  });
}

// A group of one: the layers are nn::Linear, forward and backward.
TEST(TensorParallelLayers, GroupOfOneIsLinear) {
  auto tp = solo();
  Generator gen(3);
  nn::Linear full(5, 4, gen);
  Tensor x = rand({3, 5}, gen);
  Tensor want = full.forward(x);
  auto col = ColumnParallelLinear::from_full(full, tp);
  auto row = RowParallelLinear::from_full(full, tp, {.input_is_parallel = false});
  EXPECT_TRUE(allclose(col->forward(x), want, 1e-6, 1e-7));
  EXPECT_TRUE(allclose(row->forward(x), want, 1e-6, 1e-7));
  EXPECT_EQ(col->state_dict().keys(), full.state_dict().keys());
  EXPECT_EQ(col->split_dim("weight"), 0);
  EXPECT_EQ(row->split_dim("weight"), 1);
  EXPECT_EQ(row->split_dim("bias"), kReplicated);
  EXPECT_THROW(col->split_dim("nope"), InvalidArgument);
  EXPECT_THROW(col->forward(rand({3, 4}, gen)), InvalidArgument);
  EXPECT_THROW(row->forward(rand({3, 4}, gen)), InvalidArgument);
  // Clones share the group and copy the shard.
  auto copy = col->clone_as<ColumnParallelLinear>();
  EXPECT_TRUE(equal(copy->weight(), col->weight()));
  EXPECT_EQ(copy->tensor_parallel_group(), tp);
}

TEST(TensorParallelLayers, LoadFullStateDictChecksKeysAndShapes) {
  auto tp = solo();
  Generator gen(4);
  nn::Linear full(5, 4, gen);
  auto col = ColumnParallelLinear::from_full(full, tp);
  TensorDict d = full.state_dict();
  d.insert("extra", Tensor::ones({1}));
  std::string m = invalid_message([&] { load_full_state_dict(*col, d, *tp); });
  EXPECT_NE(m.find("unexpected keys [extra]"), std::string::npos) << m;
  TensorDict w;
  w.insert("weight", Tensor::ones({4, 5}));
  m = invalid_message([&] { load_full_state_dict(*col, w, *tp); });
  EXPECT_NE(m.find("missing keys [bias]"), std::string::npos) << m;
  TensorDict bad;
  bad.insert("weight", Tensor::ones({4, 6}));
  bad.insert("bias", Tensor::ones({4}));
  m = invalid_message([&] { load_full_state_dict(*col, bad, *tp); });
  EXPECT_NE(m.find("'weight' has shape [4, 6]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  // Nothing was copied by the failed loads.
  EXPECT_TRUE(equal(col->weight(), full.weight()));
  // A layer split over another group than the one passed.
  auto other = solo();
  EXPECT_THROW(full_state_dict(*col, *other), InvalidArgument);
}

TEST(TensorParallelLayers, MlpPairsLinearsAcrossElementwiseActivationsOnly) {
  auto tp = solo();
  Generator gen(5);
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Linear>(4, 8, gen));  // 0: column
  s.push_back(std::make_shared<nn::ReLU>());
  s.push_back(std::make_shared<nn::Linear>(8, 8, gen));  // 2: row
  s.push_back(std::make_shared<nn::Linear>(8, 8, gen));  // 3: column (Flatten is no activation)
  s.push_back(std::make_shared<nn::Tanh>());
  s.push_back(std::make_shared<nn::Linear>(8, 8, gen));  // 5: row
  s.push_back(std::make_shared<nn::Linear>(8, 6, gen));  // 6: alone -> replicated
  s.push_back(std::make_shared<nn::Flatten>(1));
  s.push_back(std::make_shared<nn::Linear>(6, 2, gen));  // 8: alone after Flatten
  auto tpm = make_tensor_parallel_mlp(s, tp);
  EXPECT_NO_THROW(tpm->at<ColumnParallelLinear>(0));
  EXPECT_NO_THROW(tpm->at<RowParallelLinear>(2));
  EXPECT_NO_THROW(tpm->at<ColumnParallelLinear>(3));
  EXPECT_NO_THROW(tpm->at<RowParallelLinear>(5));
  EXPECT_NO_THROW(tpm->at<nn::Linear>(6));
  EXPECT_NO_THROW(tpm->at<nn::Linear>(8));
  EXPECT_EQ(tpm->state_dict().keys(), s.state_dict().keys());
  Tensor x = rand({3, 4}, gen);
  EXPECT_TRUE(allclose(tpm->forward(x), s.forward(x), 1e-5, 1e-6));
  // The copy is independent of the original.
  {
    NoGradGuard no_grad;
    s.at<nn::Linear>(6).weight().fill_(0);
  }
  EXPECT_FALSE(equal(tpm->at<nn::Linear>(6).weight(), s.at<nn::Linear>(6).weight()));
}

TEST(TensorParallelLayers, ClipOverAGroupOfOneIsClipGradNorm) {
  auto tp = solo();
  for (double norm_type : {2.0, 1.0, optim::kInfNorm}) {
    Generator g1(6), g2(6);
    nn::Linear f1(6, 4, g1), f2(4, 3, g1);
    ParallelMLP mlp(6, 4, 3, tp, g2);
    Tensor x = rand({2, 6}, g1);
    sum(f2.forward(relu(f1.forward(x)))).backward();
    sum(mlp.forward(x)).backward();
    std::vector<Tensor> ps = f1.parameters();
    for (const Tensor& p : f2.parameters()) ps.push_back(p);
    double want = optim::clip_grad_norm(ps, 0.05, norm_type);
    double got = clip_grad_norm_tensor_parallel(mlp, 0.05, *tp, norm_type);
    EXPECT_NEAR(got, want, 1e-6 * want) << "norm_type " << norm_type;
    EXPECT_TRUE(allclose(mlp.fc1().weight().grad(), f1.weight().grad(), 1e-5, 1e-7));
    EXPECT_TRUE(allclose(mlp.fc2().bias().grad(), f2.bias().grad(), 1e-5, 1e-7));
  }
  Generator gen(7);
  nn::Linear l(2, 2, gen);
  EXPECT_EQ(clip_grad_norm_tensor_parallel(l, 1.0, *tp), 0.0);  // no gradients yet
  EXPECT_THROW(clip_grad_norm_tensor_parallel(l, 1.0, *tp, -1.0), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
