#include "cohort/parallel/pipeline/partition.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"
#include "cohort/nn/models/sequential_models.h"

namespace cohort::parallel::pipeline {
namespace {

TEST(PipelinePartition, BalancesByCost) {
  EXPECT_EQ(balanced_cuts({1, 1, 1, 1}, 2), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(balanced_cuts({5, 1, 1, 1, 1, 1}, 2), (std::vector<int64_t>{0, 1, 6}));
  std::vector<double> costs{1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int64_t> starts = balanced_cuts(costs, 3);
  EXPECT_EQ(max_stage_cost(costs, starts), 17);  // the optimum: 1..5 | 6 7 | 8 9
  EXPECT_EQ(starts.front(), 0);
  EXPECT_EQ(starts.back(), 9);
  // One heavy layer gets a stage alone; each stage keeps at least one layer.
  EXPECT_EQ(balanced_cuts({1, 100, 1, 1}, 4), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(balanced_cuts({1, 1, 100, 1, 1, 1}, 3).size(), 4u);
  EXPECT_EQ(max_stage_cost({1, 1, 100, 1, 1, 1}, balanced_cuts({1, 1, 100, 1, 1, 1}, 3)), 100);
  EXPECT_THROW(balanced_cuts({1, 2, 3}, 4), InvalidArgument);
}

TEST(PipelinePartition, CutPointsAreChecked) {
  EXPECT_EQ(starts_from_cut_points({2, 5}, 3, 8), (std::vector<int64_t>{0, 2, 5, 8}));
  EXPECT_THROW(starts_from_cut_points({2}, 3, 8), InvalidArgument);     // too few
  EXPECT_THROW(starts_from_cut_points({5, 2}, 3, 8), InvalidArgument);  // not rising
  EXPECT_THROW(starts_from_cut_points({0, 5}, 3, 8), InvalidArgument);  // empty first stage
  EXPECT_THROW(starts_from_cut_points({2, 8}, 3, 8), InvalidArgument);  // empty last stage
}

TEST(PipelinePartition, StagesKeepTheModelsNamesAndTensors) {
  Generator gen(3);
  auto net = nn::make_net_sequential(gen);
  auto starts = starts_from_cut_points({6}, 2, static_cast<int64_t>(net->size()));
  auto first = make_stage(*net, starts, 0);
  auto second = make_stage(*net, starts, 1);
  std::vector<std::string> names;
  for (auto& [name, t] : second->named_parameters()) {
    names.push_back(name);
    EXPECT_TRUE(t.is_same(net->named_parameters().back().second) || name != "fc2.bias");
  }
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(first->named_parameters().front().first, "conv1.weight");
  // The stages together hold exactly the model's state.
  TensorDict all = first->state_dict();
  all.merge(second->state_dict());
  EXPECT_EQ(all.size(), net->state_dict().size());
  Tensor x = rand({2, 1, 28, 28}, gen);
  EXPECT_TRUE(equal(second->forward(first->forward(x)), net->forward(x)));
}

TEST(PipelinePartition, MeasuredCostsLeaveGradientsAlone) {
  Generator gen(4);
  auto mlp = nn::make_mlp(gen, {.width = 64, .hidden_layers = 2});
  Tensor sample = rand({4, 1, 28, 28}, gen);
  std::vector<double> costs = measure_layer_costs(*mlp, sample, 2);
  ASSERT_EQ(costs.size(), mlp->size());
  for (double c : costs) EXPECT_GE(c, 0.0);
  for (const Tensor& p : mlp->parameters()) EXPECT_FALSE(p.grad().defined());
  std::vector<int64_t> starts = balanced_cuts(costs, 3);
  EXPECT_EQ(starts.size(), 4u);
  EXPECT_EQ(starts.back(), static_cast<int64_t>(mlp->size()));
}

}  // namespace
}  // namespace cohort::parallel::pipeline
