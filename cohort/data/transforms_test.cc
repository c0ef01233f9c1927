// Normalize, Stack and data::map with LibTorch's meaning.
#include "cohort/data/transforms.h"

#include <gtest/gtest.h>

#include "cohort/data/tensor_dataset.h"

namespace cohort::data {
namespace {

std::shared_ptr<TensorDataset> pixels() {
  // 4 images [2, 1, 2] (two channels), labels 0..3.
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.125f * static_cast<float>(i);
  return std::make_shared<TensorDataset>(Tensor::from_vector(v, {4, 2, 1, 2}), Tensor::arange(4));
}

TEST(Normalize, OneMeanForEveryChannelAsTorchvision) {
  transforms::Normalize norm(0.5, 0.25);
  Example e{Tensor::from_vector<float>({0.0f, 0.5f, 1.0f}), Tensor::scalar(3, kLong)};
  Example out = norm(e);
  EXPECT_EQ(out.input.to_vector<float>(), (std::vector<float>{-2.0f, 0.0f, 2.0f}));
  EXPECT_EQ(out.target.item<int64_t>(), 3);
  EXPECT_EQ(e.input.to_vector<float>()[0], 0.0f);  // the original is untouched
}

TEST(Normalize, PerChannelOnExamplesAndBatches) {
  auto ds = pixels();
  transforms::Normalize norm({0.5, 1.0}, {0.5, 2.0});
  Example e = norm(ds->get(1));  // input [2, 1, 2]: channel 0 = {0.5, 0.625}, 1 = {0.75, 0.875}
  EXPECT_EQ(e.input.to_vector<float>(), (std::vector<float>{0.0f, 0.25f, -0.125f, -0.0625f}));
  std::vector<int64_t> idx{1, 2};
  Batch b = norm(ds->get_batch(idx));  // channel dim 1
  EXPECT_EQ(b.input.select(0, 0).contiguous().to_vector<float>(), e.input.to_vector<float>());
}

TEST(Normalize, RejectsBadArguments) {
  EXPECT_THROW(transforms::Normalize(0.5, 0.0), InvalidArgument);
  EXPECT_THROW(transforms::Normalize({0.5, 0.5}, {1.0}), InvalidArgument);
  transforms::Normalize three({0, 0, 0}, {1, 1, 1});
  try {
    three(Batch{Tensor::zeros({2, 2, 4}), Tensor::zeros({2}, kLong)});
    FAIL() << "no error for 2 channels against 3 means";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3 means"), std::string::npos) << e.what();
  }
  EXPECT_THROW(transforms::Normalize(0, 1)(Example{Tensor::zeros({2}, kByte), Tensor()}),
               InvalidArgument);
}

TEST(MapDataset, AppliesTheTransformToExamplesAndBatches) {
  auto mapped = map(pixels(), transforms::Normalize(0.5, 0.5));
  EXPECT_EQ(mapped->size(), 4);
  std::vector<int64_t> idx{3, 0};
  Batch b = mapped->get_batch(idx);
  EXPECT_EQ(b.input.sizes(), (Shape{2, 2, 1, 2}));
  EXPECT_EQ(b.input.select(0, 1).contiguous().to_vector<float>(),
            mapped->get(0).input.to_vector<float>());
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{3, 0}));
  EXPECT_FLOAT_EQ(mapped->get(0).input.to_vector<float>()[0], -1.0f);
  // A data set by value is moved in.
  TensorDataset plain(Tensor::ones({3, 2}), Tensor::arange(3));
  EXPECT_EQ(map(std::move(plain), transforms::Normalize(1, 1))->get(2).input.to_vector<float>(),
            (std::vector<float>{0.0f, 0.0f}));
}

TEST(Stack, GathersExamplesAlongANewDim) {
  std::vector<Example> ex{{Tensor::ones({2}), Tensor::scalar(1, kLong)},
                          {Tensor::zeros({2}), Tensor::scalar(0, kLong)}};
  Batch b = transforms::Stack()(ex);
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  ex.push_back({Tensor::ones({3}), Tensor::scalar(1, kLong)});
  EXPECT_THROW(transforms::Stack()(ex), InvalidArgument);
  EXPECT_THROW(transforms::Stack()(std::span<const Example>()), InvalidArgument);
}

}  // namespace
}  // namespace cohort::data
