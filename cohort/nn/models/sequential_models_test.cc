#include "cohort/nn/models/sequential_models.h"

#include <gtest/gtest.h>

#include "cohort/nn/models/net.h"

namespace cohort::nn {
namespace {

TEST(SequentialModels, NetSequentialHasNetsNamesWeightsAndOutputs) {
  Generator g1(7), g2(7);
  Net net(g1);
  auto seq = make_net_sequential(g2);
  auto a = net.named_parameters();
  auto b = seq->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(allclose(a[i].second, b[i].second, 0, 0)) << a[i].first;
  }
  Generator gx(3);
  Tensor x = rand({4, 1, 28, 28}, gx);
  EXPECT_TRUE(allclose(net.forward(x), seq->forward(x), 1e-5, 1e-5));
}

TEST(SequentialModels, MlpShapesAndNames) {
  Generator g(1);
  auto mlp = make_mlp(g, {.width = 32, .hidden_layers = 3});
  EXPECT_EQ(mlp->size(), 1u + 2 * 3 + 2);
  EXPECT_EQ(mlp->named_parameters()[0].first, "1.weight");
  Tensor out = mlp->forward(Tensor::zeros({5, 1, 28, 28}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{5, 10}));
}

TEST(SequentialModels, MlpRejectsZeroWidth) {
  Generator g(1);
  EXPECT_THROW(make_mlp(g, {.width = 0}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::nn
