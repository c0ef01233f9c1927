// Tensor parallelism with real processes (cohort::spawn), over 2 and 4 ranks:
// the parallel layers give nn::Linear's outputs and gradients; the split Net
// and MLP, trained with clip_grad_norm_tensor_parallel, follow single-process
// training with the same batches (losses, norms and full_state_dict against
// the reference's state_dict, to float32 tolerance); full state dicts move
// between a split model, the single-process model and a split model of
// another group size; misfit sizes are errors naming the numbers. Each rank
// computes its reference itself and throws on a mismatch, which spawn
// reports as the failed rank.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cohort/base/cpu.h"
#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/models/net.h"
#include "cohort/nn/models/sequential_models.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/tensor_parallel/clip_grad_tensor_parallel.h"
#include "cohort/parallel/tensor_parallel/column_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/full_state_dict.h"
#include "cohort/parallel/tensor_parallel/mappings.h"
#include "cohort/parallel/tensor_parallel/parallel_mlp.h"
#include "cohort/parallel/tensor_parallel/row_parallel_linear.h"
#include "cohort/parallel/tensor_parallel/tensor_parallel_models.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;
using distributed::ProcessGroup;

std::shared_ptr<ProcessGroup> join() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

void check_close(const Tensor& got, const Tensor& want, int rank, const std::string& what,
                 double rtol = 1e-4, double atol = 1e-5) {
  if (got.sizes() != want.sizes())
    throw Error(fmt::format("rank {}: {}: shape {} differs from the reference's {}", rank, what,
                            shape_str(got.sizes()), shape_str(want.sizes())));
  if (!allclose(got, want, rtol, atol)) {
    std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::fabs(a[k] - b[k]));
    throw Error(
        fmt::format("rank {}: {} differs from the reference (max |diff| {})", rank, what, worst));
  }
}

void check_dicts(const TensorDict& got, const TensorDict& want, int rank, const std::string& what,
                 double rtol = 1e-4, double atol = 1e-5) {
  if (got.keys() != want.keys())
    throw Error(fmt::format("rank {}: {}: keys [{}] differ from the reference's [{}]", rank, what,
                            fmt::join(got.keys(), ", "), fmt::join(want.keys(), ", ")));
  for (const auto& [key, t] : got) check_close(t, want.at(key), rank, what + " " + key, rtol, atol);
}

// Runs fn on every rank of a fresh world group of `world` processes.
void on_ranks(int world, const std::function<void(int rank, std::shared_ptr<ProcessGroup>)>& fn) {
  spawn(
      [&](int rank) {
        auto pg = join();
        fn(rank, pg);
        distributed::destroy_process_group(pg);
      },
      world);
}

// ---- the layers against nn::Linear ----

// Forward y = layer(x) and backward of sum(y * probe) on both the reference
// (full) and the parallel layer; returns {y, x.grad} of each.
struct Pass {
  Tensor y, x_grad;
};
Pass run_pass(nn::Module& layer, const Tensor& x_value, const Tensor& probe) {
  Tensor x = x_value.clone().set_requires_grad(true);
  Tensor y = layer.forward(x);
  sum(mul(y, probe)).backward();
  return {y.detach(), x.grad()};
}

