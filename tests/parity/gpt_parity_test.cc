// GPT parity with PyTorch 1.13 (/usr/bin/python3 with torch), as llm.c checks
// its model against PyTorch's: from the same initial weights (cohort's
// state_dict, exchanged as safetensors) and the same batches, cohort's GPT
// gives PyTorch nanoGPT's logits, loss and every parameter's gradient (the
// tied wte/lm_head included) to float32 tolerance, and ten AdamW steps as
// nanoGPT configures them (betas 0.9/0.95, weight decay 0.1 on 2-D tensors
// only) follow the same loss curve to the same weights. Runs once per kernel
// path the host supports and per GPT kernel choice; the PyTorch script
// (torch_gpt_parity.py) runs once for the suite. nn::MultiheadAttention is
// checked against torch.nn.MultiheadAttention beside it. Each test prints the
// measured differences (max |cohort - torch| and that over the tensor's scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>

#include "cohort/base/kernel_path_testing.h"
#include "cohort/nn/models/gpt.h"
#include "cohort/nn/multihead_attention.h"
#include "cohort/optim/optim.h"
#include "parity_testing.h"
#include "tensor_file.h"

namespace cohort {
namespace {

using parity::close;

constexpr int kSteps = 10;
constexpr int64_t kBatch = 4;
constexpr double kLr = 1e-3;
constexpr double kWeightDecay = 0.1;
// Gradients and logits within 1e-4 of their scale (float32 sums in other
// orders through 2 blocks); the loss curve within 1e-5 relative; after ten
// AdamW steps weights within 1e-3 of their scale (Adam divides by sqrt(v),
// so a gradient element near zero moves its weight by a full lr step either
// way: the measured differences are printed).
constexpr double kGradRtol = 1e-4;
constexpr double kLossRtol = 1e-5;
constexpr double kFinalRtol = 1e-3;

nn::GPTConfig parity_config() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 256;
  return c;
}

using Param = std::tuple<KernelPath, nn::GPTKernels>;

class GPTParity : public ::testing::TestWithParam<Param> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("cohort_gpt_parity_" + std::to_string(getpid())));
    std::filesystem::create_directories(*dir_);
    const nn::GPTConfig cfg = parity_config();
    Generator gen(20261125);
    nn::GPT model(cfg, gen);
    parity::write_tensor_file(*dir_ + "/gpt_init.safetensors", model.state_dict());
    TensorDict batches;
    // Learnable targets (a fixed map of the input token), so that ten steps
    // bring the loss down and the curves have a shape to follow.
    for (int i = 0; i < kSteps; ++i) {
      Tensor x = randint(0, cfg.vocab_size, {kBatch, cfg.block_size}, gen);
      Tensor y = x.clone();
      for (int64_t *p = y.data_ptr<int64_t>(), *e = p + y.numel(); p != e; ++p)
        *p = (*p * 7 + 3) % cfg.vocab_size;
      batches.insert("x." + std::to_string(i), x);
      batches.insert("y." + std::to_string(i), y);
    }
    Tensor ignore = batches.at("y.0").clone();
    int64_t* p = ignore.data_ptr<int64_t>();
    for (int64_t i = 0; i < ignore.numel(); i += 7) p[i] = -1;
    batches.insert("y.ignore", ignore);
    parity::write_tensor_file(*dir_ + "/gpt_batches.safetensors", batches);
    {
      nn::MultiheadAttention mha(16, 4, gen);
      TensorDict in;
      for (const auto& [name, t] : mha.state_dict()) in.insert("init." + name, t);
      in.insert("num_heads", Tensor::scalar(4, kInt64));
      in.insert("q", randn({6, 2, 16}, gen));
      in.insert("k", randn({7, 2, 16}, gen));
      in.insert("v", randn({7, 2, 16}, gen));
      in.insert("c", randn({6, 2, 16}, gen));
      // Blocked (nonzero) entries that leave every row some key.
      Tensor am = Tensor::zeros({6, 7}, kInt64), kpm = Tensor::zeros({2, 7}, kInt64);
      for (int64_t i = 0; i < 6; ++i) am.data_ptr<int64_t>()[i * 7 + (i + 2) % 7] = 1;
      kpm.data_ptr<int64_t>()[7 + 6] = kpm.data_ptr<int64_t>()[7 + 0] = 1;
      in.insert("attn_mask", am);
      in.insert("key_padding_mask", kpm);
      parity::write_tensor_file(*dir_ + "/mha_in.safetensors", in);
    }
    {
      std::ofstream f(*dir_ + "/gpt_config.json");
      f << "{\"n_layer\": " << cfg.n_layer << ", \"n_head\": " << cfg.n_head
        << ", \"n_embd\": " << cfg.n_embd << ", \"block_size\": " << cfg.block_size
        << ", \"vocab_size\": " << cfg.vocab_size << ", \"steps\": " << kSteps
        << ", \"lr\": " << kLr << ", \"weight_decay\": " << kWeightDecay << "}\n";
    }
    std::string out;
    if (parity::run(parity::python() + " -c 'import torch'", out) != 0) {
      error_ = new std::string(
          "gpt parity: " + parity::python() +
          " cannot import torch; install Debian's python3-torch (apt-get install python3-torch). "
          "Output: " +
          out);
      return;
    }
    out.clear();
    std::string script = std::string(COHORT_SOURCE_DIR) + "/tests/parity/torch_gpt_parity.py";
    if (parity::run(parity::python() + " " + script + " " + *dir_, out) != 0) {
      error_ = new std::string("gpt parity: " + script + " failed:\n" + out);
      return;
    }
    try {
      torch_ = new TensorDict(parity::read_tensor_file(*dir_ + "/gpt_torch_out.safetensors"));
    } catch (const Error& e) {
      error_ = new std::string("gpt parity: " + script + " wrote no usable output: " + e.what());
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
    const KernelPath path = std::get<0>(GetParam());
    const std::string why = kernel_path_unsupported_reason(path);
    if (!why.empty()) GTEST_SKIP() << kernel_path_name(path) << ": " << why;
    guard_ = std::make_unique<KernelPathGuard>(path);
    if (error_ != nullptr) FAIL() << *error_;
  }
  void TearDown() override { guard_.reset(); }

  // The model at the shared initial weights, computing with this test's kernels.
  static std::unique_ptr<nn::GPT> make_model() {
    nn::GPTConfig cfg = parity_config();
    cfg.kernels = std::get<1>(GetParam());
    Generator gen(0);
    auto model = std::make_unique<nn::GPT>(cfg, gen);
    model->load_state_dict(load("gpt_init.safetensors"));
    return model;
  }
  static TensorDict load(const std::string& file) {
    return parity::read_tensor_file(*dir_ + "/" + file);
  }
  static const Tensor& torch(const std::string& key) { return torch_->at(key); }
  // Prints the measured difference beside the assertion.
  static void report(const std::string& what, const Tensor& a, const Tensor& b) {
    parity::Diff d = parity::diff(a, b);
    std::printf("  %-44s max abs %.3g  rel %.3g\n", what.c_str(), d.max_abs, d.rel());
  }

  std::unique_ptr<KernelPathGuard> guard_;
  static std::string* dir_;
  static std::string* error_;
  static TensorDict* torch_;
};

