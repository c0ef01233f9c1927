// The CNN of PyTorch's DDP tutorials in C++: docs/reference.md's Net trained on
// Fashion-MNIST with DistributedDataParallel, each rank reading its share of
// the data through a DistributedSampler whose epoch the loop advances
// (sampler.set_epoch), rank 0 reporting the test accuracy at the end.
//
//   cohort run --nproc-per-node 2 build/examples/cnn_ddp [--epochs N]
//       [--max-steps N] [--data-dir DIR]
//
// The same training, with checkpoints, metrics and progress, is
// `cohort train` (tools/cohort/train_command.cc, cohort/train/trainer.h).
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cohort/autograd/grad_mode.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/distributed_sampler.h"
#include "cohort/data/mnist.h"
#include "cohort/distributed/process_group.h"
#include "cohort/nn/models/net.h"
#include "cohort/optim/clip_grad.h"
#include "cohort/optim/sgd.h"
#include "cohort/parallel/distributed_data_parallel.h"

using namespace cohort;

int main(int argc, char** argv) {
  int64_t epochs = 1;
  int64_t max_steps = 0;
  std::string data_dir = data::FashionMnist::kDefaultRoot;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--epochs") == 0) {
      epochs = std::stoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--max-steps") == 0) {
      max_steps = std::stoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--data-dir") == 0) {
      data_dir = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: cnn_ddp [--epochs N] [--max-steps N] [--data-dir DIR]\n");
      return 2;
    }
  }
  try {
    // RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from cohort run.
    auto pg = distributed::init_process_group("native", "env://");
    const int rank = pg->rank();

    Generator gen(0);
    auto model = std::make_shared<nn::Net>(gen);
    parallel::DistributedDataParallel ddp_model(model, pg);  // rank 0's weights everywhere
    optim::SGD optimizer(ddp_model.parameters(), {.lr = 0.01, .momentum = 0.9});

    auto train_set = std::make_shared<data::FashionMnist>(data_dir, data::Split::kTrain);
    data::DistributedSampler::Options so;
    so.num_replicas = pg->size();
    so.rank = rank;
    so.seed = 0;
    auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), so);
    data::DataLoader loader(train_set, {.batch_size = 64}, sampler);

    int64_t step = 0;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(epoch);  // a new shuffle each epoch, the same on every rank
      for (data::Batch& batch : loader) {
        optimizer.zero_grad();
        Tensor loss = nll_loss(ddp_model.forward(batch.input), batch.target);
        loss.backward();  // gradients are averaged over the ranks when this returns
        optim::clip_grad_norm(ddp_model.parameters(), 10.0);
        optimizer.step();
        ++step;  // on every rank: all ranks must stop at the same step
        if (rank == 0 && step % 100 == 0) {
          std::printf("epoch %lld step %lld loss %.4f\n", static_cast<long long>(epoch + 1),
                      static_cast<long long>(step), loss.item<double>());
          std::fflush(stdout);
        }
        if (max_steps > 0 && step >= max_steps) break;
      }
    }

    if (rank == 0) {
      data::FashionMnist test_set(data_dir, data::Split::kTest);
      NoGradGuard no_grad;
      model->eval();
      Tensor out = model->forward(data::pixels_to_float(test_set.images()));
      double correct = sum(eq(argmax(out, 1), test_set.labels())).item<double>();
      std::printf("test accuracy %.4f\n", correct / static_cast<double>(test_set.size()));
    }
    distributed::destroy_process_group(pg);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn_ddp: %s\n", e.what());
    return 1;
  }
}
