// A small DDP program built against an installed cohort: ToyModel under
// DistributedDataParallel, a few SGD steps on each rank's own random batch.
// Run it under the launcher, which sets RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT:
//
//   <prefix>/bin/cohort run --nproc-per-node 2 -- ./consumer
//
// Each rank prints its loss per step and, at the end, a checksum of its
// parameters, which DDP keeps the same on every rank.
#include <cstdio>
#include <exception>
#include <memory>

#include "cohort/base/config.h"
#include "cohort/cohort.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;

int main() {
  try {
    auto pg = distributed::init_process_group("native", "env://");
    const int rank = pg->rank();
    // num_threads() comes with cohort/cohort.h.
    std::printf("consumer: cohort %s, rank %d of %d, %d threads\n", COHORT_VERSION, rank,
                pg->size(), num_threads());

    Generator gen(static_cast<uint64_t>(rank));  // different weights: DDP broadcasts rank 0's
    auto model = std::make_shared<nn::ToyModel>(gen);
    parallel::DistributedDataParallel ddp_model(model, pg);
    optim::SGD optimizer(ddp_model.parameters(), {.lr = 0.05});
    const Tensor inputs = randn({20, 10}, gen);  // this rank's shard of the data
    const Tensor labels = randn({20, 5}, gen);
    for (int step = 0; step < 5; ++step) {
      optimizer.zero_grad();
      Tensor loss = mse_loss(ddp_model.forward(inputs), labels);
      loss.backward();  // gradients averaged over the ranks
      optimizer.step();
      std::printf("rank %d step %d loss %.6f\n", rank, step, loss.item<double>());
    }
    double checksum = 0;
    for (const Tensor& p : ddp_model.parameters()) {
      for (float v : p.to_vector<float>()) checksum += v;
    }
    std::printf("rank %d parameters checksum %.6f\n", rank, checksum);
    std::fflush(stdout);
    distributed::destroy_process_group(pg);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
