// bench_data_loader: the input pipeline of the main job alone -- reading
// Fashion-MNIST, then one epoch of shuffled batches of 64 ([64, 1, 28, 28]
// float32 in [0, 1], int64 labels) -- with and without the prefetch thread,
// and the same with PyTorch 1.13's DataLoader (bench/data/torch_data_loader.py)
// when /usr/bin/python3 has torch.
//   bench_data_loader [--root DIR] [--batch-size N] [--no-peer]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cohort/data/data_loader.h"
#include "cohort/data/distributed_sampler.h"
#include "cohort/data/mnist.h"

using namespace cohort;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
  std::string root = data::FashionMnist::kDefaultRoot;
  int64_t batch = 64;
  bool peer = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--root") && i + 1 < argc)
      root = argv[++i];
    else if (!std::strcmp(argv[i], "--batch-size") && i + 1 < argc)
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-peer"))
      peer = false;
    else {
      std::fprintf(stderr, "usage: %s [--root DIR] [--batch-size N] [--no-peer]\n", argv[0]);
      return 2;
    }
  }
  try {
    auto t0 = Clock::now();
    auto train = std::make_shared<data::FashionMnist>(root, data::Split::kTrain);
    std::printf("cohort  load train set (60000 images, gzip IDX): %.3f s\n", seconds_since(t0));
    for (int64_t prefetch : {0, 2}) {
      data::DataLoader loader(train, {.batch_size = batch, .shuffle = true, .prefetch = prefetch});
      for (int rep = 0; rep < 2; ++rep) {  // the first pass warms caches
        t0 = Clock::now();
        int64_t n = 0;
        double checksum = 0;
        for (data::Batch& b : loader) {
          n += b.size();
          checksum += b.input.data_ptr<float>()[0];
        }
        double s = seconds_since(t0);
        if (rep == 1)
          std::printf(
              "cohort  epoch prefetch=%ld: %.3f s, %.0f samples/s, %.1f us/batch (check %.1f)\n",
              static_cast<long>(prefetch), s, n / s, 1e6 * s / loader.num_batches(), checksum);
      }
    }
    auto sampler = std::make_shared<data::DistributedSampler>(
        train->size(), data::DistributedSampler::Options{.num_replicas = 2, .rank = 0});
    data::DataLoader dl(train, {.batch_size = batch}, sampler);
    t0 = Clock::now();
    int64_t n = 0;
    for (data::Batch& b : dl) n += b.size();
    double s = seconds_since(t0);
    std::printf("cohort  rank 0 of 2 DistributedSampler epoch: %.3f s, %ld samples\n", s,
                static_cast<long>(n));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_loader: %s\n", e.what());
    return 1;
  }
  if (peer && std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0) {
    std::string cmd = std::string("/usr/bin/python3 ") + COHORT_BENCH_DATA_PEER + " " + root + " " +
                      std::to_string(batch);
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "peer failed: %s\n", cmd.c_str());
  }
  return 0;
}
