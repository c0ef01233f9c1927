// DistributedDataParallel's forward-time rules as PyTorch's, real processes:
// buffers are broadcast from rank 0 on a forward that follows a synchronised
// one (not in no_sync accumulation forwards after the first), not at all with
// broadcast_buffers = false; parameters and buffers named in
// params_and_buffers_to_ignore are neither broadcast nor reduced; a model
// with nothing to train, and an ignored name the model lacks, are refused.
#include <gtest/gtest.h>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/parallel/distributed_data_parallel.h"

namespace cohort::parallel {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<distributed::ProcessGroup> join_group() {
  return distributed::init_process_group("native", "env://", -1, -1, 60s);
}

// Linear then BatchNorm1d: "0.weight", "0.bias", "1.weight", "1.bias" and
// the buffers "1.running_mean", "1.running_var", "1.num_batches_tracked".
std::shared_ptr<nn::Sequential> make_model() {
  Generator gen(8);
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 4, gen), std::make_shared<nn::BatchNorm1d>(4)});
}

Tensor data_of(int rank, int step) {
  Generator g(100 + 10 * static_cast<uint64_t>(rank) + static_cast<uint64_t>(step));
  return mul(randn({6, 4}, g), 1.0 + rank);
}

// Whether this rank's running_mean equals rank 0's.
bool same_as_rank0(distributed::ProcessGroup& pg, const nn::Module& m) {
  Tensor mean = m.named_buffers()[0].second.clone();
  Tensor theirs = mean.clone();
  pg.broadcast(theirs, {.root = 0});
  return equal(mean, theirs);
}

TEST(DDPForward, BuffersBroadcastOncePerSynchronisedStepNotInNoSync) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto model = make_model();
        DistributedDataParallel ddp(model, pg);
        // Forward 1 (synchronised) starts with a broadcast, then each rank
        // updates its statistics with its own data.
        sum(ddp.forward(data_of(rank, 0))).backward();
        {
          auto guard = ddp.no_sync();
          // Forward 2 follows a synchronised one: broadcasts. Then no_sync
          // forward 3 follows a no_sync one: keeps this rank's statistics.
          sum(ddp.forward(data_of(rank, 1))).backward();
          const bool after_first = same_as_rank0(*pg, *model);
          sum(ddp.forward(data_of(rank, 2))).backward();
          if (rank == 1 && after_first)
            throw Error("rank 1: statistics equal rank 0's after its own forward");
        }
        // Forward 4 (synchronised) follows a no_sync one: no broadcast, so
        // rank 1 still has its own statistics.
        model->eval();
        ddp.forward(data_of(rank, 3));
        const bool broadcast = same_as_rank0(*pg, *model);  // collective: on every rank
        if (rank == 1 && broadcast)
          throw Error("rank 1: buffers were broadcast at a forward that follows a no_sync one");
        model->train();
        sum(ddp.forward(data_of(rank, 4))).backward();  // synchronised
        model->eval();
        ddp.forward(data_of(rank, 5));  // follows it: broadcast, eval changes nothing
        if (!same_as_rank0(*pg, *model))
          throw Error(fmt::format("rank {}: buffers are not rank 0's after a synced step", rank));
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPForward, BroadcastBuffersFalseKeepsEachRanksStatistics) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto model = make_model();
        DistributedDataParallel ddp(model, pg, {.broadcast_buffers = false});
        for (int s = 0; s < 3; ++s) sum(ddp.forward(data_of(rank, s))).backward();
        const bool broadcast = same_as_rank0(*pg, *model);  // collective: on every rank
        if (rank == 1 && broadcast)
          throw Error("rank 1: buffers were broadcast with broadcast_buffers = false");
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPForward, IgnoredParametersAndBuffersAreNeitherBroadcastNorReduced) {
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto model = make_model();
        // A different 1.weight per rank, which DDP must leave alone.
        model->named_parameters()[2].second.detach().fill_(1.0 + rank);
        DistributedDataParallel ddp(
            model, pg,
            {.params_and_buffers_to_ignore = {"1.weight", "1.running_mean", "1.running_var",
                                              "1.num_batches_tracked"}});
        if (model->named_parameters()[2].second.to_vector<float>()[0] != 1.0f + rank)
          throw Error(fmt::format("rank {}: the ignored 1.weight was broadcast", rank));
        sum(ddp.forward(data_of(rank, 0))).backward();
        // Its gradient is this rank's own; the reduced 0.weight's is the average.
        Tensor g = model->named_parameters()[2].second.grad();
        Tensor mine = g.clone(), theirs = g.clone();
        pg->broadcast(theirs, {.root = 0});
        if (rank == 1 && equal(mine, theirs))
          throw Error("rank 1: the ignored 1.weight's gradient was reduced");
        if (ddp.reducer().bucket_parameter_names().size() != 1 ||
            ddp.reducer().bucket_parameter_names()[0].size() != 3)
          throw Error(fmt::format("rank {}: the reducer holds an ignored parameter", rank));
        const bool broadcast = same_as_rank0(*pg, *model);  // collective: on every rank
        if (rank == 1 && broadcast) throw Error("rank 1: the ignored buffers were broadcast");
        distributed::destroy_process_group(pg);
      },
      2);
}

TEST(DDPForward, RefusesAModelWithNothingToTrainAndUnknownIgnoredNames) {
  // Refused before any collective, on every rank.
  spawn(
      [](int rank) {
        auto pg = join_group();
        auto frozen = make_model();
        for (Tensor& p : frozen->parameters()) p.set_requires_grad(false);
        auto refused = [&](const std::function<void()>& make, const std::string& want) {
          try {
            make();
          } catch (const InvalidArgument& e) {
            if (std::string(e.what()).find(want) != std::string::npos) return;
            throw Error(fmt::format("rank {}: wrong message: {}", rank, e.what()));
          }
          throw Error(fmt::format("rank {}: accepted, expected an error with '{}'", rank, want));
        };
        refused([&] { DistributedDataParallel ddp(frozen, pg); },
                "no parameter that requires a gradient");
        refused(
            [&] {
              DistributedDataParallel ddp(make_model(), pg,
                                          {.params_and_buffers_to_ignore = {"fc9.bias"}});
            },
            "'fc9.bias'");
        distributed::destroy_process_group(pg);
      },
      2);
}

}  // namespace
}  // namespace cohort::parallel