void column_matches_linear(int rank, std::shared_ptr<ProcessGroup> tp) {
  const int p = tp->size();
  Generator gen(7);
  nn::Linear full(12, 8, gen);
  Tensor x = rand({5, 12}, gen);
  Tensor probe = rand({5, 8}, gen);
  Pass ref = run_pass(full, x, probe);
  for (bool gather : {true, false}) {
    auto col = ColumnParallelLinear::from_full(full, tp, {.gather_output = gather});
    const std::string mode = gather ? "gather_output" : "sharded output";
    Pass got = run_pass(*col, x, gather ? probe : shard_along_dim(probe, 1, rank, p));
    check_close(got.y, gather ? ref.y : shard_along_dim(ref.y, 1, rank, p), rank,
                "column " + mode + " output");
    // Each rank's x.grad covers only its rows of W until copy-to-region's all-reduce.
    check_close(got.x_grad, ref.x_grad, rank, "column " + mode + " input grad");
    check_close(col->weight().grad(), shard_along_dim(full.weight().grad(), 0, rank, p), rank,
                "column " + mode + " weight grad");
    check_close(col->bias().grad(), shard_along_dim(full.bias().grad(), 0, rank, p), rank,
                "column " + mode + " bias grad");
    check_dicts(full_state_dict(*col, *tp), full.state_dict(), rank, "column full_state_dict", 0,
                0);
  }
  // The Generator constructor draws what nn::Linear draws.
  Generator g1(11), g2(11);
  nn::Linear want(6, 4 * p, g1);
  ColumnParallelLinear drawn(6, 4 * p, tp, g2);
  check_dicts(full_state_dict(drawn, *tp), want.state_dict(), rank, "column drawn", 0, 0);
}

void row_matches_linear(int rank, std::shared_ptr<ProcessGroup> tp) {
  const int p = tp->size();
  Generator gen(8);
  nn::Linear full(16, 6, gen);
  Tensor x = rand({5, 16}, gen);
  Tensor probe = rand({5, 6}, gen);
  Pass ref = run_pass(full, x, probe);
  for (bool parallel_input : {false, true}) {
    auto row = RowParallelLinear::from_full(full, tp, {.input_is_parallel = parallel_input});
    const std::string mode = parallel_input ? "parallel input" : "full input";
    Pass got = run_pass(*row, parallel_input ? shard_along_dim(x, 1, rank, p) : x, probe);
    check_close(got.y, ref.y, rank, "row " + mode + " output");
    check_close(got.x_grad, parallel_input ? shard_along_dim(ref.x_grad, 1, rank, p) : ref.x_grad,
                rank, "row " + mode + " input grad");
    check_close(row->weight().grad(), shard_along_dim(full.weight().grad(), 1, rank, p), rank,
                "row " + mode + " weight grad");
    check_close(row->bias().grad(), full.bias().grad(), rank, "row " + mode + " bias grad");
    check_dicts(full_state_dict(*row, *tp), full.state_dict(), rank, "row full_state_dict", 0, 0);
  }
  Generator g1(12), g2(12);
  nn::Linear want(4 * p, 3, g1);
  RowParallelLinear drawn(4 * p, 3, tp, g2);
  check_dicts(full_state_dict(drawn, *tp), want.state_dict(), rank, "row drawn", 0, 0);
}

void mlp_block_matches_linears(int rank, std::shared_ptr<ProcessGroup> tp) {
  const int p = tp->size();
  Generator gen(9);
  nn::Linear fc1(10, 16, gen), fc2(16, 6, gen);
  Tensor x = rand({4, 10}, gen);
  Tensor probe = rand({4, 6}, gen);
  Tensor xr = x.clone().set_requires_grad(true);
  sum(mul(fc2.forward(gelu(fc1.forward(xr))), probe)).backward();
  Tensor want_y = fc2.forward(gelu(fc1.forward(x))).detach();
  auto mlp = ParallelMLP::from_full(fc1, fc2, tp, {.activation = MlpActivation::kGelu});
  Pass got = run_pass(*mlp, x, probe);
  check_close(got.y, want_y, rank, "ParallelMLP output");
  check_close(got.x_grad, xr.grad(), rank, "ParallelMLP input grad");
  check_close(mlp->fc1().weight().grad(), shard_along_dim(fc1.weight().grad(), 0, rank, p), rank,
              "ParallelMLP fc1 weight grad");
  check_close(mlp->fc2().weight().grad(), shard_along_dim(fc2.weight().grad(), 1, rank, p), rank,
              "ParallelMLP fc2 weight grad");
  check_close(mlp->fc2().bias().grad(), fc2.bias().grad(), rank, "ParallelMLP fc2 bias grad");
  // The Generator constructor: fc1 then fc2, as two nn::Linear.
  Generator g1(13), g2(13);
  nn::Linear w1(5, 4 * p, g1), w2(4 * p, 3, g1);
  ParallelMLP drawn(5, 4 * p, 3, tp, g2);
  TensorDict want;
  want.merge(w1.state_dict(), "fc1.");
  want.merge(w2.state_dict(), "fc2.");
  check_dicts(full_state_dict(drawn, *tp), want, rank, "ParallelMLP drawn", 0, 0);
}

