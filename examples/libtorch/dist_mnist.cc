// PyTorch's C++ distributed example, pytorch/examples cpp/distributed/dist-mnist.cpp
// (BSD-3-Clause, commit 77f55b9), made to run under `cohort run --nproc-per-node 2`
// with cohort's DistributedDataParallel for LibTorch instead of hand-written
// per-parameter all_reduce over ProcessGroupMPI (which Debian's LibTorch lacks).
// The model, data pipeline and loop are the original's; the changes: the
// process group (cohort's, env:// from `cohort run`), the DDP wrapper in
// place of the gradient averaging after backward, Fashion-MNIST from
// cohort's default path (the .gz files of Debian's dataset-fashion-mnist,
// which torch::data::datasets::MNIST cannot read, through a small dataset
// over cohort::data::FashionMnist) and an --epochs flag. docs/libtorch.md.
//
//   cohort run --nproc-per-node 2 build/examples/libtorch/dist_mnist --epochs 1
#include <torch/torch.h>

#include <cstring>
#include <iostream>

#include "cohort/data/mnist.h"
#include "cohort/libtorch/distributed_data_parallel.h"

// Define a Convolutional Module
struct Model : torch::nn::Module {
  Model()
      : conv1(torch::nn::Conv2dOptions(1, 10, 5)),
        conv2(torch::nn::Conv2dOptions(10, 20, 5)),
        fc1(320, 50),
        fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(
        torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, 0.5, is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, 1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

// Fashion-MNIST as torch::data::datasets::MNIST gives MNIST: image float
// [1, 28, 28] in [0, 1], target int64.
struct FashionMNIST : torch::data::datasets::Dataset<FashionMNIST> {
  explicit FashionMNIST(bool train) {
    cohort::data::FashionMnist d(cohort::data::FashionMnist::kDefaultRoot,
                                 train ? cohort::data::Split::kTrain : cohort::data::Split::kTest);
    const auto& im = d.images();
    images = torch::empty({d.size(), 1, 28, 28}, torch::kByte);
    targets = torch::empty({d.size()}, torch::kLong);
    std::memcpy(images.data_ptr(), im.raw_data(), im.nbytes());
    std::memcpy(targets.data_ptr(), d.labels().raw_data(), d.labels().nbytes());
    images = images.to(torch::kF32).div_(255);
  }
  torch::data::Example<> get(size_t i) override { return {images[i], targets[i]}; }
  torch::optional<size_t> size() const override { return targets.size(0); }
  torch::Tensor images, targets;
};

int main(int argc, char* argv[]) {
  // Creating the process group (RANK, WORLD_SIZE, MASTER_* from cohort run)
  auto pg = cohort::libtorch::init_process_group("native", "env://");

  auto numranks = pg.size();
  auto rank = pg.rank();

  // TRAINING
  // Read train dataset
  auto train_dataset =
      FashionMNIST(true)
          .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
          .map(torch::data::transforms::Stack<>());

  // Distributed Random Sampler
  auto data_sampler = torch::data::samplers::DistributedRandomSampler(
      train_dataset.size().value(), numranks, rank, false);

  auto num_train_samples_per_proc = train_dataset.size().value() / numranks;

  // Generate dataloader
  auto total_batch_size = 64;
  auto batch_size_per_proc =
      total_batch_size / numranks; // effective batch size in each processor
  auto data_loader = torch::data::make_data_loader(
      std::move(train_dataset), data_sampler, batch_size_per_proc);

  // setting manual seed
  torch::manual_seed(0);

  auto model = std::make_shared<Model>();
  cohort::libtorch::DistributedDataParallel ddp(model, pg);  // rank 0's weights everywhere

  auto learning_rate = 1e-2;

  torch::optim::SGD optimizer(model->parameters(), learning_rate);

  // Number of epochs
  size_t num_epochs = argc == 3 && std::strcmp(argv[1], "--epochs") == 0 ? std::stoul(argv[2]) : 10;

  for (size_t epoch = 1; epoch <= num_epochs; ++epoch) {
    size_t num_correct = 0;

    for (auto& batch : *data_loader) {
      auto ip = batch.data;
      auto op = batch.target.squeeze();

      // convert to required formats
      ip = ip.to(torch::kF32);
      op = op.to(torch::kLong);

      // Reset gradients
      model->zero_grad();

      // Execute forward pass
      auto prediction = ddp.forward(ip);

      auto loss = torch::nll_loss(torch::log_softmax(prediction, 1), op);

      // Backpropagation; DDP averages the gradients while it runs
      loss.backward();

      // Update parameters
      optimizer.step();

      auto guess = prediction.argmax(1);
      num_correct += torch::sum(guess.eq_(op)).item<int64_t>();
    } // end batch loader

    auto accuracy = 100.0 * num_correct / num_train_samples_per_proc;

    std::cout << "Accuracy in rank " << rank << " in epoch " << epoch << " - "
              << accuracy << std::endl;

  } // end epoch

  // TESTING ONLY IN RANK 0
  if (rank == 0) {
    auto test_dataset =
        FashionMNIST(false)
            .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
            .map(torch::data::transforms::Stack<>());

    auto num_test_samples = test_dataset.size().value();
    auto test_loader = torch::data::make_data_loader(
        std::move(test_dataset), num_test_samples);

    model->eval(); // enable eval mode to prevent backprop

    size_t num_correct = 0;

    for (auto& batch : *test_loader) {
      auto ip = batch.data;
      auto op = batch.target.squeeze();

      // convert to required format
      ip = ip.to(torch::kF32);
      op = op.to(torch::kLong);

      auto prediction = model->forward(ip);

      auto loss = torch::nll_loss(torch::log_softmax(prediction, 1), op);

      std::cout << "Test loss - " << loss.item<float>() << std::endl;

      auto guess = prediction.argmax(1);

      num_correct += torch::sum(guess.eq_(op)).item<int64_t>();

    } // end test loader

    std::cout << "Num correct - " << num_correct << std::endl;
    std::cout << "Test Accuracy - " << 100.0 * num_correct / num_test_samples
              << std::endl;
  } // end rank 0
}
