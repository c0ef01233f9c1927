#include "cohort/data/mnist.h"

#include <gtest/gtest.h>

#include "cohort/data/idx_test_util.h"

namespace cohort::data {
namespace {

using namespace testing_util;
using MnistTest = IdxTest;

TEST_F(MnistTest, ReadsGeneratedFiles) {
  write("train-images-idx3-ubyte.gz", idx_images(5, 28, 28), true);
  write("train-labels-idx1-ubyte", idx_labels(5));
  Mnist m(dir_.string(), Split::kTrain);
  EXPECT_EQ(m.size(), 5);
  std::vector<int64_t> idx{4, 1, 4};
  Batch b = m.get_batch(idx);
  EXPECT_EQ(b.input.sizes(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(b.input.dtype(), DType::kFloat32);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{4, 1, 4}));
  // pixel (4, r=2, c=3) = 9 -> 9 / 255 exactly as float32.
  EXPECT_EQ(b.input.data_ptr<float>()[2 * 28 + 3], 9.0f / 255.0f);
  // The fused batch path equals gather-then-convert.
  EXPECT_TRUE(equal(b.input, pixels_to_float(gather_rows(m.images(), idx, "test"))));
  Example e = m.get(1);
  EXPECT_EQ(e.input.sizes(), (Shape{1, 28, 28}));
  EXPECT_EQ(e.target.item<int64_t>(), 1);
  EXPECT_THROW(m.get(5), InvalidArgument);
  EXPECT_THROW(Mnist(dir_.string(), Split::kTest), IoError);  // no t10k files
}

TEST_F(MnistTest, RejectsDisagreeingCounts) {
  std::string images = write("train-images-idx3-ubyte", idx_images(5, 28, 28));
  std::string labels = write("train-labels-idx1-ubyte", idx_labels(6));
  expect_io_error([&] { Mnist m(dir_.string()); }, images, "6 labels");
}

TEST_F(MnistTest, RejectsLabelOutOfRange) {
  write("train-images-idx3-ubyte", idx_images(2, 28, 28));
  std::string labels = write("train-labels-idx1-ubyte",
                             std::string("\0\0\x08\x01", 4) + be32(2) + std::string("\x01\x0b", 2));
  expect_io_error([&] { Mnist m(dir_.string()); }, labels, "label 11");
}

TEST(FashionMnist, MissingDirectoryNamesPathAndPackage) {
  expect_io_error([] { FashionMnist m("/nonexistent/cohort-fmnist"); },
                  "/nonexistent/cohort-fmnist", "dataset-fashion-mnist");
}

TEST(FashionMnist, RealDataSet) {
  if (!fs::is_directory(FashionMnist::kDefaultRoot))
    GTEST_SKIP() << FashionMnist::kDefaultRoot << " absent (apt-get install dataset-fashion-mnist)";
  FashionMnist train(FashionMnist::kDefaultRoot, Split::kTrain);
  FashionMnist test(FashionMnist::kDefaultRoot, Split::kTest);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.images().sizes(), (Shape{60000, 28, 28}));
  // Every class appears 6000 times in the training set.
  std::vector<int64_t> counts(10);
  for (int64_t y : train.labels().to_vector<int64_t>()) ++counts[static_cast<size_t>(y)];
  for (int64_t c : counts) EXPECT_EQ(c, 6000);
  std::vector<int64_t> idx{0, 59999};
  Batch b = train.get_batch(idx);
  EXPECT_EQ(b.input.sizes(), (Shape{2, 1, 28, 28}));
  float lo = 1, hi = 0;
  for (float v : b.input.to_vector<float>()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, 0.0f);
  EXPECT_LE(hi, 1.0f);
  EXPECT_GT(hi, 0.5f);
  EXPECT_EQ(train.labels().to_vector<int64_t>()[0], 9);  // the first image is an ankle boot
}

}  // namespace
}  // namespace cohort::data
