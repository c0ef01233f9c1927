// COMPILED, NOT RUN ON A GPU (see cudnn_attention.h): the support predicate,
// the key, the error text and the cache's counting are tested on the CPU; the
// plans and their execution have never run.
#include "cohort/cuda/cudnn_attention.h"

#include "cohort/base/runtime.h"

#include <cudnn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/cudnn_attention_graph.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

constexpr const char* kOperandNames[8] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv"};

// An operand's (batch, head, row) strides when its batch_heads are split as
// [batch, heads]: its own split when it has `heads` heads, else a flat
// per-(batch, head) stride where its layout has one.
std::optional<std::array<int64_t, 3>> strides_for_heads(const AttentionHeads& a, int64_t heads) {
  if (a.heads == heads) return std::array<int64_t, 3>{a.batch_stride, a.head_stride, a.row_stride};
  int64_t flat = -1;
  if (a.heads == 1)
    flat = a.batch_stride;
  else if (a.batch_stride == a.heads * a.head_stride)
    flat = a.head_stride;
  if (flat < 0) return std::nullopt;
  return std::array<int64_t, 3>{heads * flat, flat, a.row_stride};
}

int64_t head_dim_limit(int sm) { return sm / 10 == 9 ? 256 : 128; }

SdpaVerdict no(std::string why) { return {false, std::move(why), {}}; }

SdpaPlanCache<sdpa_graph::Plan>::Counters& counters() {
  static SdpaPlanCache<sdpa_graph::Plan>::Counters c;
  return c;
}

// Plans hold this thread's cudnn_handle, so each thread has its own cache.
SdpaPlanCache<sdpa_graph::Plan>& thread_cache() {
  thread_local SdpaPlanCache<sdpa_graph::Plan> cache(counters());
  return cache;
}

int sm_of(int device) {
  int major = 0, minor = 0;
  COHORT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  COHORT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

// The verdict and, when cuDNN takes the request, a plan for it (null: no
// engine took the graph).
std::shared_ptr<const sdpa_graph::Plan> plan_for(Device dev, const SdpaRequest& r, SdpaKey& key) {
  if (!cudnn_attention_enabled()) return nullptr;
  current_cuda_stream(dev);  // makes dev the thread's current device
  int device = dev.index();
  if (device < 0) COHORT_CUDA_CHECK(cudaGetDevice(&device));
  const SdpaEnv env{device, sm_of(device), cudnnGetVersion(), true};
  SdpaVerdict v = cudnn_sdpa_support(r, env);
  if (!v.use_cudnn) return nullptr;
  key = v.key;
  cudnnHandle_t handle = cudnn_handle(dev);
  return thread_cache().get(key, [&]() -> std::shared_ptr<const sdpa_graph::Plan> {
    std::string why;
    std::shared_ptr<const sdpa_graph::Plan> p = sdpa_graph::build_plan(handle, key, why);
    // Once per key and thread (the null plan is cached): cohort's kernel runs.
    if (!p) COHORT_WARN("{}: cuDNN takes no plan ({}); using cohort's kernel", key.describe(), why);
    return p;
  });
}

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

// The masked scores' value: -inf from cuDNN 9.1, the lowest float before
// (frontend's get_negative_inf_value).
float masked_score() {
  return cudnnGetVersion() < 91000 ? std::numeric_limits<float>::lowest()
                                   : -std::numeric_limits<float>::infinity();
}

void execute(Device dev, const sdpa_graph::Plan& plan, const SdpaKey& key,
             const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* ws) {
  cudnnHandle_t handle = cudnn_handle(dev);
  sdpa_graph::Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, key);
  using sdpa_graph::check;
  check(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                 static_cast<int64_t>(uids.size()), uids.data()),
        "cudnnBackendSetAttribute(VARIANT_PACK_UNIQUE_IDS)", key);
  check(
      cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                               CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data()),
      "cudnnBackendSetAttribute(VARIANT_PACK_DATA_POINTERS)", key);
  check(cudnnBackendSetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                 1, &ws),
        "cudnnBackendSetAttribute(VARIANT_PACK_WORKSPACE)", key);
  check(cudnnBackendFinalize(pack.get()), "cudnnBackendFinalize(variant pack)", key);
  check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()), "cudnnBackendExecute", key);
}

}  // namespace

std::string SdpaKey::describe() const {
  std::string layout;
  for (int i = 0; i < (backward ? 8 : 4); ++i)
    layout +=
        fmt::format(" {}[{},{},{}]", kOperandNames[i], strides[i][0], strides[i][1], strides[i][2]);
  return fmt::format("cudnn attention {} on cuda:{}: b {} h {} s_q {} s_kv {} d {} {}{}; strides{}",
                     backward ? "backward" : "forward", device, b, h, s_q, s_kv, d,
                     dtype_name(dtype), causal ? " causal" : "", layout);
}

std::string sdpa_error_text(int status, const std::string& call, const SdpaKey& key) {
  return fmt::format(
      "{} failed: {} ({}) for {}; COHORT_CUDNN_ATTENTION=0 (or set_cudnn_attention_enabled(false)) "
      "uses cohort's kernel",
      call, cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), status, key.describe());
}

namespace {}  // namespace

bool cudnn_attention_enabled() { return Runtime::process().options().cudnn_attention; }

void set_cudnn_attention_enabled(bool on) {
  Runtime& rt = Runtime::process();
  RuntimeOptions o = rt.options();
  o.cudnn_attention = on;
  rt.configure(o);
}