std::string* GPTParity::dir_ = nullptr;
std::string* GPTParity::error_ = nullptr;
TensorDict* GPTParity::torch_ = nullptr;

INSTANTIATE_TEST_SUITE_P(
    Paths, GPTParity,
    ::testing::Combine(::testing::Values(KernelPath::kBaseline, KernelPath::kAvx2,
                                         KernelPath::kAvx512),
                       ::testing::Values(nn::GPTKernels::kFused, nn::GPTKernels::kComposed)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(kernel_path_name(std::get<0>(info.param))) + "_" +
             nn::gpt_kernels_name(std::get<1>(info.param));
    });

TEST_P(GPTParity, LogitsLossAndEveryGradient) {
  auto model = make_model();
  TensorDict batches = load("gpt_batches.safetensors");
  Tensor logits = (*model)(batches.at("x.0"));
  Tensor loss = (*model)(batches.at("x.0"), batches.at("y.0"));
  loss.backward();
  report("logits", logits, torch("gpt.logits"));
  report("loss", loss, torch("gpt.loss"));
  EXPECT_TRUE(close("logits", logits, torch("gpt.logits"), kGradRtol));
  EXPECT_TRUE(close("loss", loss, torch("gpt.loss"), kLossRtol, 0));
  size_t n = 0;
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, p] : model->named_parameters()) {
    const Tensor& want = torch("gpt.grad." + name);
    EXPECT_TRUE(close("grad of " + name, p.grad(), want, kGradRtol)) << name;
    parity::Diff d = parity::diff(p.grad(), want);
    if (d.rel() >= worst) worst = d.rel(), worst_name = name;
    ++n;
  }
  EXPECT_EQ(n, model->named_parameters().size());
  // The tied tensor: PyTorch's gradient sums the embedding and the head.
  report("grad of transformer.wte.weight (tied)", model->wte().weight().grad(),
         torch("gpt.grad.transformer.wte.weight"));
  EXPECT_TRUE(model->lm_head().weight().grad().is_same(model->wte().weight().grad()));
  std::printf("  worst gradient: %s, rel %.3g over %zu tensors\n", worst_name.c_str(), worst, n);
  NoGradGuard no_grad;
  Tensor ignore_loss = (*model)(batches.at("x.0"), batches.at("y.ignore"));
  report("loss with -1 targets", ignore_loss, torch("gpt.loss_ignore"));
  EXPECT_TRUE(close("loss with -1 targets", ignore_loss, torch("gpt.loss_ignore"), kLossRtol, 0));
}

