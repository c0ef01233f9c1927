// Shapes, errors, initialisation and train/eval behaviour of the layers.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>

#include "cohort/nn/nn.h"
#include "cohort/nn/test_util.h"

namespace cohort::nn {
namespace {

using testing::expect_error;

float max_abs(const Tensor& t) { return max(abs(t)).item<float>(); }

TEST(Linear, ShapesInitAndErrors) {
  Generator gen(1);
  Linear fc(400, 30, gen);
  EXPECT_EQ(fc(rand({7, 400}, gen)).sizes(), (Shape{7, 30}));
  EXPECT_EQ(fc(rand({2, 3, 400}, gen)).sizes(), (Shape{2, 3, 30}));
  // kaiming_uniform(a = sqrt 5): U(-1/sqrt(400), 1/sqrt(400)) = U(-0.05, 0.05), for both.
  EXPECT_LE(max_abs(fc.weight()), 0.05f);
  EXPECT_GT(max_abs(fc.weight()), 0.049f);
  EXPECT_LE(max_abs(fc.bias()), 0.05f);
  double var = mean(mul(fc.weight(), fc.weight())).item<double>();
  EXPECT_NEAR(var, 0.05 * 0.05 / 3, 1e-4);  // variance of U(-b, b) is b^2/3
  expect_error(
      [&] {
        fc(rand({7, 40}, gen));
      },
      {"Linear(in_features=400, out_features=30, bias=True)", "[..., 400]", "[7, 40]"});
  Linear nob(3, 2, gen, false);
  EXPECT_FALSE(nob.bias().defined());
  EXPECT_EQ(nob.named_parameters().size(), 1u);
  // bias() is a reference like weight(): init functions take it directly.
  init::constant_(fc.bias(), 0.25);
  EXPECT_TRUE(equal(fc.parameter("bias"), Tensor::full({30}, 0.25)));
  EXPECT_TRUE(fc.bias().is_same(fc.parameter("bias")));
  // Without a bias, assigning to the handle adds none.
  nob.bias() = Tensor::ones({2});
  EXPECT_FALSE(nob.bias().defined());
  EXPECT_FALSE(std::as_const(nob).bias().defined());
  EXPECT_EQ(nob.named_parameters().size(), 1u);
  expect_error([&] { Linear(0, 2, gen); }, {"Linear", "positive"});
}

TEST(Conv2d, ShapesInitAndErrors) {
  Generator gen(2);
  Conv2d conv(3, 8, 3, gen, Conv2dOptions().stride(2).padding(1));
  EXPECT_EQ(conv(rand({2, 3, 9, 9}, gen)).sizes(), (Shape{2, 8, 5, 5}));
  double bound = 1.0 / std::sqrt(27.0);
  EXPECT_LE(max_abs(conv.weight()), bound);
  EXPECT_LE(max_abs(conv.bias()), bound);
  Tensor x = rand({2, 3, 9, 9}, gen) - 0.5;
  EXPECT_TRUE(allclose(conv.forward_relu(x), relu(conv(x)), 1e-5, 1e-6));
  expect_error([&] { conv(rand({3, 9, 9}, gen)); }, {"Conv2d(3, 8", "[N, 3, H, W]", "[3, 9, 9]"});
  expect_error([&] { conv(rand({1, 4, 9, 9}, gen)); }, {"Conv2d", "[1, 4, 9, 9]"});
  Conv2d big(1, 1, 5, gen);
  expect_error([&] { big(rand({1, 1, 3, 3}, gen)); }, {"smaller than the kernel"});
  Conv2d nob(1, 2, {3, 2}, gen, Conv2dOptions().bias(false));
  EXPECT_EQ(nob.weight().sizes(), (Shape{2, 1, 3, 2}));
  EXPECT_FALSE(nob.bias().defined());
}

TEST(MaxPool2d, ShapesAndErrors) {
  MaxPool2d pool(2);
  Generator gen(3);
  Tensor x = rand({2, 3, 8, 6}, gen);
  Tensor y = pool(x);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 4, 3}));
  EXPECT_FLOAT_EQ(
      y.select(0, 1).select(0, 2).select(0, 3).select(0, 1).item<float>(),
      max(x.narrow(0, 1, 1).narrow(1, 2, 1).narrow(2, 6, 2).narrow(3, 2, 2)).item<float>());
  EXPECT_EQ(MaxPool2d(3, 1, 1)(x).sizes(), (Shape{2, 3, 8, 6}));
  expect_error([&] { pool(rand({3, 8, 8}, gen)); }, {"MaxPool2d", "[3, 8, 8]"});
}

TEST(Activations, MatchOps) {
  Generator gen(4);
  Tensor x = randn({3, 5}, gen);
  EXPECT_TRUE(equal(ReLU()(x), relu(x)));
  EXPECT_TRUE(equal(GELU()(x), gelu(x)));
  EXPECT_TRUE(equal(Tanh()(x), tanh(x)));
  EXPECT_TRUE(equal(Sigmoid()(x), sigmoid(x)));
  EXPECT_TRUE(equal(LogSoftmax(1)(x), log_softmax(x, 1)));
  EXPECT_TRUE(allclose(sum(Softmax(-1)(x), {1}), Tensor::ones({3})));
  expect_error([&] { LogSoftmax(2)(x); }, {"LogSoftmax(dim=2)", "[3, 5]"});
  EXPECT_EQ(Flatten()(rand({2, 3, 4, 5}, gen)).sizes(), (Shape{2, 60}));
  EXPECT_EQ(Flatten(0, 1)(rand({2, 3, 4}, gen)).sizes(), (Shape{6, 4}));
  expect_error([&] { Flatten(3)(rand({2, 3}, gen)); }, {"Flatten", "[2, 3]"});
}

TEST(Dropout, TrainAndEval) {
  Generator gen(5);
  Dropout drop(0.25, gen);
  Tensor x = Tensor::ones({10000});
  Tensor y = drop(x);
  auto v = y.to_vector<float>();
  int zeros = 0;
  for (float f : v) {
    if (f == 0.0f)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(f, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros / 10000.0, 0.25, 0.03);
  drop.eval();
  EXPECT_TRUE(equal(drop(x), x));
  // Same seed, same masks; clones continue the same stream.
  Generator a(9), b(9);
  Dropout d1(0.5, a), d2(0.5, b);
  auto c1 = d1.clone_as<Dropout>();
  Tensor y1 = d1(x);
  EXPECT_TRUE(equal(y1, d2(x)));
  EXPECT_TRUE(equal((*c1)(x), y1));
  EXPECT_FALSE(equal(d1(x), y1));
  expect_error([&] { Dropout(1.5, gen); }, {"Dropout", "1.5"});
}

TEST(BatchNorm2d, TrainUpdatesRunningStatsEvalUsesThem) {
  Generator gen(6);
  BatchNorm2d bn(3);
  EXPECT_EQ(bn.state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  Tensor x = randn({4, 3, 5, 5}, gen) * 2.0 + 1.0;
  Tensor y = bn(x);
  // Training output is normalised per channel.
  Tensor m = mean(y, {0, 2, 3});
  EXPECT_LT(max_abs(m), 1e-5f);
  Tensor batch_mean = mean(x, {0, 2, 3});
  EXPECT_TRUE(allclose(bn.running_mean(), batch_mean * 0.1, 1e-5, 1e-6));
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);
  // Unbiased variance feeds running_var.
  Tensor centered = x - mean(x, {0, 2, 3}, true);
  Tensor var_unbiased = sum(centered * centered, {0, 2, 3}) / (4.0 * 25 - 1);
  EXPECT_TRUE(allclose(bn.running_var(), var_unbiased * 0.1 + 0.9, 1e-4, 1e-5));

  bn.eval();
  Tensor rm = bn.running_mean().clone();
  Tensor ye = bn(x);
  Tensor want = (x - rm.view({1, 3, 1, 1})) / sqrt(bn.running_var().view({1, 3, 1, 1}) + 1e-5);
  EXPECT_TRUE(allclose(ye, want, 1e-4, 1e-5));
  EXPECT_TRUE(equal(bn.running_mean(), rm));  // eval leaves the buffers alone
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);

  bn.train();
  expect_error([&] { bn(randn({1, 3, 1, 1}, gen)); }, {"more than 1 value per channel"});
  expect_error(
      [&] {
        bn(randn({2, 4, 3, 3}, gen));
      },
      {"BatchNorm2d(3", "[N, 3, H, W]", "[2, 4, 3, 3]"});

  // momentum = None: cumulative moving average.
  BatchNorm1d cum(2, {.momentum = std::nullopt});
  Tensor a = randn({6, 2}, gen), b = randn({6, 2}, gen);
  cum(a);
  cum(b);
  Tensor want_mean = (mean(a, {0}) + mean(b, {0})) / 2.0;
  EXPECT_TRUE(allclose(cum.running_mean(), want_mean, 1e-5, 1e-6));
  EXPECT_EQ(cum(randn({6, 2, 3}, gen)).sizes(), (Shape{6, 2, 3}));
  expect_error([&] { cum(randn({6, 3}, gen)); }, {"BatchNorm1d", "[6, 3]"});
}

TEST(LayerNorm, NormalisesTrailingDims) {
  Generator gen(7);
  LayerNorm ln(Shape{4, 5});
  Tensor x = randn({3, 4, 5}, gen) * 3.0 + 2.0;
  Tensor y = ln(x);
  EXPECT_LT(max_abs(mean(y, {1, 2})), 1e-5f);
  EXPECT_TRUE(equal(ln.weight(), Tensor::ones({4, 5})));
  EXPECT_TRUE(equal(ln.bias(), Tensor::zeros({4, 5})));
  expect_error([&] { ln(randn({3, 5, 4}, gen)); }, {"LayerNorm", "[3, 5, 4]"});
  LayerNorm plain(5, 1e-5, false);
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_FALSE(plain.weight().defined());
  EXPECT_FALSE(plain.bias().defined());
  init::constant_(ln.weight(), 2.0);  // references, like Linear's
  EXPECT_TRUE(equal(ln.parameter("weight"), Tensor::full({4, 5}, 2.0)));
}

TEST(Embedding, LookupInitAndPadding) {
  Generator gen(8);
  Embedding emb(1000, 8, gen, 0);
  Tensor idx = Tensor::from_vector<int64_t>({0, 5, 5, 999}, {2, 2});
  Tensor y = emb(idx);
  EXPECT_EQ(y.sizes(), (Shape{2, 2, 8}));
  EXPECT_TRUE(equal(y.select(0, 0).select(0, 1), emb.weight().select(0, 5)));
  EXPECT_EQ(max_abs(emb.weight().select(0, 0)), 0.0f);
  // N(0, 1) initialisation.
  EXPECT_NEAR(mean(emb.weight()).item<double>(), 0.0, 0.05);
  EXPECT_NEAR(mean(emb.weight() * emb.weight()).item<double>(), 1.0, 0.05);
  expect_error([&] { emb(Tensor::ones({2})); }, {"Embedding(1000, 8, padding_idx=0)", "int64"});
}

TEST(Losses, ReductionsAndErrors) {
  Generator gen(9);
  Tensor logits = randn({4, 3}, gen);
  Tensor target = Tensor::from_vector<int64_t>({0, 2, 1, 2});
  Tensor lp = log_softmax(logits, 1);
  float manual = 0;
  for (int i = 0; i < 4; ++i)
    manual -= lp.select(0, i).select(0, target.to_vector<int64_t>()[i]).item<float>();
  EXPECT_NEAR(NLLLoss()(lp, target).item<float>(), manual / 4, 1e-6);
  EXPECT_NEAR(NLLLoss(Reduction::kSum)(lp, target).item<float>(), manual, 1e-5);
  EXPECT_EQ(NLLLoss(Reduction::kNone)(lp, target).sizes(), (Shape{4}));
  EXPECT_NEAR(CrossEntropyLoss()(logits, target).item<float>(), manual / 4, 1e-6);
  Tensor ignore = Tensor::from_vector<int64_t>({0, -100, 1, 2});
  float sum3 = 0;
  for (int i : {0, 2, 3})
    sum3 -= lp.select(0, i).select(0, ignore.to_vector<int64_t>()[i]).item<float>();
  EXPECT_NEAR(CrossEntropyLoss()(logits, ignore).item<float>(), sum3 / 3, 1e-6);

  Tensor a = randn({2, 5}, gen), b = randn({2, 5}, gen);
  Tensor d = a - b;
  EXPECT_NEAR(MSELoss()(a, b).item<float>(), mean(d * d).item<float>(), 1e-6);
  EXPECT_NEAR(MSELoss(Reduction::kSum)(a, b).item<float>(), sum(d * d).item<float>(), 1e-5);
  EXPECT_EQ(MSELoss(Reduction::kNone)(a, b).sizes(), (Shape{2, 5}));

  expect_error(
      [&] {
        MSELoss()(a, randn({5, 2}, gen));
      },
      {"MSELoss(reduction=mean)", "[2, 5]", "[5, 2]"});
  expect_error([&] { NLLLoss()(lp, Tensor::zeros({4})); }, {"NLLLoss", "int64"});
  expect_error([&] { CrossEntropyLoss()(logits, Tensor::zeros({3}, kInt64)); },
               {"CrossEntropyLoss", "[4]", "[3]"});
}