SdpaVerdict cudnn_sdpa_support(const SdpaRequest& r, const SdpaEnv& env) {
  const AttentionDims& s = r.dims;
  if (!env.enabled)
    return no("switched off (set_cudnn_attention_enabled / COHORT_CUDNN_ATTENTION)");
  if (env.cudnn_version < 90000)
    return no(fmt::format("cuDNN {} is older than 9.0", env.cudnn_version));
  if (env.cudnn_version == 91000 || env.cudnn_version == 91001)
    return no("cuDNN 9.10.0/9.10.1 have known SDPA bugs");
  if (env.sm < 80) return no(fmt::format("sm_{} is older than sm_80", env.sm));
  if (r.dtype != DType::kBFloat16 && r.dtype != DType::kFloat16)
    return no(fmt::format("dtype {} (cuDNN's flash attention takes bfloat16 or float16)",
                          dtype_name(r.dtype)));
  if (!s.causal) return no("not causal (only the causal graph is built)");
  if (s.q_len != s.kv_len)
    return no(
        fmt::format("q_len {} != kv_len {} (only self-attention is built)", s.q_len, s.kv_len));
  if (s.q_len < 2) return no("q_len 1 (cuDNN has no backward for s_q = s_kv = 1)");
  if (s.head_dim % 8 != 0 || s.head_dim > head_dim_limit(env.sm))
    return no(fmt::format("head_dim {} (a multiple of 8 up to {} on sm_{} expected)", s.head_dim,
                          head_dim_limit(env.sm), env.sm));
  const int64_t heads = r.ops[0].heads;
  if (heads < 1 || s.batch_heads % heads != 0)
    return no(fmt::format("{} heads do not divide batch_heads {}", heads, s.batch_heads));
  SdpaKey key;
  key.backward = r.backward;
  key.device = env.device;
  key.dtype = r.dtype;
  key.causal = s.causal;
  key.b = s.batch_heads / heads;
  key.h = heads;
  key.s_q = s.q_len;
  key.s_kv = s.kv_len;
  key.d = s.head_dim;
  for (int i = 0; i < r.operand_count(); ++i) {
    const AttentionHeads& a = r.ops[i];
    std::optional<std::array<int64_t, 3>> st = strides_for_heads(a, heads);
    if (!st)
      return no(fmt::format("{} has {} heads with strides [{}, {}] that q's {} heads cannot read",
                            kOperandNames[i], a.heads, a.batch_stride, a.head_stride, heads));
    // Zero strides (a broadcast gradient) are left to the own kernel.
    for (int64_t x : *st)
      if (x <= 0 || x % 8 != 0)
        return no(fmt::format("{} stride {} is not a positive multiple of 8 elements (16 bytes)",
                              kOperandNames[i], x));
    if (reinterpret_cast<uintptr_t>(a.data) % 16 != 0)
      return no(fmt::format("{} is not 16-byte aligned", kOperandNames[i]));
    key.strides[i] = *st;
  }
  return {true, "", key};
}

SdpaCacheStats cudnn_sdpa_cache_stats() {
  const auto& c = counters();
  return {c.hits.load(), c.misses.load(), c.no_engine.load()};
}

bool cudnn_sdpa_forward(Device dev, const SdpaRequest& r, float* lse) {
  SdpaKey key;
  std::shared_ptr<const sdpa_graph::Plan> plan = plan_for(dev, r, key);
  if (!plan) return false;
  using namespace sdpa_graph;
  float scale = r.dims.scale, neg_inf = masked_score();
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs = {r.ops[0].data, r.ops[1].data, r.ops[2].data,
                             r.ops[3].data, lse,           &scale};
  if (key.causal) {
    uids.push_back(kNegInf);
    ptrs.push_back(&neg_inf);
  }
  void* ws = workspace(dev, std::max<size_t>(plan->plan_workspace, 1));
  execute(dev, *plan, key, uids, ptrs, ws);
  return true;
}

bool cudnn_sdpa_backward(Device dev, const SdpaRequest& r, const float* lse) {
  SdpaKey key;
  std::shared_ptr<const sdpa_graph::Plan> plan = plan_for(dev, r, key);
  if (!plan) return false;
  using namespace sdpa_graph;
  float scale = r.dims.scale, neg_inf = masked_score(), one = 1.0f;
  cudaStream_t stream = current_cuda_stream(dev);
  // One buffer: the plan's workspace, then softmax_sum and dq_accum.
  const size_t plan_ws = round_up(plan->plan_workspace);
  const size_t sum_bytes = round_up(sizeof(float) * key.b * key.h * key.s_q);
  const size_t accum_bytes = sizeof(float) * key.b * key.h * key.s_q * key.d;
  char* ws = static_cast<char*>(workspace(dev, plan_ws + sum_bytes + accum_bytes));
  void* softmax_sum = ws + plan_ws;
  void* dq_accum = ws + plan_ws + sum_bytes;
  // Before 9.6 the dq accumulator had to start at zero (frontend's note).
  if (cudnnGetVersion() < 90600)
    COHORT_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, accum_bytes, stream));
  std::vector<int64_t> uids = {kQ,  kK,  kV,  kO,   kStats,      kScale,  kDO,
                               kDQ, kDK, kDV, kOne, kSoftmaxSum, kDQAccum};
  std::vector<void*> ptrs = {
      r.ops[0].data, r.ops[1].data, r.ops[2].data, r.ops[3].data, const_cast<float*>(lse),
      &scale,        r.ops[4].data, r.ops[5].data, r.ops[6].data, r.ops[7].data,
      &one,          softmax_sum,   dq_accum};
  if (key.causal) {
    uids.push_back(kNegInf);
    ptrs.push_back(&neg_inf);
  }
  execute(dev, *plan, key, uids, ptrs, plan_ws ? ws : nullptr);
  return true;
}

}  // namespace cohort::cuda