TEST_P(GPTParity, TenAdamWStepsFollowTheSameLossCurve) {
  auto model = make_model();
  TensorDict batches = load("gpt_batches.safetensors");
  nn::WeightDecayGroups groups = nn::weight_decay_groups(*model);
  optim::AdamWOptions o{.lr = kLr, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = kWeightDecay};
  optim::AdamW opt(groups.decay, o);
  o.weight_decay = 0;
  opt.add_param_group(groups.no_decay, o);
  std::vector<double> losses;
  for (int i = 0; i < kSteps; ++i) {
    opt.zero_grad();
    Tensor loss =
        (*model)(batches.at("x." + std::to_string(i)), batches.at("y." + std::to_string(i)));
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  std::vector<double> want = torch("gpt.losses").to_vector<double>();
  ASSERT_EQ(want.size(), losses.size());
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], want[i], kLossRtol * std::abs(want[i])) << "step " << i;
    worst = std::max(worst, std::abs(losses[i] - want[i]) / std::abs(want[i]));
  }
  std::printf("  losses %.6f -> %.6f (torch %.6f -> %.6f), max rel diff %.3g\n", losses.front(),
              losses.back(), want.front(), want.back(), worst);
  EXPECT_LT(losses.back(), losses.front());
  // The key third of each c_attn.bias has, in exact arithmetic, a zero
  // gradient (softmax is invariant to a shift shared by all keys of a query),
  // so both sides' Adam turn float32 noise into steps of up to lr each way:
  // those elements are only held to 2 * steps * lr; the q and v thirds to kFinalRtol.
  double worst_final = 0;
  std::string worst_name;
  const int64_t c = parity_config().n_embd;
  for (const auto& [name, p] : model->named_parameters()) {
    const Tensor& w = torch("gpt.final." + name);
    if (name.ends_with("attn.c_attn.bias")) {
      for (int64_t part = 0; part < 3; ++part) {
        Tensor a = narrow(p, 0, part * c, c), b = narrow(w, 0, part * c, c);
        std::string what = "final " + name + " [" + "qkv"[part] + "]";
        if (part == 1) {
          EXPECT_TRUE(close(what, a, b, 0, 2 * kSteps * kLr)) << what;
          continue;
        }
        EXPECT_TRUE(close(what, a, b, kFinalRtol)) << what;
        parity::Diff d = parity::diff(a, b);
        if (d.rel() >= worst_final) worst_final = d.rel(), worst_name = what;
      }
      continue;
    }
    EXPECT_TRUE(close("final " + name, p, w, kFinalRtol)) << name;
    parity::Diff d = parity::diff(p, w);
    if (d.rel() >= worst_final) worst_final = d.rel(), worst_name = name;
  }
  std::printf("  worst final weight: %s, rel %.3g\n", worst_name.c_str(), worst_final);
}

// torch.nn.MultiheadAttention from the same weights: with an attention mask
// and a key padding mask (the composed path, attention weights returned), and
// as plain self-attention without weights (the fused path). The GPT kernel
// choice does not apply; it runs under each like the rest of the suite.
TEST_P(GPTParity, MultiheadAttention) {
  TensorDict in = load("mha_in.safetensors");
  Generator gen(0);
  nn::MultiheadAttention mha(16, 4, gen);
  TensorDict init;
  for (const auto& [name, t] : in)
    if (name.starts_with("init.")) init.insert(name.substr(5), t);
  mha.load_state_dict(init);
  Tensor q = in.at("q").clone().set_requires_grad(true);
  Tensor k = in.at("k").clone().set_requires_grad(true);
  Tensor v = in.at("v").clone().set_requires_grad(true);
  auto [out, w] = mha(
      q, k, v, {.key_padding_mask = in.at("key_padding_mask"), .attn_mask = in.at("attn_mask")});
  sum(mul(out, in.at("c"))).backward();
  report("mha out", out, torch("mha.out"));
  EXPECT_TRUE(close("mha out", out, torch("mha.out"), kGradRtol));
  EXPECT_TRUE(close("mha weights", w, torch("mha.w"), kGradRtol));
  EXPECT_TRUE(close("mha grad q", q.grad(), torch("mha.gq"), kGradRtol));
  EXPECT_TRUE(close("mha grad k", k.grad(), torch("mha.gk"), kGradRtol));
  EXPECT_TRUE(close("mha grad v", v.grad(), torch("mha.gv"), kGradRtol));
  for (const auto& [name, p] : mha.named_parameters())
    EXPECT_TRUE(close("mha grad " + name, p.grad(), torch("mha.grad." + name), kGradRtol));
  report("mha grad in_proj_weight", mha.in_proj_weight().grad(), torch("mha.grad.in_proj_weight"));
  Tensor x = in.at("q").clone().set_requires_grad(true);
  Tensor self = mha(x, x, x, {.need_weights = false}).first;
  sum(mul(self, in.at("c"))).backward();
  report("mha self-attention (fused) out", self, torch("mha.self_out"));
  EXPECT_TRUE(close("mha self out", self, torch("mha.self_out"), kGradRtol));
  EXPECT_TRUE(close("mha self grad x", x.grad(), torch("mha.self_gx"), kGradRtol));
}

}  // namespace
}  // namespace cohort
