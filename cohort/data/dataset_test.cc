#include "cohort/data/dataset.h"

#include <gtest/gtest.h>

#include "cohort/data/synthetic_dataset.h"
#include "cohort/data/tensor_dataset.h"

namespace cohort::data {
namespace {

// Only get(): exercises the default get_batch.
class SquaresDataset : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Example get(int64_t i) const override {
    check_index("SquaresDataset::get", i, size());
    return Example{Tensor::from_vector<float>({float(i), float(i * i)}, {2}),
                   Tensor::scalar(static_cast<double>(i % 3), DType::kInt64)};
  }
};

TEST(Dataset, DefaultGetBatchStacksExamples) {
  SquaresDataset ds;
  std::vector<int64_t> idx{3, 0, 3};
  Batch b = ds.get_batch(idx);
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.input.sizes(), (Shape{3, 2}));
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{3, 9, 0, 0, 3, 9}));
  EXPECT_EQ(b.target.sizes(), (Shape{3}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  std::vector<int64_t> bad{1, 10};
  EXPECT_THROW(ds.get_batch(bad), InvalidArgument);
  EXPECT_THROW(ds.get_batch({}), InvalidArgument);
}

TEST(TensorDataset, GathersRows) {
  Tensor x = Tensor::arange(0, 12, 1, DType::kFloat32).reshape({6, 2});
  Tensor y = Tensor::arange(6, DType::kInt64);
  TensorDataset ds(x, y);
  x.fill_(-1);  // the dataset holds its own copy
  std::vector<int64_t> idx{5, 2};
  Batch b = ds.get_batch(idx);
  EXPECT_EQ(b.input.to_vector<float>(), (std::vector<float>{10, 11, 4, 5}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{5, 2}));
  Example e = ds.get(1);
  EXPECT_EQ(e.input.to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_THROW(ds.get(6), InvalidArgument);
  EXPECT_THROW(TensorDataset(x, Tensor::arange(5, DType::kInt64)), InvalidArgument);
}

TEST(SyntheticDataset, DeterministicFromSeed) {
  SyntheticDataset::Options o{.size = 64, .input_shape = {3, 4}, .num_classes = 5, .seed = 11};
  SyntheticDataset a(o), b(o);
  o.seed = 12;
  SyntheticDataset c(o);
  EXPECT_TRUE(equal(a.inputs(), b.inputs()));
  EXPECT_TRUE(equal(a.targets(), b.targets()));
  EXPECT_FALSE(equal(a.inputs(), c.inputs()));
  EXPECT_EQ(a.inputs().sizes(), (Shape{64, 3, 4}));
  EXPECT_EQ(a.targets().dtype(), DType::kInt64);
  for (int64_t y : a.targets().to_vector<int64_t>()) {
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 5);
  }
  std::vector<int64_t> idx{7, 3};
  Batch batch = a.get_batch(idx);
  EXPECT_EQ(batch.input.sizes(), (Shape{2, 3, 4}));
  EXPECT_TRUE(equal(batch.input.select(0, 0), a.inputs().select(0, 7)));
}

TEST(SyntheticDataset, ClassesAreSeparable) {
  // With little noise, examples of one class are closer to each other than to
  // other classes: the nearest neighbour of each example shares its label.
  SyntheticDataset ds(
      {.size = 100, .input_shape = {16}, .num_classes = 4, .noise = 0.1, .seed = 3});
  auto x = ds.inputs().to_vector<float>();
  auto y = ds.targets().to_vector<int64_t>();
  int correct = 0;
  for (int i = 0; i < 100; ++i) {
    double best = 1e30;
    int64_t label = -1;
    for (int j = 0; j < 100; ++j) {
      if (j == i) continue;
      double d = 0;
      for (int k = 0; k < 16; ++k)
        d += (x[i * 16 + k] - x[j * 16 + k]) * (x[i * 16 + k] - x[j * 16 + k]);
      if (d < best) best = d, label = y[static_cast<size_t>(j)];
    }
    correct += label == y[static_cast<size_t>(i)];
  }
  EXPECT_GE(correct, 95);
}

TEST(SyntheticDataset, Regression) {
  SyntheticDataset ds({.size = 8, .input_shape = {10}, .num_classes = 0, .target_shape = {5}});
  EXPECT_EQ(ds.targets().sizes(), (Shape{8, 5}));
  EXPECT_EQ(ds.targets().dtype(), DType::kFloat32);
  EXPECT_THROW(SyntheticDataset({.size = 0}), InvalidArgument);
}

}  // namespace
}  // namespace cohort::data
