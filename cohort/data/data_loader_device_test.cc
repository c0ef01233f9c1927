// DataLoader delivering batches on a device (the fake device stands in for a
// GPU: what is checked is where batches land and that the consumer's stream
// waits for the side stream's copy, not CUDA itself).
#include <gtest/gtest.h>

#include "cohort/core/fake_device_testing.h"
#include "cohort/data/data_loader.h"
#include "cohort/data/tensor_dataset.h"

namespace cohort::data {
namespace {

TEST(DataLoaderDevice, BatchesArriveOnTheDeviceWithTheConsumerWaitingOnTheDevice) {
  testing::FakeCudaDevice fake;
  for (int64_t prefetch : {0, 2}) {
    auto ds = std::make_shared<TensorDataset>(
        Tensor::arange(0, 10.0, 1, DType::kFloat32).reshape({10, 1}),
        Tensor::arange(10, DType::kInt64));
    const int waits_before = fake.waits;
    {
      DataLoader loader(ds, {.batch_size = 4, .prefetch = prefetch, .device = Device("cuda")});
      std::vector<int64_t> targets;
      for (Batch& b : loader) {
        EXPECT_EQ(b.input.device(), Device("cuda:0"));
        EXPECT_EQ(b.target.device(), Device("cuda:0"));
        for (int64_t t : b.target.to_vector<int64_t>()) targets.push_back(t);
      }
      EXPECT_EQ(targets, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    }
    // Prefetched batches come from the side stream: one device-side wait each.
    EXPECT_EQ(fake.waits - waits_before, prefetch > 0 ? 3 : 0) << "prefetch " << prefetch;
  }
}

}  // namespace
}  // namespace cohort::data