TEST(TensorParallel, ColumnParallelLinearMatchesLinearOnTwoRanks) {
  on_ranks(2, column_matches_linear);
}
TEST(TensorParallel, ColumnParallelLinearMatchesLinearOnFourRanks) {
  on_ranks(4, column_matches_linear);
}
TEST(TensorParallel, RowParallelLinearMatchesLinearOnTwoRanks) { on_ranks(2, row_matches_linear); }
TEST(TensorParallel, RowParallelLinearMatchesLinearOnFourRanks) { on_ranks(4, row_matches_linear); }
TEST(TensorParallel, ParallelMLPMatchesTwoLinearsOnTwoRanks) {
  on_ranks(2, mlp_block_matches_linears);
}
TEST(TensorParallel, ParallelMLPMatchesTwoLinearsOnFourRanks) {
  on_ranks(4, mlp_block_matches_linears);
}

// ---- training against single-process training ----

constexpr int kSteps = 5;
constexpr int64_t kBatch = 16;
// Small enough that the first steps clip, so a wrong norm changes the weights.
constexpr double kMaxNorm = 0.1;

std::pair<Tensor, Tensor> batch_of(int step) {
  Generator gen(500 + static_cast<uint64_t>(step));
  return {rand({kBatch, 1, 28, 28}, gen), randint(0, 10, {kBatch}, gen)};
}

struct Trace {
  std::vector<double> losses, norms;
};

// Trains `model` kSteps with SGD; clip(model) clips and returns the norm.
Trace train(nn::Module& model, const std::function<double(nn::Module&)>& clip) {
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch_of(s);
    opt.zero_grad();
    Tensor loss = nll_loss(model.forward(x), y);
    loss.backward();
    t.norms.push_back(clip(model));
    t.losses.push_back(loss.item<double>());
    opt.step();
  }
  return t;
}

void check_training(const nn::Module& full_model, nn::Module& tp_model, ProcessGroup& tp, int rank,
                    const std::string& what) {
  auto reference = full_model.clone();
  Trace want = train(*reference,
                     [](nn::Module& m) { return optim::clip_grad_norm(m.parameters(), kMaxNorm); });
  Trace got = train(
      tp_model, [&tp](nn::Module& m) { return clip_grad_norm_tensor_parallel(m, kMaxNorm, tp); });
  if (!(want.norms[0] > kMaxNorm))
    throw Error(
        fmt::format("rank {}: {}: the first norm {} does not clip; the test would not see "
                    "a wrong norm",
                    rank, what, want.norms[0]));
  for (int s = 0; s < kSteps; ++s) {
    if (std::fabs(got.losses[s] - want.losses[s]) > 1e-4 * (1 + std::fabs(want.losses[s])) ||
        std::fabs(got.norms[s] - want.norms[s]) > 1e-4 * (1 + want.norms[s]))
      throw Error(
          fmt::format("rank {}: {}: step {}: loss {} norm {}, single process: loss {} norm {}",
                      rank, what, s, got.losses[s], got.norms[s], want.losses[s], want.norms[s]));
  }
  check_dicts(full_state_dict(tp_model, tp), reference->state_dict(), rank,
              what + " after training", 1e-3, 1e-5);
}

