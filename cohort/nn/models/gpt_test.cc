// GPT: configuration, names, parameter count, the tied weight, initialisation,
// errors, copies, the KV cache against the full forward, generation, and a
// tiny model overfitting one batch. Parity with PyTorch is in tests/parity.
#include "cohort/nn/models/gpt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "cohort/nn/models/gpt_generate.h"
#include "cohort/nn/test_util.h"

namespace cohort::nn {
namespace {

using testing::expect_error;

GPTConfig tiny() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 11;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<double>(); }

double std_of(const Tensor& t) {
  Tensor d = sub(t, mean(t));
  return std::sqrt(mean(mul(d, d)).item<double>());
}

TEST(GPTConfig, PresetsAndValidation) {
  GPTConfig r = GPTConfig::reference();
  EXPECT_EQ(r.n_layer, 4);
  EXPECT_EQ(r.n_head, 4);
  EXPECT_EQ(r.n_embd, 256);
  EXPECT_EQ(r.block_size, 128);
  EXPECT_EQ(r.vocab_size, 256);
  GPTConfig g = GPTConfig::gpt2();
  EXPECT_EQ(g.n_layer, 12);
  EXPECT_EQ(g.n_head, 12);
  EXPECT_EQ(g.n_embd, 768);
  EXPECT_EQ(g.block_size, 1024);
  EXPECT_EQ(g.vocab_size, 50304);
  EXPECT_EQ(g.vocab_size % 64, 0);
  EXPECT_NO_THROW(r.validate());
  EXPECT_NO_THROW(g.validate());
  GPTConfig bad = tiny();
  bad.n_head = 3;
  expect_error([&] { bad.validate(); }, {"GPTConfig", "n_embd (16)", "multiple of n_head (3)"});
  bad = tiny();
  bad.vocab_size = 0;
  expect_error([&] { bad.validate(); }, {"vocab_size must be positive, got 0"});
  bad = tiny();
  bad.n_layer = -1;
  Generator gen(0);
  expect_error([&] { GPT(bad, gen); }, {"n_layer must be positive, got -1"});
}

TEST(GPT, ReferenceParameterCountAndNames) {
  Generator gen(1);
  GPT model(GPTConfig::reference(), gen);
  // wte 256x256 + wpe 128x256 + 4 x (2 LN + c_attn + c_proj + c_fc + c_proj) + ln_f.
  EXPECT_EQ(model.num_parameters(), 3257856);
  EXPECT_EQ(model.num_parameters_without_positions(), 3257856 - 128 * 256);
  auto named = model.named_parameters();
  std::vector<std::string> names;
  for (const auto& [n, t] : named) names.push_back(n);
  std::vector<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 4; ++i) {
    std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const char* s :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
      want.push_back(p + s);
  }
  want.push_back("transformer.ln_f.weight");
  want.push_back("transformer.ln_f.bias");
  EXPECT_EQ(names, want);  // lm_head.weight is the tied wte, listed once
  EXPECT_EQ(model.block(0).attn().c_attn().weight().sizes(), (Shape{768, 256}));
  EXPECT_EQ(model.block(3).mlp().c_proj().weight().sizes(), (Shape{256, 1024}));
}

TEST(GPT, HeadIsTiedToTokenEmbedding) {
  Generator gen(2);
  GPT model(tiny(), gen);
  EXPECT_TRUE(model.lm_head().weight().is_same(model.wte().weight()));
  EXPECT_FALSE(model.lm_head().has_bias());
  TensorDict sd = model.state_dict();
  ASSERT_NE(sd.find("lm_head.weight"), nullptr);  // both keys, as PyTorch's state_dict
  ASSERT_NE(sd.find("transformer.wte.weight"), nullptr);
  EXPECT_EQ(sd.size(), model.named_parameters().size() + 1);
  // A clone ties its own head to its own embedding.
  auto copy = model.clone_as<GPT>();
  EXPECT_TRUE(copy->lm_head().weight().is_same(copy->wte().weight()));
  EXPECT_FALSE(copy->wte().weight().is_same(model.wte().weight()));
}

