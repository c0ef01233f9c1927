#include "cohort/core/tensor_dict.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(TensorDict, KeepsInsertionOrderAndFinds) {
  TensorDict d;
  d.insert("b", Tensor::ones({2}));
  d.insert("a", Tensor::zeros({3}));
  d.insert("c.x", Tensor::scalar(1.0));
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"b", "a", "c.x"}));
  EXPECT_EQ(d.at("a").numel(), 3);
  EXPECT_EQ(d.find("zz"), nullptr);
  EXPECT_THROW(d.insert("a", Tensor::ones({1})), InvalidArgument);
  try {
    d.at("missing");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'missing'"), std::string::npos);
  }
}

TEST(TensorDict, EraseAssignSubMerge) {
  TensorDict d;
  d.insert("m.w", Tensor::ones({2}));
  d.insert("m.b", Tensor::ones({1}));
  d.insert("o.lr", Tensor::scalar(0.1));
  EXPECT_TRUE(d.erase("m.w"));
  EXPECT_FALSE(d.erase("m.w"));
  EXPECT_EQ(d.at("o.lr").item<double>(), 0.1f);
  d.insert_or_assign("m.b", Tensor::zeros({4}));
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"m.b", "o.lr"}));
  EXPECT_EQ(d.at("m.b").numel(), 4);
  TensorDict s = d.sub("m.");
  EXPECT_EQ(s.keys(), (std::vector<std::string>{"b"}));
  TensorDict all;
  all.merge(s, "model.");
  all.merge(s, "copy.");
  EXPECT_EQ(all.keys(), (std::vector<std::string>{"model.b", "copy.b"}));
  EXPECT_THROW(all.merge(s, "model."), InvalidArgument);
}

}  // namespace
}  // namespace cohort
