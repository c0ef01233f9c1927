// cuDNN 9's fused flash attention (forward and backward, bf16/fp16, causal,
// on tensor cores) behind the CUDA attention kernels (attention.cc), which
// keep their own kernel (attention_kernels.cu) for what cuDNN does not take
// and as the reference of the tests.
//
// COMPILED, NOT RUN ON A GPU: no device was lent to the session that wrote
// this; the graph mirrors cudnn-frontend's composite SDPA nodes
// (scaled_dot_product_flash_attention.h), built with the backend API
// (cudnn_attention_graph.cc), since the frontend headers are not installed.
//
// The graphs: forward S = Q K^T * scale, the causal mask (row >= col, the
// top-left alignment cohort's kernels use), softmax with Stats = max + log(sum
// exp) (each row's natural log-sum-exp: the lse the autograd node saves and
// the backward reads, the same quantity as the own kernel's), O = P V.
// Backward: softmax_sum = rowsum(dO * O), P = exp(S - Stats), dV = P^T dO,
// dS = P (dO V^T - softmax_sum) * scale, dK = dS^T Q, dQ = dS K (float32
// accumulated, then cast). Plans are built once per key (shape, layout,
// dtype, device) and cached per thread, as cudnn_handle() is per thread.
// set_cudnn_attention_enabled(false) switches the cuDNN path off (tests
// compare both paths in one process): it is the process Runtime's
// RuntimeOptions::cudnn_attention, which COHORT_CUDNN_ATTENTION=0 sets at
// the edge (docs/configuration.md; a benchmark run on the old path).
// Thread safety: every function may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "cohort/core/device.h"
#include "cohort/core/dtype.h"
#include "cohort/cuda/dense_kernels.h"

namespace cohort::cuda {

// What attention.cc asks for: the shape (dense_kernels.h's AttentionDims),
// the operands' layouts (q, k, v, out; then dout, dq, dk, dv when backward).
struct SdpaRequest {
  DType dtype = DType::kBFloat16;
  bool backward = false;
  AttentionDims dims{};
  std::array<AttentionHeads, 8> ops{};  // q, k, v, out, dout, dq, dk, dv
  int operand_count() const { return backward ? 8 : 4; }
};

// Where the request runs: the device's compute capability (major * 10 +
// minor), the loaded cuDNN's version (cudnnGetVersion), the switch.
struct SdpaEnv {
  int device = 0;
  int sm = 0;
  size_t cudnn_version = 0;
  bool enabled = true;
};

// The plan cache's key: a plan bakes the dims and every operand's strides in.
struct SdpaKey {
  bool backward = false;
  int device = 0;
  DType dtype = DType::kBFloat16;
  bool causal = false;
  int64_t b = 0, h = 0, s_q = 0, s_kv = 0, d = 0;
  // Per operand (SdpaRequest::ops order): batch, head, row strides in
  // elements (the head_dim stride is 1); zero past operand_count().
  std::array<std::array<int64_t, 3>, 8> strides{};
  auto operator<=>(const SdpaKey&) const = default;
  std::string describe() const;  // for error messages
};

struct SdpaVerdict {
  bool use_cudnn = false;
  std::string reason;  // why not, when not
  SdpaKey key;         // valid when use_cudnn
};

// cuDNN's support surface as cudnn-frontend checks it for bf16/fp16 SDPA
// (sdpa_support_surface.h, CompositeSDPABackwardNode::pre_validate_node),
// narrowed to what this path builds: float16/bfloat16, causal, q_len ==
// kv_len >= 2 (s_q = s_kv = 1 has no backward engine), head_dim a multiple of
// 8 and <= 128 (<= 256 on sm_90), sm_80+, cuDNN >= 9.0 but not 9.10.0/9.10.1
// (known bad), every operand 16-byte aligned with strides of whole 16-byte
// steps and one head count for all (a [B*H]-flat operand is re-expressed in
// the query's heads). Pure: no device is touched.
SdpaVerdict cudnn_sdpa_support(const SdpaRequest& r, const SdpaEnv& env);

// Whether the cuDNN path is tried (RuntimeOptions::cudnn_attention, on by
// default), and its setter (Runtime::configure).
bool cudnn_attention_enabled();
void set_cudnn_attention_enabled(bool on);

// The text of a failed backend call: the call, the cuDNN status by name and
// number, and the shape it was building for.
std::string sdpa_error_text(int status, const std::string& call, const SdpaKey& key);

// Counters of the plan caches (all threads): hits, misses (a plan built or
// tried), no_engine (misses where no engine finalized for the graph; those
// calls use the own kernel, and the key stays cached as such).
struct SdpaCacheStats {
  int64_t hits = 0, misses = 0, no_engine = 0;
};
SdpaCacheStats cudnn_sdpa_cache_stats();

// A per-key cache of built plans (one per thread in use), counting into
// `stats`; a null plan (no engine took the graph) is cached too. Generic so
// that its counting is tested without a GPU.
template <class Plan>
class SdpaPlanCache {
 public:
  struct Counters {
    std::atomic<int64_t> hits{0}, misses{0}, no_engine{0};
  };
  explicit SdpaPlanCache(Counters& c) : c_(c) {}
  std::shared_ptr<const Plan> get(const SdpaKey& key,
                                  const std::function<std::shared_ptr<const Plan>()>& build) {
    auto it = plans_.find(key);
    if (it != plans_.end()) {
      c_.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
    c_.misses.fetch_add(1, std::memory_order_relaxed);
    std::shared_ptr<const Plan> p = build();  // a throw caches nothing
    if (!p) c_.no_engine.fetch_add(1, std::memory_order_relaxed);
    plans_.emplace(key, p);
    return p;
  }
  size_t size() const { return plans_.size(); }

 private:
  Counters& c_;
  std::map<SdpaKey, std::shared_ptr<const Plan>> plans_;
};

// Run through cuDNN when cudnn_sdpa_support takes the request and an engine
// takes its graph; false (nothing written) otherwise. lse: [batch_heads *
// q_len] float32, written by the forward, read by the backward. The backward
// overwrites dq, dk, dv. Enqueued on the current stream of `device`.
// Failure: a backend call that fails otherwise throws cohort::Error with
// sdpa_error_text's message.
bool cudnn_sdpa_forward(Device device, const SdpaRequest& r, float* lse);
bool cudnn_sdpa_backward(Device device, const SdpaRequest& r, const float* lse);

}  // namespace cohort::cuda
