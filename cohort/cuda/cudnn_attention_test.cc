// What of cudnn_attention.h runs without a GPU: which requests go to cuDNN
// and why the others do not (the support predicate, the key it makes), the
// plan cache's counting, the error text of a failed backend call, and the
// backend operation lists of the forward and backward graphs, which cuDNN
// finalizes op by op on the host. The GPU comparisons are in
// attention_test.cc.
#include "cohort/cuda/cudnn_attention.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "cohort/base/error.h"
#include "cohort/cuda/cudnn_attention_graph.h"

namespace cohort::cuda {
namespace {

constexpr SdpaEnv kH200{0, 90, 91900, true};
constexpr SdpaEnv kA100{0, 80, 91900, true};

// An aligned fake device address: the predicate never dereferences it.
void* addr(uintptr_t a) { return reinterpret_cast<void*>(a); }

// GPT's packed [B, T, 3C] q, k, v and [B, T, C] out, dout (and dq, dk, dv in
// a packed gradient), C = nh * d.
SdpaRequest packed(int64_t b, int64_t t, int64_t nh, int64_t d, bool backward = false) {
  const int64_t c = nh * d;
  SdpaRequest r;
  r.backward = backward;
  r.dims = {b * nh, t, t, d, true, 0.125f};
  for (int i = 0; i < 8; ++i) {
    const bool qkv = i < 3 || i > 4;  // q, k, v and dq, dk, dv
    const int64_t parts = qkv ? 3 : 1;
    const int64_t part = i < 3 ? i : (i > 4 ? i - 5 : 0);
    r.ops[i] = {addr(0x10000 * (i + 1) + 2 * part * c), nh, t * parts * c, d, parts * c};
  }
  return r;
}

// Contiguous [B, H, T, D] operands.
SdpaRequest bhtd(int64_t b, int64_t h, int64_t t, int64_t d, bool backward = false) {
  SdpaRequest r;
  r.backward = backward;
  r.dims = {b * h, t, t, d, true, 0.125f};
  for (int i = 0; i < 8; ++i) r.ops[i] = {addr(0x100000 * (i + 1)), h, h * t * d, t * d, d};
  return r;
}

TEST(CudnnSdpaSupport, GptShapesGoToCudnnWithTheirLayoutInTheKey) {
  const SdpaVerdict v = cudnn_sdpa_support(packed(4, 1024, 12, 64, true), kH200);
  ASSERT_TRUE(v.use_cudnn) << v.reason;
  EXPECT_EQ(v.key.b, 4);
  EXPECT_EQ(v.key.h, 12);
  EXPECT_EQ(v.key.s_q, 1024);
  EXPECT_EQ(v.key.s_kv, 1024);
  EXPECT_EQ(v.key.d, 64);
  EXPECT_TRUE(v.key.backward);
  const int64_t c = 768;
  EXPECT_EQ(v.key.strides[0], (std::array<int64_t, 3>{1024 * 3 * c, 64, 3 * c}));  // q
  EXPECT_EQ(v.key.strides[3], (std::array<int64_t, 3>{1024 * c, 64, c}));          // out
  EXPECT_EQ(v.key.strides[7], (std::array<int64_t, 3>{1024 * 3 * c, 64, 3 * c}));  // dv

  const SdpaVerdict f = cudnn_sdpa_support(bhtd(2, 4, 70, 64), kA100);
  ASSERT_TRUE(f.use_cudnn) << f.reason;
  EXPECT_EQ(f.key.strides[1], (std::array<int64_t, 3>{4 * 70 * 64, 70 * 64, 64}));
  EXPECT_EQ(f.key.strides[4], (std::array<int64_t, 3>{}));  // forward: 4 operands
}

TEST(CudnnSdpaSupport, FlatOperandIsReadInTheQueryHeads) {
  SdpaRequest r = bhtd(2, 4, 64, 32);
  r.ops[1] = {addr(0x1000), 1, 64 * 32, 0, 32};  // k as a rank-3 [B*H, T, D] tensor
  SdpaVerdict v = cudnn_sdpa_support(r, kH200);
  ASSERT_TRUE(v.use_cudnn) << v.reason;
  EXPECT_EQ(v.key.strides[1], (std::array<int64_t, 3>{4 * 64 * 32, 64 * 32, 32}));
  // Two heads with a batch stride that is not 2 head strides: no single split.
  r.ops[1] = {addr(0x1000), 2, 10000, 64 * 32, 32};
  v = cudnn_sdpa_support(r, kH200);
  EXPECT_FALSE(v.use_cudnn);
  EXPECT_NE(v.reason.find("k has 2 heads"), std::string::npos) << v.reason;
}

// Each rule on its own: the request that breaks it falls back, saying why.
TEST(CudnnSdpaSupport, EachRuleFallsBackNamingWhy) {
  struct Case {
    const char* what;
    SdpaRequest r;
    SdpaEnv env;
    const char* reason;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, auto edit, SdpaEnv env, const char* reason) {
    SdpaRequest r = bhtd(2, 4, 128, 64, true);
    edit(r);
    cases.push_back({what, r, env, reason});
  };
  auto none = [](SdpaRequest&) {};
  add(
      "float32", [](SdpaRequest& r) { r.dtype = DType::kFloat32; }, kH200, "dtype float32");
  add(
      "not causal", [](SdpaRequest& r) { r.dims.causal = false; }, kH200, "not causal");
  add(
      "cross", [](SdpaRequest& r) { r.dims.kv_len = 96; }, kH200, "q_len 128 != kv_len 96");
  add(
      "one row", [](SdpaRequest& r) { r.dims.q_len = r.dims.kv_len = 1; }, kH200, "q_len 1");
  add(
      "d 36", [](SdpaRequest& r) { r.dims.head_dim = 36; }, kH200, "head_dim 36");
  add(
      "d 192 sm80", [](SdpaRequest& r) { r.dims.head_dim = 192; }, kA100, "up to 128 on sm_80");
  add(
      "d 264 sm90", [](SdpaRequest& r) { r.dims.head_dim = 264; }, kH200, "up to 256 on sm_90");
  add("sm75", none, SdpaEnv{0, 75, 91900, true}, "sm_75 is older");
  add("cudnn 8", none, SdpaEnv{0, 90, 8907, true}, "older than 9.0");
  add("cudnn 9.10.0", none, SdpaEnv{0, 90, 91000, true}, "9.10.0/9.10.1");
  add("switched off", none, SdpaEnv{0, 90, 91900, false}, "COHORT_CUDNN_ATTENTION");
  add(
      "dq misaligned", [](SdpaRequest& r) { r.ops[5].data = addr(0x100008); }, kH200,
      "dq is not 16-byte aligned");
  add(
      "odd row stride", [](SdpaRequest& r) { r.ops[2].row_stride = 68; }, kH200, "v stride 68");
  add(
      "heads", [](SdpaRequest& r) { r.ops[0].heads = 3; }, kH200, "3 heads do not divide");
  for (const Case& c : cases) {
    const SdpaVerdict v = cudnn_sdpa_support(c.r, c.env);
    EXPECT_FALSE(v.use_cudnn) << c.what;
    EXPECT_NE(v.reason.find(c.reason), std::string::npos) << c.what << ": " << v.reason;
  }
  // The edges that are taken.
  SdpaRequest r = bhtd(2, 4, 128, 192, true);
  EXPECT_TRUE(cudnn_sdpa_support(r, kH200).use_cudnn) << "d 192 on sm_90";
  r.dims.head_dim = 80;
  EXPECT_TRUE(cudnn_sdpa_support(r, kA100).use_cudnn) << "d 80 on sm_80";
  r.dtype = DType::kFloat16;
  EXPECT_TRUE(cudnn_sdpa_support(r, kA100).use_cudnn) << "float16";
}

TEST(CudnnSdpaSupport, TheSwitchIsTheRuntimesOption) {
  const bool was = cudnn_attention_enabled();
  set_cudnn_attention_enabled(false);
  EXPECT_FALSE(cudnn_attention_enabled());
  set_cudnn_attention_enabled(true);
  EXPECT_TRUE(cudnn_attention_enabled());
  set_cudnn_attention_enabled(was);
}

TEST(CudnnSdpaPlanCache, CountsHitsMissesAndNoEngineByKey) {
  SdpaPlanCache<int>::Counters c;
  SdpaPlanCache<int> cache(c);
  int builds = 0;
  auto build = [&] {
    ++builds;
    return std::make_shared<const int>(builds);
  };
  const SdpaKey a = cudnn_sdpa_support(bhtd(2, 4, 128, 64), kH200).key;
  SdpaKey other_layout = a, other_device = a, bwd = a, other_dtype = a;
  other_layout.strides[0][2] = 128;
  other_device.device = 1;
  bwd.backward = true;
  other_dtype.dtype = DType::kFloat16;
  EXPECT_EQ(*cache.get(a, build), 1);
  EXPECT_EQ(*cache.get(a, build), 1);  // a hit: not built again
  EXPECT_EQ(builds, 1);
  for (const SdpaKey& k : {other_layout, other_device, bwd, other_dtype}) cache.get(k, build);
  EXPECT_EQ(builds, 5);
  EXPECT_EQ(c.hits.load(), 1);
  EXPECT_EQ(c.misses.load(), 5);
  // No engine: cached as such, counted once.
  SdpaKey none = a;
  none.s_q = none.s_kv = 4096;
  auto no_engine = [&] { return std::shared_ptr<const int>(); };
  EXPECT_EQ(cache.get(none, no_engine), nullptr);
  EXPECT_EQ(cache.get(none, build), nullptr);
  EXPECT_EQ(c.no_engine.load(), 1);
  EXPECT_EQ(c.hits.load(), 2);
  // A build that throws caches nothing: the next call builds again.
  SdpaKey throws = a;
  throws.d = 128;
  EXPECT_THROW(
      cache.get(throws, []() -> std::shared_ptr<const int> { throw std::runtime_error("x"); }),
      std::runtime_error);
  EXPECT_EQ(*cache.get(throws, build), 6);
  EXPECT_EQ(cache.size(), 7u);
}

TEST(CudnnSdpaErrors, TextNamesTheStatusTheCallAndTheShape) {
  const SdpaKey k = cudnn_sdpa_support(packed(2, 128, 4, 64, true), kH200).key;
  const std::string t = sdpa_error_text(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendFinalize(x)", k);
  for (const char* part : {"cudnnBackendFinalize(x) failed", "CUDNN_STATUS_NOT_SUPPORTED", "(3000)",
                           "backward", "cuda:0", "b 2 h 4 s_q 128 s_kv 128 d 64 bfloat16 causal",
                           "q[98304,64,768]", "COHORT_CUDNN_ATTENTION=0"})
    EXPECT_NE(t.find(part), std::string::npos) << part << " in " << t;
}

// cuDNN checks each operation's tensors when it finalizes it, on the host:
// the graphs' 14 and 22 operations are consistent for GPT's layouts.
TEST(CudnnSdpaGraph, OperationsFinalizeOnTheHost) {
  for (bool backward : {false, true}) {
    for (const SdpaRequest& r : {packed(2, 128, 4, 64, backward), bhtd(1, 2, 70, 128, backward)}) {
      const SdpaVerdict v = cudnn_sdpa_support(r, kH200);
      ASSERT_TRUE(v.use_cudnn) << v.reason;
      sdpa_graph::Ops ops;
      ASSERT_NO_THROW(ops = sdpa_graph::build_ops(v.key)) << v.key.describe();
      EXPECT_EQ(ops.ops.size(), backward ? 22u : 14u);
    }
  }
}

// A shape cuDNN rejects: the failed call surfaces as cohort::Error naming the
// cuDNN status, the call and the shape, not as a crash or a silent result.
TEST(CudnnSdpaGraph, RejectedDescriptorThrowsNamingStatusAndShape) {
  SdpaKey k = cudnn_sdpa_support(bhtd(2, 4, 128, 64), kH200).key;
  k.s_q = -5;
  try {
    sdpa_graph::build_ops(k);
    FAIL() << "a negative dimension was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDNN_STATUS_"), std::string::npos) << m;
    EXPECT_NE(m.find("cudnnBackend"), std::string::npos) << m;
    EXPECT_NE(m.find("s_q -5"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace cohort::cuda
