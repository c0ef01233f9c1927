// Parity with PyTorch 1.13 (/usr/bin/python3 with torch): cohort's Net and
// ToyModel, given the same initial weights and batches, must give the same
// outputs, losses and gradients, and follow the same loss curves under SGD
// with momentum (plus clip_grad_norm, the reference recipe), Adam and AdamW;
// the LR schedulers must produce the same sequences. The C++ side writes the
// weights and batches, runs torch_parity.py once for the whole suite, and
// compares with its own results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cohort/base/cpu.h"
#include "cohort/base/kernel_path_testing.h"
#include "cohort/nn/nn.h"
#include "cohort/optim/optim.h"
#include "parity_testing.h"
#include "tensor_file.h"

namespace cohort {
namespace {

constexpr int kSteps = 20;
// Losses follow PyTorch's to ~1e-6 over the whole run, and the first
// gradients to ~1e-6 of their scale. Later gradients (hence their norms and the
// final weights) can differ by a few 1e-4 of their scale: the two convolutions
// sum in different orders (Winograd vs PyTorch's), so a pre-activation within
// ~1e-7 of zero can land on different sides of a ReLU and route its gradient
// differently -- measured here: at most 7e-4 of the scale of a conv bias
// gradient on single batches, 1.2e-4 on the gradient norm, 4.7e-4 on the final
// conv weights, with losses still within 1.2e-6.
constexpr double kTrainRtol = 2e-3;

using parity::close;
using parity::python;
using parity::run;

// Every test runs once per kernel path the host can execute (baseline, avx2,
// avx512), the PyTorch script once for all.
class Parity : public ::testing::TestWithParam<KernelPath> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("cohort_parity_" + std::to_string(getpid())));
    std::filesystem::create_directories(*dir_);
    Generator gen(20261122);
    {
      nn::Net net(gen);
      parity::write_tensor_file(*dir_ + "/net_init.safetensors", net.state_dict());
      TensorDict batches;
      for (int i = 0; i < kSteps; ++i) {
        batches.insert("x." + std::to_string(i), rand({16, 1, 28, 28}, gen));
        batches.insert("y." + std::to_string(i), randint(0, 10, {16}, gen));
      }
      parity::write_tensor_file(*dir_ + "/net_batches.safetensors", batches);
    }
    {
      nn::ToyModel toy(gen);
      parity::write_tensor_file(*dir_ + "/toy_init.safetensors", toy.state_dict());
      TensorDict batches;
      for (int i = 0; i < kSteps; ++i) {
        batches.insert("x." + std::to_string(i), randn({20, 10}, gen));
        batches.insert("y." + std::to_string(i), randn({20, 5}, gen));
      }
      parity::write_tensor_file(*dir_ + "/toy_batches.safetensors", batches);
    }
    {
      TensorDict in;
      auto put = [&](const std::string& k, Tensor t) { in.insert(k, t); };
      put("bn.x1", randn({4, 3, 5, 5}, gen) * 2.0 + 1.0);
      put("bn.x2", randn({4, 3, 5, 5}, gen));
      put("bn.c", randn({4, 3, 5, 5}, gen));
      put("bn.weight", rand({3}, gen) + 0.5);
      put("bn.bias", randn({3}, gen));
      put("ln.x", randn({3, 4, 5}, gen) * 3.0);
      put("ln.c", randn({3, 4, 5}, gen));
      put("ln.weight", randn({4, 5}, gen));
      put("ln.bias", randn({4, 5}, gen));
      put("act.x", randn({64}, gen) * 3.0);
      put("act.c", randn({64}, gen));
      put("emb.weight", randn({10, 4}, gen));
      put("emb.idx", Tensor::from_vector<int64_t>({1, 2, 9, 1, 0, 2}, {2, 3}));
      put("emb.c", randn({2, 3, 4}, gen));
      put("ce.logits", randn({6, 5}, gen) * 2.0);
      put("ce.target", Tensor::from_vector<int64_t>({0, 4, -100, 2, 2, 1}));
      put("conv.x", randn({2, 3, 9, 9}, gen));
      put("conv.weight", randn({4, 3, 3, 3}, gen) * 0.2);
      put("conv.bias", randn({4}, gen));
      put("conv.c", randn({2, 4, 5, 5}, gen));
      put("pool.x", randn({2, 3, 9, 9}, gen));
      put("pool.c", randn({2, 3, 5, 5}, gen));
      parity::write_tensor_file(*dir_ + "/layers_in.safetensors", in);
    }
    std::string out;
    if (run(python() + " -c 'import torch'", out) != 0) {
      error_ = new std::string(
          "parity: " + python() +
          " cannot import torch; install Debian's python3-torch (apt-get install python3-torch). "
          "Output: " +
          out);
      return;
    }
    out.clear();
    std::string script = std::string(COHORT_SOURCE_DIR) + "/tests/parity/torch_parity.py";
    if (run(python() + " " + script + " " + *dir_, out) != 0) {
      error_ = new std::string("parity: " + script + " failed:\n" + out);
      return;
    }
    try {
      torch_ = new TensorDict(parity::read_tensor_file(*dir_ + "/torch_out.safetensors"));
    } catch (const Error& e) {
      error_ = new std::string("parity: " + script + " wrote no usable output: " + e.what());
    }
  }

  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete error_;
    delete torch_;
    dir_ = error_ = nullptr;
    torch_ = nullptr;
  }

  void SetUp() override {
    const std::string why = kernel_path_unsupported_reason(GetParam());
    if (!why.empty()) GTEST_SKIP() << kernel_path_name(GetParam()) << ": " << why;
    guard_ = std::make_unique<KernelPathGuard>(GetParam());
    if (error_ != nullptr) FAIL() << *error_;
  }
  void TearDown() override { guard_.reset(); }

  std::unique_ptr<KernelPathGuard> guard_;

  static TensorDict load(const std::string& file) {
    return parity::read_tensor_file(*dir_ + "/" + file);
  }
  static const Tensor& torch(const std::string& key) { return torch_->at(key); }

  static std::string* dir_;
  static std::string* error_;
  static TensorDict* torch_;
};

