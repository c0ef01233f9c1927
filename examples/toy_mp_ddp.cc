// The model-parallel part of PyTorch's DDP tutorial ("Combining DDP with
// Model Parallelism", demo_model_parallel) in C++: ToyMpModel puts ToyModel's
// net1 + relu on one worker and net2 on another -- here a 2-stage pipeline --
// and two such pipelines train as data-parallel replicas: four processes
// (cohort::spawn), world rank = replica * 2 + stage. A few SGD steps with MSE
// loss on random data; every rank prints its loss (the same on all ranks: the
// mean over both replicas' batches).
//
//   build-*/examples/toy_mp_ddp
#include <cstdio>

#include "cohort/distributed/process_group.h"
#include "cohort/launch/spawn.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/pipeline/pipeline.h"

using namespace cohort;
using namespace cohort::parallel::pipeline;

void demo_model_parallel() {
  auto world = distributed::init_process_group("native", "env://");
  auto grid = make_pipeline_grid(world, /*stages=*/2);  // 2 replicas x 2 stages

  // ToyModel's layers as a Sequential (same names and draws): net1, relu, net2.
  Generator gen(0);
  nn::ToyModel toy(gen);
  auto model = std::make_shared<nn::Sequential>();
  for (auto& [name, child] : toy.named_children()) model->add(name, child);
  // Stage 0: net1 + relu; stage 1: net2 (cut before child 2, as ToyMpModel does).
  Pipeline pipe(model, grid, {.schedule = Schedule::k1F1B, .micro_batches = 2, .cut_points = {2}});

  optim::SGD optimizer(pipe.parameters(), {.lr = 0.001});
  Generator data(100 + static_cast<uint64_t>(grid.replica));  // each replica its own batch
  for (int step = 0; step < 3; ++step) {
    Tensor inputs = randn({20, 10}, data);
    Tensor labels = randn({20, 5}, data);
    optimizer.zero_grad();
    double loss = pipe.step(inputs, labels, mse_loss_fn);  // gradients averaged over replicas
    optimizer.step();
    std::printf("rank %d (replica %d, stage %d): loss %.6f at step %d\n", world->rank(),
                grid.replica, grid.stage, loss, step);
    std::fflush(stdout);
  }
  distributed::destroy_process_group(world);
}

int main() {
  try {
    spawn([](int) { demo_model_parallel(); }, 4);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "toy_mp_ddp: %s\n", e.what());
    return 1;
  }
}
