// Parity of Tensor::copy_ / fill_ on cuda:0 with the CPU: strided and
// broadcast copies, every dtype conversion the models use, fills of views;
// and the bf16 rounding of weights (nearest and stochastic), bit for bit.
#include <cstring>
#include <limits>

#include "cohort/core/native/bf16_rounding.h"
#include "cohort/cuda/pointwise_testing.h"
#include "cohort/optim/bf16_weights.h"

namespace cohort::cuda {
namespace {

using testing::gpu;
using testing::random_tensor;
using testing::same_values;

TEST(CudaCopy, RoundTripIsExact) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({3, 5, 7}, 1);
  Tensor d = x.to(gpu());
  ASSERT_TRUE(d.is_cuda());
  EXPECT_TRUE(equal(d.cpu(), x));
}

TEST(CudaCopy, StridedAndBroadcastSources) {
  COHORT_REQUIRE_CUDA();
  Tensor x = random_tensor({4, 6, 5}, 2);
  Tensor d = x.to(gpu());
  // Transposed source, dense destination (contiguous()).
  EXPECT_TRUE(same_values(d.transpose(0, 2).contiguous(), x.transpose(0, 2).contiguous(), 0, 0));
  EXPECT_TRUE(
      same_values(d.permute({1, 2, 0}).contiguous(), x.permute({1, 2, 0}).contiguous(), 0, 0));
  // Broadcast source into a strided destination view.
  Tensor row = random_tensor({5}, 3);
  Tensor hd = Tensor::zeros({6, 10});
  Tensor dd = Tensor::zeros({6, 10}, kFloat32, gpu());
  hd.narrow(1, 2, 5).copy_(row);
  dd.narrow(1, 2, 5).copy_(row.to(gpu()));
  EXPECT_TRUE(same_values(dd, hd, 0, 0));
  // A column of a matrix into a row of another (both strided).
  Tensor hm = Tensor::zeros({5, 4});
  Tensor dm = Tensor::zeros({5, 4}, kFloat32, gpu());
  hm.select(1, 3).copy_(x.select(2, 1).select(0, 1).narrow(0, 0, 5));
  dm.select(1, 3).copy_(d.select(2, 1).select(0, 1).narrow(0, 0, 5));
  EXPECT_TRUE(same_values(dm, hm, 0, 0));
}

TEST(CudaCopy, DtypeConversionsMatchTheCpu) {
  COHORT_REQUIRE_CUDA();
  // Values with more bits than bfloat16 / float16 keep, so rounding is tested.
  Tensor x = random_tensor({7, 33}, 4, kFloat32, -300, 300);
  Tensor d = x.to(gpu());
  for (DType to : {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(to));
    Tensor h = x.to(to);
    Tensor g = d.to(to);
    EXPECT_TRUE(same_values(g, h, 0, 0));
    // And back to float32, from a strided view.
    EXPECT_TRUE(same_values(g.transpose(0, 1).to(kFloat32), h.transpose(0, 1).to(kFloat32), 0, 0));
  }
  Tensor bytes = testing::random_ints({9, 4}, 5, 0, 256, kUInt8);
  EXPECT_TRUE(same_values(bytes.to(gpu()).to(kFloat32), bytes.to(kFloat32), 0, 0));
  Tensor labels = testing::random_ints({100}, 6, -1000, 1000, kInt64);
  EXPECT_TRUE(same_values(labels.to(gpu()).to(kInt32), labels.to(kInt32), 0, 0));
  EXPECT_TRUE(same_values(labels.to(gpu()).to(kFloat32), labels.to(kFloat32), 0, 0));
  EXPECT_TRUE(same_values(labels.to(gpu()).to(kBFloat16), labels.to(kBFloat16), 0, 0));
}

TEST(CudaCopy, FillsViewsInEveryDtype) {
  COHORT_REQUIRE_CUDA();
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kUInt8, kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = Tensor::zeros({4, 9}, dt);
    Tensor g = Tensor::zeros({4, 9}, dt, gpu());
    h.narrow(1, 1, 3).fill_(3.3);
    g.narrow(1, 1, 3).fill_(3.3);
    h.select(0, 2).fill_(2.0);
    g.select(0, 2).fill_(2.0);
    EXPECT_TRUE(same_values(g, h, 0, 0));
    EXPECT_TRUE(
        same_values(Tensor::full({3, 2}, 7.0, dt, gpu()), Tensor::full({3, 2}, 7.0, dt), 0, 0));
  }
  Tensor g = Tensor::ones({1000}, kFloat32, gpu());
  g.zero_();
  EXPECT_TRUE(same_values(g, Tensor::zeros({1000}), 0, 0));
}

TEST(CudaCopy, StochasticBf16RoundingIsTheCpusBitForBit) {
  COHORT_REQUIRE_CUDA();
  std::vector<float> v = random_tensor({5000}, 7).to_vector<float>();
  v[10] = std::numeric_limits<float>::quiet_NaN();
  v[11] = std::numeric_limits<float>::infinity();
  v[12] = -std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector(v);
  Tensor h = native::to_bf16_stochastic(x, 42, 1000);
  Tensor d = native::to_bf16_stochastic(x.to(gpu()), 42, 1000);
  ASSERT_EQ(d.dtype(), kBFloat16);
  // Compared as bits (NaN included).
  std::vector<uint16_t> want(h.numel()), got(h.numel());
  std::memcpy(want.data(), h.raw_data(), want.size() * 2);
  Tensor dc = d.cpu();
  std::memcpy(got.data(), dc.raw_data(), got.size() * 2);
  EXPECT_EQ(got, want);
}

TEST(CudaCopy, Bf16WeightsModeRoundsDeviceParametersAsTheCpu) {
  COHORT_REQUIRE_CUDA();
  for (optim::WeightRounding r :
       {optim::WeightRounding::kNearest, optim::WeightRounding::kStochastic}) {
    SCOPED_TRACE(optim::weight_rounding_name(r));
    std::vector<Tensor> h{random_tensor({33, 7}, 8), random_tensor({300}, 9)};
    std::vector<Tensor> d{h[0].to(gpu()), h[1].to(gpu())};
    optim::round_weights_to_bf16(h, r, 5, 3);
    optim::round_weights_to_bf16(d, r, 5, 3);
    EXPECT_TRUE(same_values(d[0], h[0], 0, 0));
    EXPECT_TRUE(same_values(d[1], h[1], 0, 0));
  }
}

}  // namespace
}  // namespace cohort::cuda
