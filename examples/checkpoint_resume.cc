// Saving and loading checkpoints in a DDP job, as in PyTorch's DDP tutorial
// (demo_checkpoint): rank 0 saves the model, every rank waits at a barrier
// so nobody reads a file still being written, then every rank loads it. The
// model is saved without DDP's wrapper (ddp_model.module()), so the file is
// a plain safetensors state dict that a single process (or PyTorch) loads.
//
//   cohort run --nproc-per-node 2 build/examples/checkpoint_resume [DIR]
//
// Training runs resume the same way with `cohort train --checkpoint-dir D
// --resume auto`, which also saves the optimizer and the data position.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cohort/checkpoint/checkpoint.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;

int main(int argc, char** argv) {
  try {
    auto pg = distributed::init_process_group("native", "env://");
    const int rank = pg->rank();
    // Every rank must use the same path: rank 0 picks it.
    std::string dir = argc > 1 ? argv[1] : std::filesystem::temp_directory_path().string();
    const std::string path = dir + "/model.checkpoint.safetensors";

    Generator gen(static_cast<uint64_t>(rank));
    auto model = std::make_shared<nn::ToyModel>(gen);
    parallel::DistributedDataParallel ddp_model(model, pg);

    if (rank == 0) {
      // All processes start from the same parameters (DDP broadcast rank 0's),
      // so saving on one of them is enough.
      checkpoint::save_model(path, ddp_model.module());
      std::printf("rank 0: saved %s\n", path.c_str());
      std::fflush(stdout);
    }
    // Nobody loads before rank 0 has finished writing.
    pg->barrier();

    checkpoint::load_model(path, *model);
    std::printf("rank %d: loaded %s (net1.weight[0] = %.6f)\n", rank, path.c_str(),
                model->net1().weight().to_vector<float>()[0]);
    std::fflush(stdout);

    optim::SGD optimizer(ddp_model.parameters(), {.lr = 0.001});
    optimizer.zero_grad();
    Tensor loss = mse_loss(ddp_model.forward(randn({20, 10}, gen)), randn({20, 5}, gen));
    loss.backward();
    optimizer.step();
    std::printf("rank %d: one step after loading, loss %.6f\n", rank, loss.item<double>());

    // Nobody still reads the file when rank 0 removes it.
    pg->barrier();
    if (rank == 0) std::filesystem::remove(path);
    distributed::destroy_process_group(pg);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_resume: %s\n", e.what());
    return 1;
  }
}