// The tied tensor's gradient is the sum of what the embedding lookup and the
// head contribute: recompute the forward with two separate copies of it.
TEST(GPT, TiedWeightGradientSumsEmbeddingAndHead) {
  Generator gen(3);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  Tensor idx = randint(0, cfg.vocab_size, {3, 7}, gen);
  Tensor tgt = randint(0, cfg.vocab_size, {3, 7}, gen);
  model(idx, tgt).backward();
  Tensor w_emb = model.wte().weight().detach().clone().set_requires_grad(true);
  Tensor w_head = model.wte().weight().detach().clone().set_requires_grad(true);
  Tensor pos = Tensor::arange(7);
  Tensor x = add(embedding(w_emb, idx), model.wpe()(pos));
  for (int64_t i = 0; i < cfg.n_layer; ++i) x = model.block(i)(x);
  Tensor logits = linear(model.ln_f()(x), w_head);
  cross_entropy(reshape(logits, {-1, cfg.vocab_size}), reshape(tgt, {-1})).backward();
  Tensor sum_grad = add(w_emb.grad(), w_head.grad());
  EXPECT_GT(max(abs(w_emb.grad())).item<double>(), 0);
  EXPECT_GT(max(abs(w_head.grad())).item<double>(), 0);
  EXPECT_LE(max_abs_diff(model.wte().weight().grad(), sum_grad), 1e-6);
}

// The two kernel choices on the same weights: the same logits, loss and
// gradients to float32 rounding (the composed path is a second oracle for the
// fused one, beside the PyTorch parity test).
TEST(GPT, FusedAndComposedKernelsAgree) {
  GPTConfig cfg = tiny();
  ASSERT_EQ(cfg.kernels, GPTKernels::kFused);  // the default
  Generator g1(21), g2(21), gen(22);
  GPT fused(cfg, g1);
  cfg.kernels = GPTKernels::kComposed;
  GPT composed(cfg, g2);
  Tensor idx = randint(0, cfg.vocab_size, {3, 8}, gen);
  Tensor tgt = randint(0, cfg.vocab_size, {3, 8}, gen);
  EXPECT_LE(max_abs_diff(fused(idx), composed(idx)), 1e-5);
  fused(idx, tgt).backward();
  composed(idx, tgt).backward();
  auto a = fused.named_parameters(), b = composed.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = max(abs(b[i].second.grad())).item<double>();
    EXPECT_LE(max_abs_diff(a[i].second.grad(), b[i].second.grad()), 1e-5 * scale + 1e-8)
        << a[i].first;
  }
  EXPECT_STREQ(gpt_kernels_name(GPTKernels::kFused), "fused");
  EXPECT_STREQ(gpt_kernels_name(GPTKernels::kComposed), "composed");
}

// The fused MLP runs c_proj inside one op; a forward hook on c_proj still
// sees c_proj's own call (and changes nothing it does not change).
TEST(GPT, ForwardHooksOnTheMlpProjectionStillRun) {
  GPTConfig cfg = tiny();
  Generator g1(23), gen(24);
  MLP mlp(cfg, g1);
  Tensor x = randn({2, 8, cfg.n_embd}, gen);
  Tensor plain = mlp(x);
  int calls = 0;
  Shape seen;
  mlp.c_proj().register_forward_hook([&](Module&, Tensor& out) {
    ++calls;
    seen = out.sizes();
  });
  Tensor hooked = mlp(x);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, Shape({2, 8, cfg.n_embd}));
  EXPECT_EQ(hooked.to_vector<float>(), plain.to_vector<float>());
}