void net_trains_as_one_process(int rank, std::shared_ptr<ProcessGroup> tp) {
  KernelPathGuard exact_kernels(KernelPath::kBaseline);
  Generator gen(42);
  nn::Net full(gen);
  auto model = make_tensor_parallel_net(full, tp);
  if (model->state_dict().keys() != full.state_dict().keys())
    throw Error(fmt::format("rank {}: the split Net's keys differ from Net's", rank));
  check_training(full, *model, *tp, rank, "tensor-parallel Net");
}

void mlp_trains_as_one_process(int rank, std::shared_ptr<ProcessGroup> tp) {
  Generator gen(43);
  auto full = nn::make_mlp(gen, {.width = 64, .hidden_layers = 4});
  auto model = make_tensor_parallel_mlp(*full, tp);
  // Linear children 1, 3, 5, 7, 9: (1, 3) and (5, 7) pair up, 9 stays whole.
  if (model->at<ColumnParallelLinear>(1).gather_output() ||
      !model->at<RowParallelLinear>(3).input_is_parallel() ||
      model->at<nn::Linear>(9).out_features() != 10)
    throw Error(fmt::format("rank {}: the MLP was not split as column/row pairs", rank));
  (void)model->at<ColumnParallelLinear>(5);
  (void)model->at<RowParallelLinear>(7);
  check_training(*full, *model, *tp, rank, "tensor-parallel MLP");
}

TEST(TensorParallel, NetTrainsAsOneProcessOnTwoRanks) { on_ranks(2, net_trains_as_one_process); }

// Net's fc1 has 50 outputs, which 4 ranks cannot split: two tensor-parallel
// groups of 2 inside a world of 4 (each group trains the same model).
TEST(TensorParallel, NetTrainsAsOneProcessInTwoGroupsOfTwo) {
  on_ranks(4, [](int rank, std::shared_ptr<ProcessGroup> world) {
    auto g01 = world->new_group({0, 1});
    auto g23 = world->new_group({2, 3});
    auto tp = g01 ? g01 : g23;
    net_trains_as_one_process(rank, tp);
  });
}

TEST(TensorParallel, MlpTrainsAsOneProcessOnTwoRanks) { on_ranks(2, mlp_trains_as_one_process); }
TEST(TensorParallel, MlpTrainsAsOneProcessOnFourRanks) { on_ranks(4, mlp_trains_as_one_process); }

// ---- full state dicts ----

TEST(TensorParallel, FullStateDictMovesBetweenGroupSizes) {
  on_ranks(4, [](int rank, std::shared_ptr<ProcessGroup> world) {
    auto g01 = world->new_group({0, 1});
    auto g23 = world->new_group({2, 3});
    auto pair = g01 ? g01 : g23;
    Generator gen(44);
    auto original = nn::make_mlp(gen, {.width = 64, .hidden_layers = 2});
    auto tp4 = make_tensor_parallel_mlp(*original, world);
    // Move the split model away from the original so that a load is seen.
    {
      NoGradGuard no_grad;
      for (Tensor& p : tp4->parameters()) p.mul_(0.5);
    }
    TensorDict full = full_state_dict(*tp4, *world);
    if (full.keys() != original->state_dict().keys())
      throw Error(fmt::format("rank {}: full_state_dict keys [{}] are not the MLP's", rank,
                              fmt::join(full.keys(), ", ")));

    // Into the single-process model (another seed).
    Generator other(45);
    auto single = nn::make_mlp(other, {.width = 64, .hidden_layers = 2});
    single->load_state_dict(full);
    TensorDict halved;
    for (const auto& [k, t] : original->state_dict()) halved.insert(k, mul(t, 0.5));
    check_dicts(single->state_dict(), halved, rank, "single-process model loaded", 0, 0);

    // Into a split model of group size 2 (built from yet another model).
    Generator third(46);
    auto tp2 =
        make_tensor_parallel_mlp(*nn::make_mlp(third, {.width = 64, .hidden_layers = 2}), pair);
    load_full_state_dict(*tp2, full, *pair);
    check_dicts(full_state_dict(*tp2, *pair), full, rank, "size-2 split model", 0, 0);
    Generator data(47);
    Tensor x = rand({3, 1, 28, 28}, data);
    check_close(tp2->forward(x), single->forward(x), rank, "size-2 split model output");
    check_close(tp4->forward(x), single->forward(x), rank, "size-4 split model output");

    // A dict of another width: the error names the key and both shapes.
    Generator fourth(48);
    auto wide = nn::make_mlp(fourth, {.width = 128, .hidden_layers = 2});
    try {
      load_full_state_dict(*tp4, wide->state_dict(), *world);
      throw Error(fmt::format("rank {}: loading a width-128 dict did not fail", rank));
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      if (m.find("'1.weight'") == std::string::npos || m.find("[128, 784]") == std::string::npos ||
          m.find("[64, 784]") == std::string::npos ||
          m.find(fmt::format("rank {}", rank)) == std::string::npos)
        throw Error(fmt::format("rank {}: unhelpful shape error: {}", rank, m));
    }
  });
}

