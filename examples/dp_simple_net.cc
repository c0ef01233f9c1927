// The DataParallel tutorial ("Optional: Data Parallelism") in C++:
// ASimpleNet wrapped in DataParallel; each replica reports the batch size it
// was given, and the outer loop the size of the whole batch. 100 samples in
// batches of 30 over 4 replicas: replicas get 8, 8, 8, 6, then 3, 3, 3, 1.
//
//   build-*/examples/dp_simple_net [replicas]    (default 4)
#include <cstdio>
#include <mutex>
#include <string>

#include "cohort/nn/nn.h"
#include "cohort/parallel/data_parallel.h"

using namespace cohort;

int main(int argc, char** argv) {
  try {
    int replicas = argc > 1 ? std::stoi(argv[1]) : 4;
    const int64_t data_size = 100, batch_size = 30;
    Generator gen(0);
    auto model = std::make_shared<nn::ASimpleNet>(gen);
    std::mutex print_mu;
    model->set_reporter([&](int64_t batch) {
      std::lock_guard<std::mutex> lock(print_mu);
      std::printf("\tIn Model (replica %d): input size [%ld, 3]\n",
                  parallel::DataParallel::current_replica(), static_cast<long>(batch));
    });
    parallel::DataParallel dp(model, replicas);
    std::printf("Let's use %d replicas (%d threads each)\n", dp.num_replicas(),
                dp.replica_threads(0));
    Tensor data = randn({data_size, 3}, gen);
    for (int64_t start = 0; start < data_size; start += batch_size) {
      Tensor input = data.narrow(0, start, std::min(batch_size, data_size - start));
      Tensor output = dp.forward(input);
      std::printf("Outside: input size %s output_size %s\n", shape_str(input.sizes()).c_str(),
                  shape_str(output.sizes()).c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp_simple_net: %s\n", e.what());
    return 1;
  }
}