std::string* Parity::dir_ = nullptr;
std::string* Parity::error_ = nullptr;
TensorDict* Parity::torch_ = nullptr;

INSTANTIATE_TEST_SUITE_P(Paths, Parity,
                         ::testing::Values(KernelPath::kBaseline, KernelPath::kAvx2,
                                           KernelPath::kAvx512),
                         [](const ::testing::TestParamInfo<KernelPath>& info) {
                           return std::string(kernel_path_name(info.param));
                         });

TEST_P(Parity, NetForwardLossAndGradients) {
  Generator gen(0);
  nn::Net net(gen);
  net.load_state_dict(load("net_init.safetensors"));
  TensorDict batches = load("net_batches.safetensors");
  Tensor out = net(batches.at("x.0"));
  Tensor loss = nll_loss(out, batches.at("y.0"));
  loss.backward();
  EXPECT_TRUE(close("output", out, torch("net.out")));
  EXPECT_TRUE(close("loss", loss, torch("net.loss"), 1e-5));
  for (const auto& [name, p] : net.named_parameters())
    EXPECT_TRUE(close("grad of " + name, p.grad(), torch("net.grad." + name)));
}

TEST_P(Parity, NetSgdMomentumLossCurve) {
  Generator gen(0);
  nn::Net net(gen);
  net.load_state_dict(load("net_init.safetensors"));
  TensorDict batches = load("net_batches.safetensors");
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  std::vector<double> losses, norms;
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    Tensor loss =
        nll_loss(net(batches.at("x." + std::to_string(i))), batches.at("y." + std::to_string(i)));
    loss.backward();
    norms.push_back(optim::clip_grad_norm(net.parameters(), 10.0));
    opt.step();
    losses.push_back(loss.item<double>());
  }
  auto tl = torch("net.losses").to_vector<double>(), tn = torch("net.norms").to_vector<double>();
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(losses[i], tl[i], 1e-4 * std::abs(tl[i]) + 1e-6) << "loss at step " << i;
    EXPECT_NEAR(norms[i], tn[i], kTrainRtol * std::abs(tn[i])) << "grad norm at step " << i;
  }
  for (const auto& [name, p] : net.named_parameters())
    EXPECT_TRUE(close("final " + name, p, torch("net.final." + name), kTrainRtol));
}

void toy_run(const std::string& key, optim::Optimizer& opt, nn::ToyModel& model,
             const TensorDict& batches, const TensorDict& torch_out) {
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    Tensor loss =
        mse_loss(model(batches.at("x." + std::to_string(i))), batches.at("y." + std::to_string(i)));
    loss.backward();
    opt.step();
    double want = torch_out.at("toy." + key + ".losses").to_vector<double>()[i];
    EXPECT_NEAR(loss.item<double>(), want, 1e-4 * std::abs(want) + 1e-6)
        << key << " loss at step " << i;
  }
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_TRUE(close(key + " final " + name, p, torch_out.at("toy." + key + ".final." + name)));
}

TEST_P(Parity, ToyModelAdam) {
  Generator gen(0);
  nn::ToyModel model(gen);
  model.load_state_dict(load("toy_init.safetensors"));
  optim::Adam opt(model.parameters(), {.lr = 0.01});
  toy_run("adam", opt, model, load("toy_batches.safetensors"), *torch_);
}

TEST_P(Parity, ToyModelAdamWAmsgrad) {
  Generator gen(0);
  nn::ToyModel model(gen);
  model.load_state_dict(load("toy_init.safetensors"));
  optim::AdamW opt(model.parameters(), {.lr = 0.01, .weight_decay = 0.05, .amsgrad = true});
  toy_run("adamw", opt, model, load("toy_batches.safetensors"), *torch_);
}

