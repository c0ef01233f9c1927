// Join with DistributedDataParallel (uneven inputs), real processes: ranks
// with different numbers of batches, and batches of different sizes, end
// with the same parameters on every rank, equal to one process applying
// PyTorch's gradient (each step: the sum over the ranks still training of
// their mean-loss gradients, divided by the initial world size, or by the
// number still training with divide_by_initial_world_size false);
// throw_on_early_termination makes every rank throw, naming the rank that
// ran out.
#include <gtest/gtest.h>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"
#include "cohort/parallel/join.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<distributed::ProcessGroup> join_group() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

nn::ModulePtr make_model(bool batch_norm) {
  Generator gen(21);
  std::vector<nn::ModulePtr> layers = {std::make_shared<nn::Linear>(6, 8, gen)};
  if (batch_norm) layers.push_back(std::make_shared<nn::BatchNorm1d>(8));
  layers.push_back(std::make_shared<nn::ReLU>());
  layers.push_back(std::make_shared<nn::Linear>(8, 2, gen));
  return std::make_shared<nn::Sequential>(layers);
}

// Rank r's batch s: 3 + r rows (sizes differ per rank).
std::pair<Tensor, Tensor> batch(int r, int s) {
  Generator g(1000 + 100 * static_cast<uint64_t>(r) + static_cast<uint64_t>(s));
  return {randn({3 + r, 6}, g), randn({3 + r, 2}, g)};
}

struct Uneven {
  std::vector<int> batches;  // per rank
  bool divide_by_initial_world_size = true;
};

void check_equal(const nn::Module& got, const nn::Module& want, int rank, const std::string& what) {
  auto g = got.named_parameters(), w = want.named_parameters();
  for (size_t i = 0; i < g.size(); ++i)
    if (!allclose(g[i].second, w[i].second, 1e-5, 1e-6))
      throw Error(fmt::format("rank {}: {}: parameter {} differs from one process's", rank, what,
                              g[i].first));
}

void run_uneven(int rank, const Uneven& u) {
  auto pg = join_group();
  const int world = pg->size();
  auto model = make_model(false);
  auto ref = model->clone();
  DistributedDataParallel ddp(model, pg);
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  {
    Join join({&ddp}, {.divide_by_initial_world_size = u.divide_by_initial_world_size});
    for (int s = 0; s < u.batches[rank]; ++s) {
      auto [x, y] = batch(rank, s);
      opt.zero_grad();
      mse_loss(ddp.forward(x), y).backward();
      opt.step();
    }
    join.finish();
  }
  // One process: every step of the longest rank.
  optim::SGD opt_ref(ref->parameters(), {.lr = 0.05, .momentum = 0.9});
  const int steps = *std::max_element(u.batches.begin(), u.batches.end());
  for (int s = 0; s < steps; ++s) {
    int training = 0;
    for (int r = 0; r < world; ++r) training += s < u.batches[r];
    const double divisor = u.divide_by_initial_world_size ? world : training;
    opt_ref.zero_grad();
    Tensor total;
    for (int r = 0; r < world; ++r) {
      if (s >= u.batches[r]) continue;
      auto [x, y] = batch(r, s);
      Tensor l = mse_loss(ref->forward(x), y);
      total = total.defined() ? add(total, l) : l;
    }
    mul(total, 1.0 / divisor).backward();
    opt_ref.step();
  }
  check_equal(*model, *ref, rank, fmt::format("{} ranks, uneven inputs", world));
  distributed::destroy_process_group(pg);
}

TEST(DDPJoin, UnevenBatchCountsMatchOneProcess) {
  spawn([](int rank) { run_uneven(rank, {.batches = {5, 3}}); }, 2);
}

TEST(DDPJoin, RankZeroRunningOutFirstMatchesOneProcess) {
  spawn([](int rank) { run_uneven(rank, {.batches = {2, 4, 3}}); }, 3);
}

TEST(DDPJoin, DivideByRanksStillTrainingMatchesOneProcess) {
  spawn(
      [](int rank) {
        run_uneven(rank, {.batches = {2, 4}, .divide_by_initial_world_size = false});
      },
      2);
}

TEST(DDPJoin, BuffersAndUnusedParametersStayInStep) {
  // BatchNorm's buffers are broadcast every synchronised forward and the
  // unused-parameter bitmap all-reduced every backward: a joined rank shadows
  // both, and at the end every rank holds the last rank's model.
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto model = make_model(true);
        DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
        optim::SGD opt(ddp.parameters(), {.lr = 0.05});
        run_joined({&ddp}, {}, [&] {
          for (int s = 0; s < 2 + 3 * rank; ++s) {
            auto [x, y] = batch(rank, s);
            opt.zero_grad();
            mse_loss(ddp.forward(x), y).backward();
            opt.step();
          }
        });
        // Every rank's parameters and buffers equal rank 1's (the last joiner).
        std::vector<Tensor> state = model->parameters();
        for (const Tensor& b : model->buffers()) state.push_back(b);
        for (Tensor& t : state) {
          Tensor mine = t.clone(), theirs = t.clone();
          pg->broadcast(theirs, {.root = 1});
          if (!equal(mine, theirs)) throw Error(fmt::format("rank {}: state differs", rank));
        }
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPJoin, ThrowOnEarlyTerminationStopsEveryRankNamingTheOneOut) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto model = make_model(false);
        DistributedDataParallel ddp(model, pg);
        optim::SGD opt(ddp.parameters(), {.lr = 0.05});
        std::string message;
        try {
          Join join({&ddp}, {.throw_on_early_termination = true});
          for (int s = 0; s < (rank == 1 ? 2 : 5); ++s) {
            auto [x, y] = batch(rank, s);
            opt.zero_grad();
            mse_loss(ddp.forward(x), y).backward();
            opt.step();
          }
          join.finish();
        } catch (const Error& e) {
          message = e.what();
        }
        if (message.find("rank(s) 1 ran out of inputs") == std::string::npos)
          throw Error(
              fmt::format("rank {}: expected an error naming rank 1, got '{}'", rank, message));
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPJoin, RefusesJoinablesOnDifferentGroupsAndADoubleFinish) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto a = make_model(false), b = make_model(false);
        DistributedDataParallel da(a, pg);
        auto other = pg->new_group({0, 1});
        DistributedDataParallel db(b, other);
        bool refused = false;
        try {
          Join join({&da, &db});
        } catch (const InvalidArgument&) {
          refused = true;
        }
        if (!refused) throw Error(fmt::format("rank {}: two groups were accepted", rank));
        Join join({&da});
        join.finish();
        refused = false;
        try {
          join.finish();
        } catch (const InvalidArgument&) {
          refused = true;
        }
        if (!refused) throw Error(fmt::format("rank {}: finish() twice was accepted", rank));
        distributed::destroy_process_group(pg);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel
