#include "cohort/nn/module.h"

#include <gtest/gtest.h>

#include "cohort/nn/nn.h"
#include "cohort/nn/test_util.h"

namespace cohort::nn {
namespace {

using testing::expect_error;

std::vector<std::string> names(const NamedTensors& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

// A model with a nested Sequential and a BatchNorm, to check PyTorch's order.
class Block : public Cloneable<Block> {
 public:
  explicit Block(Generator& gen) : Cloneable("Block") {
    register_module("fc", std::make_shared<Linear>(4, 3, gen));
    register_module("bn", std::make_shared<BatchNorm1d>(3));
    register_parameter("scale", Tensor::ones({3}));
  }
  Tensor forward(const Tensor& x) override {
    return child<BatchNorm1d>(1).forward(child<Linear>(0).forward(x)) * param(0);
  }
};

TEST(Module, NamesFollowPyTorch) {
  Generator gen(1);
  Net net(gen);
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(net.num_parameters(), 20 * 25 + 20 + 20 * 20 * 25 + 20 + 2000 * 50 + 50 + 500 + 10);
  ToyModel toy(gen);
  EXPECT_EQ(names(toy.named_parameters()),
            (std::vector<std::string>{"net1.weight", "net1.bias", "net2.weight", "net2.bias"}));
  ASimpleNet simple(gen);
  EXPECT_EQ(names(simple.named_parameters()),
            (std::vector<std::string>{"net.0.weight", "net.2.weight", "net.4.weight"}));
  Block block(gen);
  // Own parameters first, then children in order; state_dict interleaves
  // buffers per module, as PyTorch's does.
  EXPECT_EQ(names(block.named_parameters()),
            (std::vector<std::string>{"scale", "fc.weight", "fc.bias", "bn.weight", "bn.bias"}));
  EXPECT_EQ(
      names(block.named_buffers()),
      (std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  EXPECT_EQ(
      block.state_dict().keys(),
      (std::vector<std::string>{"scale", "fc.weight", "fc.bias", "bn.weight", "bn.bias",
                                "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
  auto mods = block.named_modules();
  ASSERT_EQ(mods.size(), 3u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[2].first, "bn");
  EXPECT_EQ(block.children().size(), 2u);
  EXPECT_EQ(block.child("fc")->type_name(), "Linear");
  for (const auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, RegistrationErrors) {
  Generator gen(1);
  class Bad : public Cloneable<Bad> {
   public:
    Bad() : Cloneable("Bad") {}
    void reg(const std::string& name, Tensor t, bool grad = true) {
      register_parameter(name, t, grad);
    }
    void reg_child(const std::string& name, ModulePtr m) { register_module(name, m); }
  };
  Bad bad;
  bad.reg("w", Tensor::ones({2}));
  bad.reg("frozen", Tensor::ones({2}), /*grad=*/false);
  EXPECT_FALSE(bad.parameter("frozen").requires_grad());
  EXPECT_EQ(bad.state_dict().keys(), (std::vector<std::string>{"w", "frozen"}));
  expect_error([&] { bad.reg("w", Tensor::ones({2})); }, {"Bad", "'w'", "already taken"});
  expect_error([&] { bad.reg("a.b", Tensor::ones({2})); }, {"'a.b'"});
  expect_error([&] { bad.reg("i", Tensor::ones({2}, kInt64)); }, {"floating"});
  expect_error([&] { bad.reg_child("c", nullptr); }, {"null"});
  expect_error([&] { bad.parameter("nope"); }, {"Bad()", "'nope'"});
  expect_error<NotSupported>([&] { bad.forward(Tensor::ones({1})); }, {"Bad", "forward"});
}

TEST(Module, StateDictRoundTrip) {
  Generator g1(1), g2(2);
  Net a(g1), b(g2);
  Tensor x = rand({2, 1, 28, 28}, g1);
  EXPECT_FALSE(allclose(a(x), b(x)));
  TensorDict sd = a.state_dict();
  EXPECT_EQ(sd.size(), 8u);
  EXPECT_FALSE(sd.at("fc1.weight").requires_grad());
  auto result = b.load_state_dict(sd);
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  EXPECT_TRUE(equal(a(x), b(x)));
  // Loading copies: b's tensors are still its own.
  EXPECT_FALSE(b.fc1().weight().storage() == a.fc1().weight().storage());
  EXPECT_TRUE(b.fc1().weight().requires_grad());

  // BatchNorm buffers, including the int64 counter, round-trip too.
  Block c(g1), d(g2);
  c.train();
  c(rand({5, 4}, g1));
  c(rand({5, 4}, g1));
  EXPECT_EQ(c.state_dict().at("bn.num_batches_tracked").item<int64_t>(), 2);
  d.load_state_dict(c.state_dict());
  EXPECT_EQ(d.state_dict().at("bn.num_batches_tracked").item<int64_t>(), 2);
  EXPECT_TRUE(equal(d.state_dict().at("bn.running_var"), c.state_dict().at("bn.running_var")));
}

TEST(Module, LoadStateDictErrors) {
  Generator gen(3);
  Net net(gen);
  TensorDict sd = net.state_dict();
  Tensor before = net.fc2().weight().clone();

  TensorDict missing = net.state_dict();
  missing.erase("fc2.bias");
  expect_error([&] { net.load_state_dict(missing); }, {"Net", "missing keys [fc2.bias]"});
  auto r = net.load_state_dict(missing, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"fc2.bias"});

  TensorDict extra = net.state_dict();
  extra.insert("fc3.weight", Tensor::ones({1}));
  expect_error([&] { net.load_state_dict(extra); }, {"unexpected keys [fc3.weight]"});

  TensorDict wrong;
  for (const auto& [n, t] : sd)
    wrong.insert(n, n == "fc1.weight" ? Tensor::zeros({50, 320}) : Tensor::zeros(t.sizes()));
  expect_error([&] { net.load_state_dict(wrong); }, {"fc1.weight", "[50, 320]", "[50, 2000]"});
  expect_error([&] { net.load_state_dict(wrong, false); }, {"fc1.weight"});
  // Nothing was copied by the failed loads.
  EXPECT_TRUE(equal(net.fc2().weight(), before));
}

TEST(Module, CloneIsDeepReplicateSharesParameters) {
  Generator gen(4);
  auto net = std::make_shared<Net>(gen);
  auto copy = net->clone_as<Net>();
  EXPECT_EQ(copy->state_dict().keys(), net->state_dict().keys());
  Tensor x = rand({3, 1, 28, 28}, gen);
  EXPECT_TRUE(equal((*copy)(x), (*net)(x)));
  EXPECT_FALSE(copy->conv1().weight().storage() == net->conv1().weight().storage());
  EXPECT_TRUE(copy->conv1().weight().requires_grad());
  {
    NoGradGuard g;
    copy->fc2().weight().fill_(0);
  }
  EXPECT_FALSE(equal((*copy)(x), (*net)(x)));

  auto rep = net->replicate();
  auto params = net->parameters(), rparams = rep->parameters();
  ASSERT_EQ(params.size(), rparams.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params[i].is_same(rparams[i]));
  // Gradients of a replica land in the original's parameters.
  sum((*rep)(x)).backward();
  EXPECT_TRUE(net->fc2().weight().grad().defined());

  // Buffers of replicas are copies; modes are copied.
  Block block(gen);
  block.eval();
  auto brep = block.replicate();
  EXPECT_FALSE(brep->is_training());
  EXPECT_FALSE(brep->buffers()[0].is_same(block.buffers()[0]));
  EXPECT_TRUE(brep->parameters()[0].is_same(block.parameters()[0]));
}

TEST(Module, CloneKeepsTiedParametersTied) {
  class Tied : public Cloneable<Tied> {
   public:
    Tied() : Cloneable("Tied") {
      Tensor w = Tensor::ones({2});
      register_parameter("a", w);
      register_parameter("b", w);
    }
  };
  Tied t;
  EXPECT_EQ(t.parameters().size(), 1u);  // listed once, as PyTorch
  EXPECT_EQ(t.state_dict().size(), 2u);  // but saved under both names
  auto c = t.clone();
  auto sd = c->state_dict();
  EXPECT_TRUE(sd.at("a").storage() == sd.at("b").storage());
}

// forward overloads with several inputs, called as LibTorch users write them:
// m(x), m(x, y), and through a Child member.
class TwoInputs : public Cloneable<TwoInputs> {
 public:
  explicit TwoInputs(Generator& gen) : Cloneable("TwoInputs") {
    fc_ = register_module("fc", std::make_shared<Linear>(3, 2, gen));
  }
  Tensor forward(const Tensor& x) override { return fc_(x); }
  Tensor forward(const Tensor& x, const Tensor& target) { return mse_loss(fc_(x), target); }
  Tensor forward(const Tensor& x, double scale) { return mul(fc_(x), scale); }

 private:
  Child<Linear> fc_;
};

class HoldsTwoInputs : public Cloneable<HoldsTwoInputs> {
 public:
  explicit HoldsTwoInputs(Generator& gen) : Cloneable("HoldsTwoInputs") {
    inner_ = register_module("inner", std::make_shared<TwoInputs>(gen));
  }
  Tensor forward(const Tensor& x) override { return inner_(x); }
  Tensor forward(const Tensor& x, const Tensor& target) { return inner_(x, target); }

 private:
  Child<TwoInputs> inner_;
};

TEST(Module, CallOperatorForwardsSeveralInputs) {
  Generator gen(3);
  TwoInputs m(gen);
  Tensor x = randn({4, 3}, gen), y = randn({4, 2}, gen);
  EXPECT_TRUE(equal(m(x), m.forward(x)));
  EXPECT_TRUE(equal(m(x, y), m.forward(x, y)));
  EXPECT_TRUE(equal(m(x, 2.0), mul(m.forward(x), 2.0)));
  HoldsTwoInputs outer(gen);
  EXPECT_EQ(outer(x, y).dim(), 0);
  EXPECT_EQ(outer(x).sizes(), (Shape{4, 2}));
  Module& base = m;  // through the base class: the one-input virtual forward
  EXPECT_TRUE(equal(base(x), m.forward(x)));
  auto copy = outer.clone_as<HoldsTwoInputs>();  // the Child member is re-pointed
  EXPECT_TRUE(equal((*copy)(x, y), outer(x, y)));
}

TEST(Module, TrainEvalAndZeroGrad) {
  Generator gen(5);
  Sequential seq{std::make_shared<Linear>(3, 2, gen), std::make_shared<Dropout>(0.5, gen)};
  EXPECT_TRUE(seq.is_training());
  seq.eval();
  EXPECT_FALSE(seq[1]->is_training());
  seq.train();
  EXPECT_TRUE(seq.at<Dropout>(1).is_training());
  Tensor x = rand({4, 3}, gen);
  sum(seq(x)).backward();
  Tensor g = seq.at<Linear>(0).weight().grad();
  ASSERT_TRUE(g.defined());
  seq.zero_grad();
  EXPECT_TRUE(g.is_same(seq.at<Linear>(0).weight().grad()));  // zeroed in place
  EXPECT_EQ(sum(abs(g)).item<float>(), 0.0f);
  seq.zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(seq.at<Linear>(0).weight().grad().defined());
  expect_error([&] { seq.at<Linear>(1); }, {"Dropout"});
}

TEST(Module, ApplyVisitsChildrenFirst) {
  Generator gen(7);
  ToyModel toy(gen);
  std::vector<std::string> seen;
  toy.apply([&](Module& m) {
    seen.push_back(m.type_name());
    if (auto* fc = dynamic_cast<Linear*>(&m)) init::constant_(fc->weight(), 0.5);
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"Linear", "ReLU", "Linear", "ToyModel"}));
  EXPECT_EQ(max(toy.net2().weight()).item<float>(), 0.5f);
  EXPECT_TRUE(toy.net2().weight().requires_grad());
}

TEST(Module, Repr) {
  Generator gen(6);
  Net net(gen);
  std::string r = net.repr();
  EXPECT_NE(r.find("(conv1): Conv2d(1, 20, kernel_size=(5, 5), stride=(1, 1))"), std::string::npos)
      << r;
  EXPECT_NE(r.find("(fc1): Linear(in_features=2000, out_features=50, bias=True)"),
            std::string::npos)
      << r;
}

TEST(Module, ForwardHooksRunAroundCallOperatorsOnly) {
  Generator gen(1);
  auto seq = std::make_shared<Sequential>();
  seq->push_back(std::make_shared<Linear>(3, 2, gen));
  seq->push_back(std::make_shared<ReLU>());
  Module& lin = *seq->children()[0];
  std::vector<std::string> log;
  uint64_t pre =
      lin.register_forward_pre_hook([&](Module& m) { log.push_back("pre " + m.type_name()); });
  lin.register_forward_hook([&](Module& m, Tensor& out) {
    log.push_back("post " + m.type_name());
    out = mul(out, 0.0);  // a hook may replace the output
  });
  Tensor x = Tensor::ones({1, 3});
  Tensor y = (*seq)(x);  // Sequential calls its children through the hooks
  EXPECT_EQ(log, (std::vector<std::string>{"pre Linear", "post Linear"}));
  EXPECT_EQ(sum(y).item<double>(), 0.0);
  lin.forward(x);  // a direct forward runs no hooks
  EXPECT_EQ(log.size(), 2u);
  lin.remove_forward_hook(pre);
  lin(x);
  EXPECT_EQ(log, (std::vector<std::string>{"pre Linear", "post Linear", "post Linear"}));
  auto copy = seq->clone();  // hooks are not copied
  EXPECT_FALSE(copy->children()[0]->has_forward_hooks());
}

}  // namespace
}  // namespace cohort::nn