TEST(GPT, InitialisationStatistics) {
  Generator gen(4);
  GPT model(GPTConfig::reference(), gen);
  const double proj_std = 0.02 / std::sqrt(2.0 * 4);
  EXPECT_NEAR(std_of(model.wte().weight()), 0.02, 0.0005);
  EXPECT_NEAR(std_of(model.wpe().weight()), 0.02, 0.0005);
  EXPECT_NEAR(mean(model.wte().weight()).item<double>(), 0.0, 0.0005);
  for (int64_t i = 0; i < 4; ++i) {
    Block& b = model.block(i);
    EXPECT_NEAR(std_of(b.attn().c_attn().weight()), 0.02, 0.0005);
    EXPECT_NEAR(std_of(b.mlp().c_fc().weight()), 0.02, 0.0005);
    EXPECT_NEAR(std_of(b.attn().c_proj().weight()), proj_std, 0.0005);
    EXPECT_NEAR(std_of(b.mlp().c_proj().weight()), proj_std, 0.0005);
    for (Linear* l : {&b.attn().c_attn(), &b.attn().c_proj(), &b.mlp().c_fc(), &b.mlp().c_proj()})
      EXPECT_TRUE(equal(l->bias(), Tensor::zeros(l->bias().sizes())));
    EXPECT_TRUE(equal(b.ln_1().weight(), Tensor::ones({256})));
    EXPECT_TRUE(equal(b.ln_2().bias(), Tensor::zeros({256})));
  }
  // Same seed, same weights; another seed, others.
  Generator g1(4), g2(5);
  GPT same(GPTConfig::reference(), g1), other(GPTConfig::reference(), g2);
  EXPECT_TRUE(equal(same.block(2).mlp().c_fc().weight(), model.block(2).mlp().c_fc().weight()));
  EXPECT_FALSE(equal(other.wte().weight(), model.wte().weight()));
}

TEST(GPT, ForwardShapesAndLossAtInit) {
  Generator gen(5);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  Tensor idx = randint(0, cfg.vocab_size, {2, 8}, gen);
  EXPECT_EQ(model(idx).sizes(), (Shape{2, 8, 11}));
  EXPECT_EQ(model(slice(idx, 1, 0, 3)).sizes(), (Shape{2, 3, 11}));
  Tensor loss = model(idx, randint(0, cfg.vocab_size, {2, 8}, gen));
  EXPECT_EQ(loss.dim(), 0);
  // Small initial weights: close to the uniform distribution's log(V).
  EXPECT_NEAR(loss.item<double>(), std::log(11.0), 0.1);
  // -1 targets are ignored (nanoGPT's convention): the mean over the others.
  Tensor tgt = randint(0, cfg.vocab_size, {2, 8}, gen);
  Tensor masked = tgt.clone();
  masked.data_ptr<int64_t>()[3] = -1;
  Tensor per = cross_entropy(reshape(model(idx), {-1, 11}), reshape(tgt, {-1}), Reduction::kNone);
  std::vector<double> v = per.to_vector<double>();
  double want = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (i != 3) want += v[i];
  EXPECT_NEAR(model(idx, masked).item<double>(), want / 15, 1e-6);
}

TEST(GPT, ErrorsNameTheProblem) {
  Generator gen(6);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  expect_error(
      [&] {
        model(Tensor::zeros({2, 9}, kInt64));
      },
      {"GPT(", "idx has T = 9", "block_size 8"});
  expect_error([&] { model(Tensor::zeros({2, 4})); }, {"idx must be int64 [B, T]", "float32"});
  expect_error([&] { model(Tensor::zeros({8}, kInt64)); }, {"idx must be int64 [B, T]", "[8]"});
  Tensor idx = Tensor::zeros({2, 4}, kInt64);
  idx.data_ptr<int64_t>()[5] = 11;
  expect_error([&] { model(idx); }, {"token id 11 at flat index 5", "vocab_size = 11"});
  Tensor ok = Tensor::zeros({2, 4}, kInt64);
  expect_error(
      [&] {
        model(ok, Tensor::zeros({2, 3}, kInt64));
      },
      {"targets must be int64 of the shape of idx [2, 4]", "[2, 3]"});
  Tensor tgt = Tensor::zeros({2, 4}, kInt64);
  tgt.data_ptr<int64_t>()[1] = -2;
  expect_error([&] { model(ok, tgt); }, {"targets hold -2 at flat index 1"});
  expect_error([&] { model.block(2); }, {"block 2 out of range [0, 2)"});
}

TEST(GPT, CloneAndStateDictRoundTrip) {
  Generator gen(7);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  Tensor idx = randint(0, cfg.vocab_size, {2, 8}, gen);
  Tensor want = model(idx);
  auto copy = model.clone_as<GPT>();
  EXPECT_TRUE(equal((*copy)(idx), want));
  Generator other(8);
  GPT fresh(cfg, other);
  EXPECT_FALSE(equal(fresh(idx), want));
  fresh.load_state_dict(model.state_dict());
  EXPECT_TRUE(equal(fresh(idx), want));
  EXPECT_TRUE(fresh.lm_head().weight().is_same(fresh.wte().weight()));
  // A repr names the structure like PyTorch's print(model).
  std::string r = model.repr();
  EXPECT_NE(r.find("(transformer): ModuleDict("), std::string::npos) << r;
  EXPECT_NE(r.find("(c_attn): Linear(in_features=16, out_features=48, bias=True)"),
            std::string::npos)
      << r;
}

// Logits from the cache, fed in pieces, equal the full forward's.
class GPTKV : public ::testing::TestWithParam<GPTKernels> {};

INSTANTIATE_TEST_SUITE_P(Kernels, GPTKV,
                         ::testing::Values(GPTKernels::kFused, GPTKernels::kComposed),
                         [](const auto& info) {
                           return std::string(gpt_kernels_name(info.param));
                         });

TEST_P(GPTKV, CacheMatchesFullForward) {
  Generator gen(9);
  GPTConfig cfg = tiny();
  cfg.kernels = GetParam();
  GPT model(cfg, gen);
  Tensor idx = randint(0, cfg.vocab_size, {3, 8}, gen);
  Tensor full = model(idx);
  KVCache cache = model.make_cache(3);
  Tensor a = model(slice(idx, 1, 0, 3), cache);  // prefill 3
  EXPECT_EQ(cache.length, 3);
  EXPECT_FALSE(a.requires_grad());
  EXPECT_EQ(a.sizes(), (Shape{3, 3, 11}));
  EXPECT_LE(max_abs_diff(a, slice(full, 1, 0, 3)), 1e-5);
  for (int64_t t = 3; t < 6; ++t) {
    Tensor step = model(slice(idx, 1, t, t + 1), cache);
    EXPECT_LE(max_abs_diff(step, slice(full, 1, t, t + 1)), 1e-5) << "position " << t;
  }
  Tensor rest = model(slice(idx, 1, 6, 8), cache);  // two at once
  EXPECT_LE(max_abs_diff(rest, slice(full, 1, 6, 8)), 1e-5);
  EXPECT_EQ(cache.length, 8);
  expect_error([&] { model(slice(idx, 1, 0, 1), cache); },
               {"T = 1 after 8 cached positions", "block_size 8"});
  cache.reset();
  EXPECT_LE(max_abs_diff(model(idx, cache), full), 1e-5);
  KVCache other = model.make_cache(2);
  expect_error([&] { model(idx, other); }, {"idx has batch 3, the KV cache was made for 2"});
}

// The straightforward generation loop (a full forward over the cropped
// context for every token) that the cached one must reproduce.
Tensor naive_greedy(GPT& model, Tensor seq, int64_t n) {
  const int64_t bs = model.config().block_size;
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = seq.size(1);
    Tensor ctx = slice(seq, 1, std::max<int64_t>(0, t - bs), t);
    Tensor logits = model(ctx);
    Tensor next = argmax(select(logits, 1, ctx.size(1) - 1), 1, true);
    seq = cat({seq, next}, 1);
  }
  return seq;
}

