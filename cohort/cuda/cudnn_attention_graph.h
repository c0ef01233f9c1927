// The backend-API graphs of cudnn_attention.h's fused attention: descriptors
// with owners, the forward and backward operation lists, and the plan built
// from them (heuristics mode A, the first engine config that finalizes).
// COMPILED, NOT RUN ON A GPU (see cudnn_attention.h): the operation lists are
// built and finalized in the CPU tests (no handle is needed for them); the
// operation graph, heuristics and plans need a device.
// Thread safety: a built plan is immutable; building is reentrant.
#pragma once

#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/cuda/cudnn_attention.h"

namespace cohort::cuda::sdpa_graph {

// The tensors a variant pack binds (the rest are virtual).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,   // by value, float
  kNegInf,  // by value, float
  kDO,
  kDQ,
  kDK,
  kDV,
  kOne,          // by value, float
  kSoftmaxSum,   // backward scratch: float [b, h, s_q, 1]
  kDQAccum,      // backward scratch: float [b, h, s_q, d]
  kFirstVirtual  // virtual tensors count up from here
};

// Owns one backend descriptor.
class Desc {
 public:
  Desc(cudnnBackendDescriptorType_t type, const SdpaKey& key);
  ~Desc();
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Throws cohort::Error with sdpa_error_text when `status` is not success.
void check(cudnnStatus_t status, const char* call, const SdpaKey& key);

// Every finalized operation of the key's graph and the descriptors they use.
struct Ops {
  std::vector<std::unique_ptr<Desc>> owned;
  std::vector<cudnnBackendDescriptor_t> ops;
};
Ops build_ops(const SdpaKey& key);

struct Plan {
  Ops ops;
  std::unique_ptr<Desc> graph, heuristics, plan;
  std::vector<std::unique_ptr<Desc>> configs;
  int64_t plan_workspace = 0;  // bytes
};
// nullptr when no engine config of the heuristics finalizes for the graph
// (cuDNN does not take it: the caller falls back); `why` then says why.
std::shared_ptr<const Plan> build_plan(cudnnHandle_t handle, const SdpaKey& key, std::string& why);

}  // namespace cohort::cuda::sdpa_graph
