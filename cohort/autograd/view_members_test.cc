// Tensor's view members (x.view(...), x.transpose(...), x[i], ...) record
// autograd like the free functions, as PyTorch's members do.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cohort/autograd/grad_mode.h"
#include "cohort/autograd/gradcheck.h"
#include "cohort/autograd/ops.h"

namespace cohort {
namespace {

using In = const std::vector<Tensor>&;

Tensor arange_grad(const Shape& s) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * static_cast<double>(i) - 1.0;
  return Tensor::from_vector(v, s).set_requires_grad(true);
}

struct MemberView {
  std::string name;
  Shape input;
  std::function<Tensor(const Tensor&)> member;
};

std::vector<MemberView> member_views() {
  return {
      {"view",
       {2, 3, 4},
       [](const Tensor& x) {
         return x.view({6, 4});
       }},
      {"reshape",
       {2, 3, 4},
       [](const Tensor& x) {
         return x.reshape({4, -1});
       }},
      {"reshape of a transposed tensor (a copy)",
       {3, 4},
       [](const Tensor& x) { return x.transpose(0, 1).reshape({12}); }},
      {"flatten", {2, 3, 4}, [](const Tensor& x) { return x.flatten(1); }},
      {"transpose", {2, 3, 4}, [](const Tensor& x) { return x.transpose(0, 2); }},
      {"permute",
       {2, 3, 4},
       [](const Tensor& x) {
         return x.permute({1, 2, 0});
       }},
      {"unsqueeze", {3, 4}, [](const Tensor& x) { return x.unsqueeze(1); }},
      {"squeeze(dim)", {3, 1, 4}, [](const Tensor& x) { return x.squeeze(1); }},
      {"squeeze()", {3, 1, 4, 1}, [](const Tensor& x) { return x.squeeze(); }},
      {"narrow", {5, 4}, [](const Tensor& x) { return x.narrow(0, 1, 3); }},
      {"slice", {5, 4}, [](const Tensor& x) { return x.slice(1, 1, -1); }},
      {"select", {5, 4}, [](const Tensor& x) { return x.select(1, 2); }},
      {"operator[]", {5, 4}, [](const Tensor& x) { return x[3]; }},
      {"expand",
       {3, 1},
       [](const Tensor& x) {
         return x.expand({2, 3, 4});
       }},
      {"contiguous", {3, 4}, [](const Tensor& x) { return x.transpose(0, 1).contiguous(); }},
  };
}

TEST(ViewMembers, GradientFlowsThroughEveryMemberView) {
  for (const MemberView& v : member_views()) {
    SCOPED_TRACE(v.name);
    Tensor x = arange_grad(v.input);
    Tensor y = v.member(x);
    ASSERT_TRUE(y.requires_grad());
    ASSERT_NE(y.grad_fn(), nullptr);
    sum(mul(y, y)).backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().sizes(), x.sizes());

    Tensor x2 = arange_grad(v.input);
    autograd::GradcheckOptions opts;
    auto r = autograd::gradcheck([&](In in) { return v.member(in[0]); }, {x2}, opts);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(ViewMembers, MatchTheFreeFunctions) {
  Tensor a = arange_grad({2, 3, 4});
  Tensor b = arange_grad({2, 3, 4});
  Tensor w = arange_grad({3, 2, 4}).detach();
  sum(mul(a.transpose(0, 1).reshape({3, 2, 4}), w)).backward();
  sum(mul(reshape(transpose(b, 0, 1), {3, 2, 4}), w)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), b.grad().to_vector<double>());
}

TEST(ViewMembers, AreNotRecordedUnderNoGradOrForTensorsWithoutGrad) {
  Tensor x = arange_grad({2, 3});
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(x.view({3, 2}).requires_grad());
  }
  EXPECT_FALSE(x.detach().transpose(0, 1).requires_grad());
  EXPECT_FALSE(x.to(kInt64).requires_grad());
  // A view of a parameter is no longer a leaf, as in PyTorch.
  EXPECT_FALSE(x.view({6}).is_leaf());
  EXPECT_TRUE(x.contiguous().is_leaf());  // x itself, already contiguous
}

TEST(ViewMembers, ToConvertsTheGradientBack) {
  Tensor x = arange_grad({3});
  Tensor y = x.to(kFloat32);
  sum(mul(y, y)).backward();
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{-2.0, -1.5, -1.0}));
}

TEST(ViewMembers, ViewsOfTwoLeavesGiveBothGradients) {
  Tensor x = arange_grad({4});
  Tensor w = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}).set_requires_grad(true);
  Tensor y = mul(x.view({2, 2}), w.view({2, 2}));
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), x.detach().to_vector<double>());
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace cohort
