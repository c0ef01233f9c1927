// The basic example of PyTorch's DDP tutorial ("Getting Started with
// Distributed Data Parallel", demo_basic) in C++: ToyModel wrapped in
// DistributedDataParallel, one SGD step on random data, run as N processes
// by cohort::spawn (torch.multiprocessing.spawn).
//
//   build-*/examples/ddp_basic [world_size]      (default 2)
//
// Under `cohort run --nproc-per-node N build-*/examples/ddp_basic --launched`
// the launcher starts the processes instead and each runs demo_basic once.
#include <cstdio>
#include <cstring>
#include <string>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;

void demo_basic() {
  // setup(): RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from spawn or cohort run.
  auto pg = distributed::init_process_group("native", "env://");
  int rank = pg->rank();
  std::printf("Running basic DDP example on rank %d.\n", rank);
  std::fflush(stdout);

  Generator gen(static_cast<uint64_t>(rank));  // different weights: DDP broadcasts rank 0's
  auto model = std::make_shared<nn::ToyModel>(gen);
  parallel::DistributedDataParallel ddp_model(model, pg);

  optim::SGD optimizer(ddp_model.parameters(), {.lr = 0.001});
  optimizer.zero_grad();
  Tensor outputs = ddp_model.forward(randn({20, 10}, gen));
  Tensor labels = randn({20, 5}, gen);
  Tensor loss = mse_loss(outputs, labels);
  loss.backward();  // gradients are averaged over the ranks when this returns
  optimizer.step();
  std::printf("rank %d: loss %.6f, net2.bias[0] after the step %.6f (the same on every rank)\n",
              rank, loss.item<double>(), model->net2().bias().to_vector<float>()[0]);
  distributed::destroy_process_group(pg);  // cleanup()
}

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--launched") == 0) {
      demo_basic();
      return 0;
    }
    int world_size = argc > 1 ? std::stoi(argv[1]) : 2;
    spawn([](int) { demo_basic(); }, world_size);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_basic: %s\n", e.what());
    return 1;
  }
}
