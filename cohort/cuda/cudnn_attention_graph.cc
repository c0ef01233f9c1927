// COMPILED, NOT RUN ON A GPU (see cudnn_attention.h). The operation lists
// follow cudnn-frontend's CompositeSDPANode / CompositeSDPABackwardNode
// expansions op for op, with the tensor types its context gives them (io
// dtype for the non-virtual tensors and the matmul operands it casts, float32
// for every other virtual tensor, int32 indices, a boolean mask), and its
// fused scalars as by-value [1, 1, 1, 1] tensors.
#include "cohort/cuda/cudnn_attention_graph.h"

#include <fmt/format.h>

#include "cohort/base/error.h"

namespace cohort::cuda::sdpa_graph {
namespace {

using D4 = std::array<int64_t, 4>;

D4 packed(const D4& dims) { return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}; }

cudnnDataType_t io_type(DType t) {
  return t == DType::kFloat16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

// Builds one graph's descriptors, each finalized as it is made.
class Builder {
 public:
  explicit Builder(const SdpaKey& key) : key_(key) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const D4& dims,
                                  const D4& strides, bool is_virtual = false,
                                  bool by_value = false) {
    Desc& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "TENSOR_DATA_TYPE");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "TENSOR_DIMENSIONS");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "TENSOR_STRIDES");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "TENSOR_UNIQUE_ID");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment,
        "TENSOR_BYTE_ALIGNMENT");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "TENSOR_IS_VIRTUAL");
    if (by_value)
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "TENSOR_IS_BY_VALUE");
    finalize(t, "tensor");
    return t.get();
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, const D4& dims, const D4& strides) {
    return tensor(next_virtual_++, type, dims, strides, true);
  }
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = mode(x[, b[, t]]); `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "POINTWISE_MODE");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "POINTWISE_MATH_PREC");
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "POINTWISE_AXIS");
    finalize(pw, "pointwise");
    Desc& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cudnnBackendDescriptor_t pd = pw.get();
    const float one = 1.0f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pd,
        "OPERATION_POINTWISE_PW_DESCRIPTOR");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "OPERATION_POINTWISE_XDESC");
    if (b)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
          "OPERATION_POINTWISE_BDESC");
    if (t)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
          "OPERATION_POINTWISE_TDESC");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "OPERATION_POINTWISE_YDESC");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "POINTWISE_ALPHA1");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "POINTWISE_ALPHA2");
    add_op(op, "pointwise operation");
  }
  void unary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    pointwise(mode, x, nullptr, nullptr, y);
  }
  void binary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t y) {
    pointwise(mode, x, b, nullptr, y);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "MATMUL_COMP_TYPE");
    finalize(mm, "matmul");
    Desc& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    cudnnBackendDescriptor_t md = mm.get();
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a,
        "OPERATION_MATMUL_ADESC");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
        "OPERATION_MATMUL_BDESC");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
        "OPERATION_MATMUL_CDESC");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &md,
        "OPERATION_MATMUL_DESC");
    add_op(op, "matmul operation");
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    Desc& rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
        "REDUCTION_OPERATOR");
    set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "REDUCTION_COMP_TYPE");
    finalize(rd, "reduction");
    Desc& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    cudnnBackendDescriptor_t r = rd.get();
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "OPERATION_REDUCTION_XDESC");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "OPERATION_REDUCTION_YDESC");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
        "OPERATION_REDUCTION_DESC");
    add_op(op, "reduction operation");
  }

  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc& op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "OPERATION_RESHAPE_XDESC");
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "OPERATION_RESHAPE_YDESC");
    add_op(op, "reshape operation");
  }

  // s masked to -inf where key col > query row (frontend's causal_mask: the
  // right bound 0 of a top-left aligned diagonal band).
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t neg_inf,
                                       const D4& dims, const D4& strides) {
    cudnnBackendDescriptor_t row = virt(CUDNN_DATA_INT32, dims, strides);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
    cudnnBackendDescriptor_t col = virt(CUDNN_DATA_INT32, dims, strides);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
    cudnnBackendDescriptor_t keep = virt(CUDNN_DATA_BOOLEAN, dims, strides);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t out = virt(CUDNN_DATA_FLOAT, dims, strides);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, keep, out);
    return out;
  }

  Ops take() { return std::move(ops_); }

 private:
  Desc& make(cudnnBackendDescriptorType_t type) {
    ops_.owned.push_back(std::make_unique<Desc>(type, key_));
    return *ops_.owned.back();
  }
  void set(Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value, const char* what) {
    check(cudnnBackendSetAttribute(d.get(), name, type, count, value),
          fmt::format("cudnnBackendSetAttribute({})", what).c_str(), key_);
  }
  void finalize(Desc& d, const char* what) {
    check(cudnnBackendFinalize(d.get()), fmt::format("cudnnBackendFinalize({})", what).c_str(),
          key_);
  }
  void add_op(Desc& op, const char* what) {
    finalize(op, what);
    ops_.ops.push_back(op.get());
  }

  const SdpaKey& key_;
  Ops ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

D4 operand(const SdpaKey& k, int i) {
  return {k.strides[i][0], k.strides[i][1], k.strides[i][2], 1};
}
// The [b, h, d, s] view of an operand stored [b, h, s, d].
D4 transposed(const SdpaKey& k, int i) {
  return {k.strides[i][0], k.strides[i][1], 1, k.strides[i][2]};
}

void forward_ops(Builder& g, const SdpaKey& k) {
  const cudnnDataType_t io = io_type(k.dtype), f32 = CUDNN_DATA_FLOAT;
  const D4 qd{k.b, k.h, k.s_q, k.d}, ktd{k.b, k.h, k.d, k.s_kv}, vd{k.b, k.h, k.s_kv, k.d};
  const D4 sd{k.b, k.h, k.s_q, k.s_kv}, rd{k.b, k.h, k.s_q, 1};
  const D4 ss = packed(sd), rs = packed(rd);
  auto q = g.tensor(kQ, io, qd, operand(k, 0));
  auto kt = g.tensor(kK, io, ktd, transposed(k, 1));
  auto v = g.tensor(kV, io, vd, operand(k, 2));
  auto o = g.tensor(kO, io, qd, operand(k, 3));
  auto stats = g.tensor(kStats, f32, rd, rs);
  auto scale = g.scalar(kScale);

  auto s = g.virt(f32, sd, ss);
  g.matmul(q, kt, s);
  auto scaled = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_MUL, s, scale, scaled);
  auto masked = k.causal ? g.causal_mask(scaled, g.scalar(kNegInf), sd, ss) : scaled;
  // softmax with its stats (frontend's CompositeSoftmaxNode)
  auto max = g.virt(f32, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  auto sub = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_SUB, masked, max, sub);
  auto ex = g.virt(f32, sd, ss);
  g.unary(CUDNN_POINTWISE_EXP, sub, ex);
  auto sum = g.virt(f32, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
  auto log = g.virt(f32, rd, rs);
  g.unary(CUDNN_POINTWISE_LOG, sum, log);
  g.binary(CUDNN_POINTWISE_ADD, max, log, stats);
  auto p = g.virt(io, sd, ss);  // bmm2's A operand in the io dtype
  g.binary(CUDNN_POINTWISE_DIV, ex, sum, p);
  g.matmul(p, v, o);
}

void backward_ops(Builder& g, const SdpaKey& k) {
  const cudnnDataType_t io = io_type(k.dtype), f32 = CUDNN_DATA_FLOAT;
  const int64_t b = k.b, h = k.h, sq = k.s_q, skv = k.s_kv, d = k.d;
  const D4 qd{b, h, sq, d}, kvd{b, h, skv, d}, td{b, h, d, skv};
  const D4 sd{b, h, sq, skv}, rd{b, h, sq, 1}, std_{b, h, skv, sq};
  const D4 ss = packed(sd), rs = packed(rd), sts{h * sq * skv, sq * skv, 1, skv};
  auto q = g.tensor(kQ, io, qd, operand(k, 0));
  auto kt = g.tensor(kK, io, td, transposed(k, 1));
  auto vt = g.tensor(kV, io, td, transposed(k, 2));
  auto o = g.tensor(kO, io, qd, operand(k, 3));
  auto dout = g.tensor(kDO, io, qd, operand(k, 4));
  auto dq = g.tensor(kDQ, io, qd, operand(k, 5));
  auto dk = g.tensor(kDK, io, kvd, operand(k, 6));
  auto dv = g.tensor(kDV, io, kvd, operand(k, 7));
  auto stats = g.tensor(kStats, f32, rd, rs);
  auto scale = g.scalar(kScale);
  auto one = g.scalar(kOne);
  auto softmax_sum = g.tensor(kSoftmaxSum, f32, rd, rs);
  auto dq_accum = g.tensor(kDQAccum, f32, qd, packed(qd));

  // softmax_sum = rowsum(dO * O) (the frontend's [b, h, s, d] strides for it)
  auto dout_o = g.virt(f32, qd, {h * sq * d, sq * d, h * d, 1});
  g.binary(CUDNN_POINTWISE_MUL, dout, o, dout_o);
  auto row_sum = g.virt(f32, rd, rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dout_o, row_sum);
  g.binary(CUDNN_POINTWISE_MUL, row_sum, one, softmax_sum);
  // P = exp(Q K^T * scale - Stats), masked
  auto s = g.virt(f32, sd, ss);
  g.matmul(q, kt, s);
  auto scaled = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_MUL, s, scale, scaled);
  auto shifted = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_SUB, scaled, stats, shifted);
  auto masked = k.causal ? g.causal_mask(shifted, g.scalar(kNegInf), sd, ss) : shifted;
  auto p = g.virt(f32, sd, ss);
  g.unary(CUDNN_POINTWISE_EXP, masked, p);
  // dV = P^T dO
  auto pt = g.virt(io, std_, sts);
  g.reshape(p, pt);
  g.matmul(pt, dout, dv);
  // dS = P (dO V^T - softmax_sum) * scale
  auto dp = g.virt(f32, sd, ss);
  g.matmul(dout, vt, dp);
  auto centred = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_SUB, dp, softmax_sum, centred);
  auto ds = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_MUL, centred, p, ds);
  auto ds_scaled = g.virt(f32, sd, ss);
  g.binary(CUDNN_POINTWISE_MUL, ds, scale, ds_scaled);
  // dK = dS^T Q
  auto dst = g.virt(io, std_, sts);
  g.reshape(ds_scaled, dst);
  g.matmul(dst, q, dk);
  // dQ = dS K, accumulated in float32 scratch, then cast
  auto k_rows = g.virt(f32, kvd, operand(k, 1));
  g.reshape(kt, k_rows);
  g.matmul(ds_scaled, k_rows, dq_accum);
  g.unary(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
}

}  // namespace

Desc::Desc(cudnnBackendDescriptorType_t type, const SdpaKey& key) {
  check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor", key);
}

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

void check(cudnnStatus_t status, const char* call, const SdpaKey& key) {
  if (status != CUDNN_STATUS_SUCCESS) [[unlikely]]
    throw Error(sdpa_error_text(static_cast<int>(status), call, key));
}

Ops build_ops(const SdpaKey& key) {
  Builder g(key);
  if (key.backward)
    backward_ops(g, key);
  else
    forward_ops(g, key);
  return g.take();
}

std::shared_ptr<const Plan> build_plan(cudnnHandle_t handle, const SdpaKey& key, std::string& why) {
  auto p = std::make_shared<Plan>();
  p->ops = build_ops(key);
  p->graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, key);
  cudnnBackendDescriptor_t gd = p->graph->get();
  check(
      cudnnBackendSetAttribute(gd, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle),
      "cudnnBackendSetAttribute(OPERATIONGRAPH_HANDLE)", key);
  check(cudnnBackendSetAttribute(gd, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 static_cast<int64_t>(p->ops.ops.size()), p->ops.ops.data()),
        "cudnnBackendSetAttribute(OPERATIONGRAPH_OPS)", key);
  if (cudnnStatus_t st = cudnnBackendFinalize(gd); st != CUDNN_STATUS_SUCCESS) {
    if (st != CUDNN_STATUS_NOT_SUPPORTED) check(st, "cudnnBackendFinalize(operation graph)", key);
    why = sdpa_error_text(static_cast<int>(st), "cudnnBackendFinalize(operation graph)", key);
    return nullptr;
  }

  p->heuristics = std::make_unique<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, key);
  cudnnBackendDescriptor_t hd = p->heuristics->get();
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  check(cudnnBackendSetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd),
        "cudnnBackendSetAttribute(ENGINEHEUR_OPERATION_GRAPH)", key);
  check(cudnnBackendSetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode),
        "cudnnBackendSetAttribute(ENGINEHEUR_MODE)", key);
  if (cudnnStatus_t st = cudnnBackendFinalize(hd); st != CUDNN_STATUS_SUCCESS) {
    if (st != CUDNN_STATUS_NOT_SUPPORTED) check(st, "cudnnBackendFinalize(engine heuristics)", key);
    why = sdpa_error_text(static_cast<int>(st), "cudnnBackendFinalize(engine heuristics)", key);
    return nullptr;
  }
  int64_t count = 0;
  check(cudnnBackendGetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &count, nullptr),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", key);
  if (count == 0) {
    why = "the heuristics (mode A) offer no engine config for " + key.describe();
    return nullptr;
  }
  std::vector<cudnnBackendDescriptor_t> cfgs;
  for (int64_t i = 0; i < count; ++i) {
    p->configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, key));
    cfgs.push_back(p->configs.back()->get());
  }
  int64_t got = 0;
  check(cudnnBackendGetAttribute(hd, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 count, &got, cfgs.data()),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)", key);
  // The first config, in the heuristics' order, whose plan finalizes.
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (int64_t i = 0; i < got; ++i) {
    auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, key);
    check(cudnnBackendSetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                   1, &handle),
          "cudnnBackendSetAttribute(EXECUTION_PLAN_HANDLE)", key);
    check(cudnnBackendSetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]),
          "cudnnBackendSetAttribute(EXECUTION_PLAN_ENGINE_CONFIG)", key);
    last = cudnnBackendFinalize(plan->get());
    if (last != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0;
    check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &p->plan_workspace),
          "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)", key);
    p->plan = std::move(plan);
    return p;
  }
  why = fmt::format("none of the {} engine configs finalized (last: {})", got,
                    sdpa_error_text(static_cast<int>(last), "cudnnBackendFinalize(plan)", key));
  return nullptr;
}

}  // namespace cohort::cuda::sdpa_graph