// Leaf copy of an input, requiring grad.
Tensor leaf(const Tensor& t) {
  Tensor c = t.clone();
  c.set_requires_grad(true);
  return c;
}

TEST_P(Parity, Layers) {
  TensorDict in = load("layers_in.safetensors");
  auto weighted = [&](const Tensor& y, const std::string& c) { return sum(y * in.at(c)); };
  auto check = [&](const std::string& key, const Tensor& mine) {
    EXPECT_TRUE(close(key, mine, torch(key), 1e-5, 1e-6));
  };
  Generator gen(0);
  {
    nn::BatchNorm2d bn(3);
    TensorDict sd = bn.state_dict();
    sd.insert_or_assign("weight", in.at("bn.weight"));
    sd.insert_or_assign("bias", in.at("bn.bias"));
    bn.load_state_dict(sd);
    Tensor x1 = leaf(in.at("bn.x1"));
    Tensor y1 = bn(x1), y2 = bn(in.at("bn.x2"));
    (weighted(y1, "bn.c") + weighted(y2, "bn.c")).backward();
    check("bn.y1", y1);
    check("bn.y2", y2);
    check("bn.gx1", x1.grad());
    check("bn.gweight", bn.weight().grad());
    check("bn.gbias", bn.bias().grad());
    check("bn.running_mean", bn.running_mean());
    check("bn.running_var", bn.running_var());
    EXPECT_TRUE(equal(bn.num_batches_tracked(), torch("bn.num_batches_tracked")));
    bn.eval();
    check("bn.y_eval", bn(in.at("bn.x1")));
  }
  {
    nn::LayerNorm ln(Shape{4, 5});
    TensorDict sd;
    sd.insert("weight", in.at("ln.weight"));
    sd.insert("bias", in.at("ln.bias"));
    ln.load_state_dict(sd);
    Tensor x = leaf(in.at("ln.x"));
    Tensor y = ln(x);
    weighted(y, "ln.c").backward();
    check("ln.y", y);
    check("ln.gx", x.grad());
    check("ln.gweight", ln.weight().grad());
    check("ln.gbias", ln.bias().grad());
  }
  std::vector<std::pair<std::string, nn::ModulePtr>> acts = {
      {"gelu", std::make_shared<nn::GELU>()},
      {"tanh", std::make_shared<nn::Tanh>()},
      {"sigmoid", std::make_shared<nn::Sigmoid>()}};
  for (auto& [name, act] : acts) {
    Tensor x = leaf(in.at("act.x"));
    Tensor y = (*act)(x);
    weighted(y, "act.c").backward();
    check(name + ".y", y);
    check(name + ".gx", x.grad());
  }
  {
    nn::Embedding emb(10, 4, gen, 2);
    TensorDict sd;
    sd.insert("weight", in.at("emb.weight"));
    emb.load_state_dict(sd);
    Tensor y = emb(in.at("emb.idx"));
    weighted(y, "emb.c").backward();
    check("emb.y", y);
    check("emb.gweight", emb.weight().grad());
  }
  {
    Tensor logits = leaf(in.at("ce.logits"));
    Tensor loss = nn::CrossEntropyLoss()(logits, in.at("ce.target"));
    loss.backward();
    check("ce.loss", loss);
    check("ce.glogits", logits.grad());
  }
  {
    nn::Conv2d conv(3, 4, 3, gen, nn::Conv2dOptions().stride(2).padding(1));
    TensorDict sd;
    sd.insert("weight", in.at("conv.weight"));
    sd.insert("bias", in.at("conv.bias"));
    conv.load_state_dict(sd);
    Tensor x = leaf(in.at("conv.x"));
    Tensor y = conv(x);
    weighted(y, "conv.c").backward();
    check("conv.y", y);
    check("conv.gx", x.grad());
    check("conv.gweight", conv.weight().grad());
    check("conv.gbias", conv.bias().grad());
  }
  {
    Tensor x = leaf(in.at("pool.x"));
    Tensor y = nn::MaxPool2d(3, 2, 1)(x);
    weighted(y, "pool.c").backward();
    check("pool.y", y);
    check("pool.gx", x.grad());
  }
}

TEST_P(Parity, Schedulers) {
  auto check = [&](const std::string& key, auto make) {
    Tensor p = Tensor::zeros({1});
    p.set_requires_grad(true);
    optim::SGD opt({p}, {.lr = 0.1});
    auto sched = make(opt);
    auto want = torch("sched." + key).to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(opt.lr(), want[i], 1e-12) << key << " at epoch " << i;
      sched->step();
    }
  };
  check("step", [](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 3, 0.5); });
  check("cosine", [](optim::Optimizer& o) {
    return std::make_unique<optim::CosineAnnealingLR>(o, 7, 0.001);
  });
  check("linear",
        [](optim::Optimizer& o) { return std::make_unique<optim::LinearLR>(o, 0.25, 1.0, 4); });
}

}  // namespace
}  // namespace cohort