TEST(GPT, GenerateGreedyMatchesRecomputingAndCropsTheContext) {
  Generator gen(10);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  model.eval();
  Tensor prompt = randint(0, cfg.vocab_size, {2, 3}, gen);
  // 3 + 12 tokens: past block_size 8, so the context is cropped and restarted.
  Tensor want = naive_greedy(model, prompt, 12);
  int calls = 0;
  GenerateOptions greedy{.temperature = 0};
  greedy.on_token = [&](const Tensor& next) {
    EXPECT_EQ(next.sizes(), (Shape{2}));
    ++calls;
  };
  Tensor got = generate(model, prompt, 12, greedy, gen);
  EXPECT_EQ(calls, 12);
  EXPECT_EQ(got.sizes(), (Shape{2, 15}));
  EXPECT_TRUE(equal(got, want));
  // top_k = 1 samples the most likely token whatever the temperature.
  Generator g(1);
  EXPECT_TRUE(equal(generate(model, prompt, 12, {.temperature = 2.0, .top_k = 1}, g), want));
  EXPECT_TRUE(equal(generate(model, prompt, 0, {}, g), prompt));
}

TEST(GPT, GenerateSamplingIsSeededAndStaysInTopK) {
  Generator gen(11);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  Tensor prompt = Tensor::zeros({4, 1}, kInt64);
  Generator a(5), b(5), c(6);
  Tensor x = generate(model, prompt, 20, {.temperature = 1.0}, a);
  EXPECT_TRUE(equal(x, generate(model, prompt, 20, {.temperature = 1.0}, b)));
  EXPECT_FALSE(equal(x, generate(model, prompt, 20, {.temperature = 1.0}, c)));
  std::set<int64_t> seen;
  for (int64_t t : x.to_vector<int64_t>()) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 11);
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 3u);  // near-uniform initial model: many different tokens
  // top_k = 2: at every step, one of the two most likely tokens.
  Generator d(7);
  Tensor p = randint(0, 11, {1, 4}, gen);
  Tensor y = generate(model, p, 1, {.temperature = 1.0, .top_k = 2}, d);
  Tensor last = select(model(p), 1, 3).reshape({11});
  std::vector<float> l = last.to_vector<float>();
  int64_t tok = y.to_vector<int64_t>()[4];
  int higher = 0;
  for (float v : l) higher += v > l[tok];
  EXPECT_LE(higher, 1);
  expect_error([&] { generate(model, p, 1, {.temperature = -1}, d); }, {"temperature"});
  expect_error([&] { generate(model, p, -1, {}, d); }, {"max_new_tokens must be >= 0, got -1"});
  expect_error([&] { generate(model, Tensor::zeros({2}, kInt64), 1, {}, d); },
               {"generate: prompt must be int64 [B, T]"});
}

TEST(GPT, WeightDecayGroupsAreNanoGPTs) {
  Generator gen(12);
  GPT model(tiny(), gen);
  WeightDecayGroups g = weight_decay_groups(model);
  // wte, wpe, 4 matmul weights per block; 4 biases and 2 LayerNorms per block, ln_f.
  EXPECT_EQ(g.decay.size(), 2u + 4 * 2);
  EXPECT_EQ(g.no_decay.size(), 2u * (4 + 2 * 2) + 2);
  for (const Tensor& t : g.decay) EXPECT_EQ(t.dim(), 2);
  for (const Tensor& t : g.no_decay) EXPECT_EQ(t.dim(), 1);
  int64_t n = 0;
  for (const auto* v : {&g.decay, &g.no_decay})
    for (const Tensor& t : *v) n += t.numel();
  EXPECT_EQ(n, model.num_parameters());
}

TEST(GPT, GeluTanhMatchesItsFormula) {
  Tensor x = Tensor::from_vector<float>({-3.0f, -1.0f, -0.1f, 0.0f, 0.5f, 2.0f});
  std::vector<float> got = gelu_tanh_composed(x).to_vector<float>();
  std::vector<float> in = x.to_vector<float>();
  for (size_t i = 0; i < in.size(); ++i) {
    double v = in[i];
    double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(got[i], want, 1e-6) << v;
  }
}

