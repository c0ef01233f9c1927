#include "cohort/parallel/parameter_server/shard_assignment.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cohort/nn/models/net.h"
#include "cohort/nn/models/sequential_models.h"

namespace cohort::parallel {
namespace {

void expect_consistent(const ShardAssignment& a, const std::vector<size_t>& bytes) {
  ASSERT_EQ(a.server_of.size(), bytes.size());
  std::vector<size_t> sum(a.params_of.size(), 0);
  size_t placed = 0;
  for (size_t s = 0; s < a.params_of.size(); ++s) {
    EXPECT_TRUE(std::is_sorted(a.params_of[s].begin(), a.params_of[s].end()));
    for (size_t i : a.params_of[s]) {
      EXPECT_EQ(a.server_of[i], static_cast<int>(s));
      sum[s] += bytes[i];
      ++placed;
    }
    EXPECT_EQ(sum[s], a.bytes_of[s]) << "server " << s;
  }
  EXPECT_EQ(placed, bytes.size());
}

TEST(ShardAssignment, GreedyLargestFirstIntoTheLightestServer) {
  // 7, 5, 4, 3, 1 over 2 servers: 7 -> s0, 5 -> s1, 4 -> s1 (9), 3 -> s0 (10), 1 -> s1 (10).
  std::vector<size_t> bytes = {3, 7, 1, 5, 4};
  auto a = assign_shards(bytes, 2);
  expect_consistent(a, bytes);
  EXPECT_EQ(a.server_of, (std::vector<int>{0, 0, 1, 1, 1}));
  EXPECT_EQ(a.bytes_of, (std::vector<size_t>{10, 10}));
}

TEST(ShardAssignment, TiesGoToTheLowerIndexAndServer) {
  auto a = assign_shards(std::vector<size_t>{4, 4, 4, 4}, 3);
  EXPECT_EQ(a.server_of, (std::vector<int>{0, 1, 2, 0}));
}

TEST(ShardAssignment, BalancesBytesOnRandomSizes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int servers = 1 + trial % 5;
    std::vector<size_t> bytes(5 + static_cast<size_t>(rng() % 40));
    for (auto& b : bytes) b = 4 * (1 + rng() % 10000);
    auto a = assign_shards(bytes, servers);
    expect_consistent(a, bytes);
    // LPT: the heaviest server exceeds the mean by at most the largest tensor.
    const size_t largest = *std::max_element(bytes.begin(), bytes.end());
    EXPECT_LE(a.max_bytes(), a.total_bytes() / static_cast<size_t>(servers) + largest);
    // Deterministic: the same input gives the same assignment.
    EXPECT_EQ(assign_shards(bytes, servers).server_of, a.server_of);
  }
}

TEST(ShardAssignment, MlpLayersSpreadEvenly) {
  Generator gen(1);
  auto mlp = nn::make_mlp(gen, {.width = 256, .hidden_layers = 4});
  auto params = mlp->named_parameters();
  auto a = assign_shards(params, 2);
  // 784x256 + 3 x 256x256 + 256x10 (+ biases): the two halves within 20%.
  const double lo = static_cast<double>(*std::min_element(a.bytes_of.begin(), a.bytes_of.end()));
  EXPECT_GT(lo / static_cast<double>(a.max_bytes()), 0.8) << describe(a, params);
  // Same model built again (another process would): same assignment.
  Generator gen2(99);
  EXPECT_EQ(
      assign_shards(nn::make_mlp(gen2, {.width = 256, .hidden_layers = 4})->named_parameters(), 2)
          .server_of,
      a.server_of);
}

TEST(ShardAssignment, NetsBigLinearLayerSitsAlone) {
  Generator gen(1);
  nn::Net net(gen);
  auto params = net.named_parameters();
  auto a = assign_shards(params, 2);
  // fc1.weight (2000x50 floats, 400 KB) is most of Net: one server holds it alone.
  size_t fc1 = 0;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].first == "fc1.weight") fc1 = i;
  const int s = a.server_of[fc1];
  EXPECT_EQ(a.params_of[static_cast<size_t>(s)], std::vector<size_t>{fc1}) << describe(a, params);
  EXPECT_EQ(a.max_bytes(), params[fc1].second.nbytes());
}

TEST(ShardAssignment, MoreServersThanParametersLeavesSomeEmpty) {
  auto a = assign_shards(std::vector<size_t>{8, 4}, 4);
  EXPECT_EQ(a.server_of, (std::vector<int>{0, 1}));
  EXPECT_TRUE(a.params_of[2].empty());
  EXPECT_TRUE(a.params_of[3].empty());
  EXPECT_THROW(assign_shards(std::vector<size_t>{8}, 0), InvalidArgument);
}

}  // namespace
}  // namespace cohort::parallel
