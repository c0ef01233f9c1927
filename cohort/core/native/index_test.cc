#include "cohort/core/native/index.h"

#include <gtest/gtest.h>

namespace cohort::native {
namespace {

TEST(Index, SelectAddGatherScatter) {
  Tensor x = Tensor::arange(0.0, 12.0).reshape({4, 3});
  Tensor idx = Tensor::from_vector<int64_t>({3, 0, 3});
  EXPECT_EQ(index_select(x, 0, idx).to_vector<float>(),
            (std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11}));
  EXPECT_EQ(index_select(x, 1, Tensor::from_vector<int64_t>({2})).to_vector<float>(),
            (std::vector<float>{2, 5, 8, 11}));
  Tensor added = index_add({4, 3}, kFloat32, 0, idx, Tensor::ones({3, 3}));
  EXPECT_EQ(added.to_vector<float>(), (std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2}));
  Tensor gi = Tensor::from_vector<int64_t>({2, 0, 1, 1}, {4, 1});
  EXPECT_EQ(gather(x, 1, gi).to_vector<float>(), (std::vector<float>{2, 3, 7, 10}));
  EXPECT_EQ(scatter_add({2, 2}, kFloat32, 1, Tensor::from_vector<int64_t>({1, 1, 0, 1}, {2, 2}),
                        Tensor::ones({2, 2}))
                .to_vector<float>(),
            (std::vector<float>{0, 2, 1, 1}));
  EXPECT_THROW(index_select(x, 0, Tensor::from_vector<int64_t>({4})), InvalidArgument);
  EXPECT_THROW(index_select(x, 0, Tensor::from_vector<float>({1})), InvalidArgument);
}

TEST(Index, CatAndDropout) {
  Tensor a = Tensor::from_vector<float>({1, 2}, {1, 2});
  Tensor b = Tensor::from_vector<float>({3, 4, 5, 6}, {2, 2});
  EXPECT_EQ(cat({a, b}, 0).to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cat({b, b}, 1).sizes(), (Shape{2, 4}));
  EXPECT_THROW(cat({a, b}, 1), InvalidArgument);
  Generator g(1);
  DropoutResult r = dropout(Tensor::ones({10000}), 0.25, g);
  int zeros = 0;
  for (float v : r.out.to_vector<float>()) {
    ASSERT_TRUE(v == 0.0f || std::abs(v - 4.0f / 3.0f) < 1e-6);
    zeros += v == 0.0f;
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.02);
}

}  // namespace
}  // namespace cohort::native