TEST(Sequential, ChainsAndNames) {
  Generator gen(10);
  Sequential seq;
  seq.push_back(std::make_shared<Linear>(4, 8, gen))
      .push_back(std::make_shared<ReLU>())
      .add("head", std::make_shared<Linear>(8, 2, gen));
  EXPECT_EQ(seq.state_dict().keys(),
            (std::vector<std::string>{"0.weight", "0.bias", "head.weight", "head.bias"}));
  Tensor x = rand({3, 4}, gen);
  Tensor want = seq.at<Linear>(2)(relu(seq.at<Linear>(0)(x)));
  EXPECT_TRUE(equal(seq(x), want));
  ModuleList list{std::make_shared<Linear>(2, 2, gen), std::make_shared<Tanh>()};
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list.state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias"}));
  expect_error<NotSupported>([&] { list(x); }, {"ModuleList"});
  expect_error([&] { list[5]; }, {"index 5"});
}

TEST(Models, NetForwardBackward) {
  Generator gen(11);
  Net net(gen);
  Tensor x = rand({4, 1, 28, 28}, gen);
  Tensor y = net(x);
  EXPECT_EQ(y.sizes(), (Shape{4, 10}));
  EXPECT_TRUE(allclose(sum(exp(y), {1}), Tensor::ones({4}), 1e-5, 1e-5));
  // The fused path equals the layer-by-layer one.
  Tensor h = relu(net.conv2()(relu(net.conv1()(x))));
  h = flatten(max_pool2d(h, {2, 2}), 1);
  Tensor want = log_softmax(net.fc2()(relu(net.fc1()(h))), 1);
  EXPECT_TRUE(allclose(y, want, 1e-4, 1e-5));
  Tensor target = Tensor::from_vector<int64_t>({1, 2, 3, 4});
  NLLLoss()(y, target).backward();
  for (const auto& [name, p] : net.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().sizes(), p.sizes()) << name;
  }
  expect_error(
      [&] {
        net(rand({4, 1, 32, 32}, gen));
      },
      {"Net", "[N, 1, 28, 28]", "[4, 1, 32, 32]"});
}

TEST(Models, ToyAndASimpleNet) {
  Generator gen(12);
  ToyModel toy(gen);
  EXPECT_EQ(toy(rand({20, 10}, gen)).sizes(), (Shape{20, 5}));
  ASimpleNet simple(gen);
  std::atomic<int64_t> reported{0};
  simple.set_reporter([&](int64_t n) { reported = n; });
  EXPECT_EQ(simple(rand({6, 3}, gen)).sizes(), (Shape{6, 3}));
  EXPECT_EQ(reported.load(), 6);
  auto rep = simple.replicate();
  (*rep)(rand({2, 3}, gen));
  EXPECT_EQ(reported.load(), 2);
  EXPECT_EQ(static_cast<ASimpleNet&>(*rep).last_batch_size(), 2);
  EXPECT_EQ(simple.last_batch_size(), 6);
}

}  // namespace
}  // namespace cohort::nn