// ---- errors ----

void expect_invalid(const std::function<void()>& fn, const std::vector<std::string>& words,
                    int rank, const std::string& what) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    for (const std::string& w : words)
      if (m.find(w) == std::string::npos)
        throw Error(fmt::format("rank {}: {}: message lacks '{}': {}", rank, what, w, m));
    return;
  }
  throw Error(fmt::format("rank {}: {} did not throw InvalidArgument", rank, what));
}

TEST(TensorParallel, FeaturesNotDivisibleByTheGroupAreErrors) {
  on_ranks(4, [](int rank, std::shared_ptr<ProcessGroup> tp) {
    const std::string r = fmt::format("rank {}", rank);
    Generator gen(1);
    nn::Linear l(6, 10, gen);
    expect_invalid([&] { ColumnParallelLinear::from_full(l, tp); },
                   {"out_features 10", "size 4", r}, rank, "column 10 over 4");
    expect_invalid([&] { RowParallelLinear::from_full(l, tp); }, {"in_features 6", "size 4", r},
                   rank, "row 6 over 4");
    expect_invalid([&] { ColumnParallelLinear(8, 6, tp, gen); }, {"out_features 6", "size 4", r},
                   rank, "drawn column 6 over 4");
    nn::Net net(gen);
    expect_invalid([&] { make_tensor_parallel_net(net, tp); }, {"out_features 50", "size 4", r},
                   rank, "Net over 4");
    // The group still works after the failed constructions.
    Tensor t = Tensor::ones({3});
    tp->all_reduce(t, {});
    if (t.to_vector<float>() != std::vector<float>{4, 4, 4})
      throw Error(fmt::format("rank {}: all_reduce after errors gave {}", rank, to_string(t)));
  });
}

// A peer that leaves the group while the others run a layer: their forward
// fails with the group's error (naming the rank) instead of hanging.
TEST(TensorParallel, GroupFailureReachesTheCaller) {
  on_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> tp) {
    Generator gen(2);
    nn::Linear l(8, 4, gen);
    auto row = RowParallelLinear::from_full(l, tp, {.input_is_parallel = false});
    if (rank == 1) {
      tp->abort("leaving on purpose");
      return;
    }
    try {
      row->forward(rand({2, 8}, gen));
    } catch (const Error& e) {
      const std::string m = e.what();
      if (m.find("rank 0") == std::string::npos ||
          m.find("leaving on purpose") == std::string::npos)
        throw Error(fmt::format("rank 0: the failure does not name the rank and cause: {}", m));
      return;
    }
    throw Error("rank 0: forward succeeded without its peer");
  });
}

}  // namespace
}  // namespace cohort::parallel