// A tiny model learns one batch by heart (plain Adam written out here: the nn
// layer's tests do not link optim).
TEST(GPT, OverfitsOneBatch) {
  Generator gen(13);
  GPTConfig cfg = tiny();
  GPT model(cfg, gen);
  Tensor idx = randint(0, cfg.vocab_size, {2, 8}, gen);
  Tensor tgt = randint(0, cfg.vocab_size, {2, 8}, gen);
  std::vector<Tensor> params = model.parameters(), m, v;
  for (const Tensor& p : params) {
    m.push_back(Tensor::zeros(p.sizes()));
    v.push_back(Tensor::zeros(p.sizes()));
  }
  double first = 0, last = 0;
  for (int step = 1; step <= 150; ++step) {
    model.zero_grad();
    Tensor loss = model(idx, tgt);
    if (step == 1) first = loss.item<double>();
    last = loss.item<double>();
    loss.backward();
    NoGradGuard no_grad;
    const double lr = 1e-2, b1 = 0.9, b2 = 0.99;
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = params[i].grad();
      m[i].mul_(b1).add_(g, 1 - b1);
      v[i].mul_(b2).addcmul_(g, g, 1 - b2);
      Tensor denom = add(sqrt(div(v[i], 1 - std::pow(b2, step))), 1e-8);
      params[i].addcdiv_(m[i], denom, -lr / (1 - std::pow(b1, step)));
    }
  }
  EXPECT_NEAR(first, std::log(11.0), 0.2);
  EXPECT_LT(last, 0.05) << "from " << first;
}

// ---- activation checkpointing ----

TEST(GPTCheckpointing, NamesParseAndUnknownIsRefused) {
  for (GPTCheckpointing c :
       {GPTCheckpointing::kNone, GPTCheckpointing::kBlock, GPTCheckpointing::kAttention})
    EXPECT_EQ(parse_gpt_checkpointing(gpt_checkpointing_name(c)), c);
  expect_error([] { parse_gpt_checkpointing("mlp"); },
               {"unknown mode 'mlp'", "none", "block", "attention"});
}

// A block's input and parameter gradients with each mode equal those without
// (each kernel form), and the output is the same.
TEST(GPTCheckpointing, BlockGradientsEqualUncheckpointed) {
  for (GPTKernels kernels : {GPTKernels::kFused, GPTKernels::kComposed}) {
    for (GPTCheckpointing mode : {GPTCheckpointing::kBlock, GPTCheckpointing::kAttention}) {
      SCOPED_TRACE(std::string(gpt_kernels_name(kernels)) + "/" + gpt_checkpointing_name(mode));
      GPTConfig plain_cfg = tiny();
      plain_cfg.kernels = kernels;
      GPTConfig ckpt_cfg = plain_cfg;
      ckpt_cfg.checkpointing = mode;
      Generator g1(4), g2(4);
      Block plain(plain_cfg, g1), ckpt(ckpt_cfg, g2);
      Generator data(5);
      Tensor x0 = randn({2, 7, plain_cfg.n_embd}, data);
      Tensor w = randn({2, 7, plain_cfg.n_embd}, data);  // a loss that weighs every output
      Tensor x1 = x0.detach().set_requires_grad(true), x2 = x0.detach().set_requires_grad(true);
      Tensor y1 = plain(x1), y2 = ckpt(x2);
      EXPECT_LE(max_abs_diff(y1, y2), 1e-6);
      sum(mul(y1, w)).backward();
      sum(mul(y2, w)).backward();
      EXPECT_LE(max_abs_diff(x1.grad(), x2.grad()), 1e-6);
      auto p1 = plain.named_parameters(), p2 = ckpt.named_parameters();
      ASSERT_EQ(p1.size(), p2.size());
      for (size_t i = 0; i < p1.size(); ++i) {
        ASSERT_TRUE(p2[i].second.grad().defined()) << p2[i].first;
        EXPECT_LE(max_abs_diff(p1[i].second.grad(), p2[i].second.grad()), 1e-6) << p1[i].first;
      }
    }
  }
}

// The whole model's loss and every parameter's gradient (the tied embedding's
// included) with every block checkpointed and the loss head in chunks equal
// those without, ignored targets included.
TEST(GPTCheckpointing, ModelGradientsEqualUncheckpointed) {
  GPTConfig cfg = tiny();
  GPTConfig ckpt_cfg = cfg;
  ckpt_cfg.checkpointing = GPTCheckpointing::kBlock;
  ckpt_cfg.chunked_loss = true;
  ckpt_cfg.loss_chunk_rows = 5;  // 16 positions: chunks of 5, 5, 5 and 1
  Generator g1(6), g2(6);
  GPT plain(cfg, g1), ckpt(ckpt_cfg, g2);
  Generator data(7);
  Tensor idx = randint(0, cfg.vocab_size, {2, 8}, data);
  Tensor tgt = randint(0, cfg.vocab_size, {2, 8}, data);
  tgt.data_ptr<int64_t>()[3] = tgt.data_ptr<int64_t>()[12] = -1;  // ignored positions
  Tensor l1 = plain(idx, tgt), l2 = ckpt(idx, tgt);
  // Switched on a model made without it, from the next forward.
  Generator g3(6);
  GPT switched(cfg, g3);
  switched.set_checkpointing(GPTCheckpointing::kBlock);
  EXPECT_EQ(switched.block(1).checkpointing(), GPTCheckpointing::kBlock);
  EXPECT_EQ(switched.config().checkpointing, GPTCheckpointing::kBlock);
  Tensor l3 = switched(idx, tgt);
  ASSERT_NE(l3.grad_fn(), nullptr);
  EXPECT_NEAR(l1.item<double>(), l2.item<double>(), 1e-6);
  l1.backward();
  l2.backward();
  l3.backward();
  auto p1 = plain.named_parameters(), p2 = ckpt.named_parameters(),
       p3 = switched.named_parameters();
  ASSERT_EQ(p1.size(), p2.size());
  for (size_t i = 0; i < p1.size(); ++i) {
    ASSERT_TRUE(p2[i].second.grad().defined()) << p2[i].first;
    EXPECT_LE(max_abs_diff(p1[i].second.grad(), p2[i].second.grad()), 1e-6) << p1[i].first;
    EXPECT_LE(max_abs_diff(p1[i].second.grad(), p3[i].second.grad()), 1e-6) << p1[i].first;
  }
}

TEST(GPTCheckpointing, ChunkedLossAloneEqualsThePlainHead) {
  GPTConfig cfg = tiny();
  GPTConfig chunked_cfg = cfg;
  chunked_cfg.chunked_loss = true;
  chunked_cfg.loss_chunk_rows = 3;
  Generator g1(8), g2(8);
  GPT plain(cfg, g1), chunked(chunked_cfg, g2);
  Generator data(9);
  Tensor idx = randint(0, cfg.vocab_size, {2, 8}, data);
  Tensor tgt = randint(0, cfg.vocab_size, {2, 8}, data);
  Tensor l1 = plain(idx, tgt), l2 = chunked(idx, tgt);
  EXPECT_NEAR(l1.item<double>(), l2.item<double>(), 1e-6);
  l1.backward();
  l2.backward();
  auto p1 = plain.named_parameters(), p2 = chunked.named_parameters();
  for (size_t i = 0; i < p1.size(); ++i)
    EXPECT_LE(max_abs_diff(p1[i].second.grad(), p2[i].second.grad()), 1e-6) << p1[i].first;
  NoGradGuard no_grad;
  EXPECT_NEAR(chunked(idx, tgt).item<double>(), l1.item<double>(), 1e-6);
}

}  // namespace
}  // namespace cohort::nn
