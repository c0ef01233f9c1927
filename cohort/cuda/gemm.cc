// cuBLASLt products (gemm.h) and the device kernels of native::mm, matmul,
// linear and their bf16 forms (native/linalg.h, native/linalg_bf16.h).
#include "cohort/cuda/gemm.h"

#include <algorithm>
#include <memory>

#include "cohort/base/error.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/native/linalg_bf16.h"
#include "cohort/core/shape.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/gemm_padding.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

// cuBLASLt wants 32 MiB of workspace on Hopper for its best kernels.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType cuda_type(DType t, const char* op) {
  switch (t) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kFloat64:
      return CUDA_R_64F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    default:
      throw NotSupported(fmt::format("{}: no CUDA product for dtype {}", op, dtype_name(t)));
  }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt picks
// vectorised kernels from it, so views at odd offsets must say so.
uint32_t alignment(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

// A column-major rows x cols matrix, ld apart, `batch` of them stride apart.
Layout layout(cudaDataType type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                                 static_cast<uint64_t>(cols), ld));
  Layout out(l);
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &count, sizeof(count)));
    COHORT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return out;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  COHORT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}

template <class T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  COHORT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &value, sizeof(value)));
}

DType result_dtype(DType ab) { return ab == DType::kBFloat16 ? DType::kFloat32 : ab; }

void check_gemm_dtypes(const Tensor& a, const Tensor& b, const char* op) {
  COHORT_CHECK(a.dtype() == b.dtype(), "{}: dtypes {} and {} differ", op, dtype_name(a.dtype()),
               dtype_name(b.dtype()));
  COHORT_CHECK(
      a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64 || a.dtype() == DType::kBFloat16,
      "{}: CUDA products take float32, float64 or bfloat16, got {}", op, dtype_name(a.dtype()));
}

// out[m, n] (a contiguous tensor, or [batch, m, n]) = a b on the device.
void product_into(Device d, const char* op, const Tensor& out, const Tensor& a3, const Tensor& b3,
                  int64_t batch, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    COHORT_CUDA_CHECK(cudaMemsetAsync(out.device_data(), 0, out.nbytes(), current_cuda_stream(d)));
    return;
  }
  GemmCall c;
  c.op = op;
  c.ab = a3.dtype();
  c.c = out.dtype();
  c.m = m;
  c.n = n;
  c.k = k;
  c.batch = batch;
  c.a = gemm_operand(a3);
  c.b = gemm_operand(b3);
  c.c_data = out.device_data();
  c.ldc = n;
  c.c_batch_stride = m * n;
  gemm(d, c);
}

// matmul's shapes (1-D operands, broadcast batch dims) on any of the dtypes.
Tensor device_matmul(const Tensor& a, const Tensor& b, const char* op) {
  Device d = op_device(op, {&a, &b});
  check_gemm_dtypes(a, b, op);
  COHORT_CHECK(a.dim() >= 1 && b.dim() >= 1, "{}: operands must be at least 1-D, got {} and {}", op,
               shape_str(a.sizes()), shape_str(b.sizes()));
  if (a.dim() == 1 && b.dim() == 1)
    return device_matmul(a.unsqueeze(0), b.unsqueeze(1), op).reshape({});
  if (a.dim() == 1) return device_matmul(a.unsqueeze(0), b, op).squeeze(-2);
  if (b.dim() == 1) return device_matmul(a, b.unsqueeze(1), op).squeeze(-1);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  COHORT_CHECK(b.size(-2) == k, "{}: shapes {} and {} cannot be multiplied", op,
               shape_str(a.sizes()), shape_str(b.sizes()));
  Shape ab(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, op);
  const int64_t nb = shape_numel(batch);
  Shape ea = batch, eb = batch, os = batch;
  ea.insert(ea.end(), {m, k});
  eb.insert(eb.end(), {k, n});
  os.insert(os.end(), {m, n});
  // [nb, m, k] views; an operand broadcast over the whole batch keeps batch
  // stride 0 (one matrix read by every product) instead of a copy.
  auto batched = [&](const Tensor& t, const Shape& e, int64_t r, int64_t c) {
    if (t.dim() == 2) return t.unsqueeze(0).expand({nb, r, c});
    return t.expand(e).reshape({nb, r, c});
  };
  Tensor a3 = batched(a, ea, m, k), b3 = batched(b, eb, k, n);
  Tensor out = Tensor::empty(os, result_dtype(a.dtype()), d);
  product_into(d, op, out, a3, b3, nb, m, n, k);
  return out;
}

Tensor device_mm(const Tensor& a, const Tensor& b, const char* op) {
  Device d = op_device(op, {&a, &b});
  check_gemm_dtypes(a, b, op);
  COHORT_CHECK(a.dim() == 2 && b.dim() == 2 && a.sizes()[1] == b.sizes()[0],
               "{}: shapes {} and {} cannot be multiplied", op, shape_str(a.sizes()),
               shape_str(b.sizes()));
  const int64_t m = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[1];
  Tensor out = Tensor::empty({m, n}, result_dtype(a.dtype()), d);
  product_into(d, op, out, a, b, 1, m, n, k);
  return out;
}

Tensor cuda_mm(const Tensor& a, const Tensor& b) { return device_mm(a, b, "mm"); }
Tensor cuda_mm_bf16(const Tensor& a, const Tensor& b) { return device_mm(a, b, "mm_bf16"); }
Tensor cuda_matmul(const Tensor& a, const Tensor& b) { return device_matmul(a, b, "matmul"); }
Tensor cuda_matmul_bf16(const Tensor& a, const Tensor& b) {
  return device_matmul(a, b, "matmul_bf16");
}

Tensor cuda_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear_forward(x, w, b, "linear").out;
}
Tensor cuda_linear_bf16(const Tensor& x, const Tensor& w, const Tensor& b) {
  return linear_forward(x, w, b, "linear_bf16").out;
}

}  // namespace

GemmOperand gemm_operand(const Tensor& t) {
  COHORT_CHECK(t.dim() == 2 || t.dim() == 3, "gemm: operand must be 2-D or 3-D, got {}",
               shape_str(t.sizes()));
  const int64_t r = t.size(-2), c = t.size(-1);
  const int64_t rs = t.stride(-2), cs = t.stride(-1);
  GemmOperand o;
  o.keep = t;
  // cuBLASLt needs ld >= the stored rows' length, and at least 1.
  if ((cs == 1 || c == 1) && rs >= std::max<int64_t>(c, 1)) {
    o.ld = rs;
  } else if ((rs == 1 || r == 1) && cs >= std::max<int64_t>(r, 1)) {
    o.trans = true;
    o.ld = cs;
  } else {
    o.keep = t.contiguous();
    o.ld = std::max<int64_t>(c, 1);
  }
  if (t.dim() == 3 && t.size(0) > 1) o.batch_stride = o.keep.stride(0);
  o.data = o.keep.device_data();
  return o;
}

GemmKey gemm_key(Device device, const GemmCall& g, bool allow_tf32) {
  const bool batched = g.batch > 1;
  GemmKey key{};
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.batch = g.batch;
  key.trans_a = g.a.trans;
  key.trans_b = g.b.trans;
  key.lda = g.a.ld;
  key.ldb = g.b.ld;
  key.ldc = g.ldc;
  key.stride_a = batched ? g.a.batch_stride : 0;
  key.stride_b = batched ? g.b.batch_stride : 0;
  key.stride_c = batched ? g.c_batch_stride : 0;
  key.ab = static_cast<int64_t>(g.ab);
  key.c = static_cast<int64_t>(g.c);
  key.tf32 = allow_tf32 && g.ab == DType::kFloat32;
  key.epilogue = static_cast<int64_t>(g.epilogue);
  key.device = device.index();
  key.align_a = alignment(g.a.data);
  key.align_b = alignment(g.b.data);
  key.align_c = alignment(g.c_data);
  key.align_bias = g.bias != nullptr ? alignment(g.bias) : 0;
  key.align_aux = g.aux != nullptr ? alignment(g.aux) : 0;
  return key;
}

namespace {

// One shape's descriptors and the heuristic's algorithm (found false: it
// has none). The descriptor's bias and aux pointers are set again on every
// call, which is why the cache is per thread.
struct GemmPlan {
  MatmulDesc desc;
  Layout first, second, out;
  bool found = false;
  cublasLtMatmulHeuristicResult_t result{};
};

using GemmPlanCache = PlanCache<GemmKey, GemmPlan, Int64FieldsHash<GemmKey>>;

GemmPlanCache& plan_cache() {
  thread_local GemmPlanCache cache(kGemmPlanCacheCapacity);
  return cache;
}

cudaDataType scale_type(DType ab) { return ab == DType::kFloat64 ? CUDA_R_64F : CUDA_R_32F; }

void set_pointers(cublasLtMatmulDesc_t desc, const GemmCall& g) {
  if (g.epilogue == GemmEpilogue::kBias || g.epilogue == GemmEpilogue::kGeluAuxBias) {
    COHORT_CHECK(g.bias != nullptr, "{}: bias epilogue without a bias", g.op);
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  }
  if (g.epilogue == GemmEpilogue::kGeluAux || g.epilogue == GemmEpilogue::kGeluAuxBias) {
    COHORT_CHECK(g.aux != nullptr, "{}: GELU epilogue without its aux output", g.op);
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(g.aux));
  }
}

std::shared_ptr<GemmPlan> build_plan(Device device, const GemmCall& g, bool tf32) {
  const cudaDataType ab = cuda_type(g.ab, g.op), ct = cuda_type(g.c, g.op);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (g.ab == DType::kFloat64) {
    compute = CUBLAS_COMPUTE_64F;
  } else if (tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  auto plan = std::make_shared<GemmPlan>();
  cublasLtMatmulDesc_t raw_desc = nullptr;
  COHORT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, scale_type(g.ab)));
  plan->desc.reset(raw_desc);
  // Column-major: C^T[n, m] = op(B)^T op(A)^T; cuBLASLt's first operand is
  // our B. A row-major stored matrix read column-major is its transpose, so
  // each operand is transposed exactly when ours is.
  const cublasOperation_t op_first = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  switch (g.epilogue) {
    case GemmEpilogue::kNone:
      break;
    case GemmEpilogue::kBias:
      epilogue = CUBLASLT_EPILOGUE_BIAS;
      break;
    case GemmEpilogue::kGeluAux:
      epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
      break;
    case GemmEpilogue::kGeluAuxBias:
      epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      break;
  }
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    COHORT_CHECK(g.batch == 1, "{}: fused epilogues take one product, got a batch of {}", g.op,
                 g.batch);
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  }
  if (g.epilogue == GemmEpilogue::kBias || g.epilogue == GemmEpilogue::kGeluAuxBias)
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(ct));
  if (g.epilogue == GemmEpilogue::kGeluAux || g.epilogue == GemmEpilogue::kGeluAuxBias) {
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ldc);
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(ct));
  }
  set_pointers(raw_desc, g);
  plan->first =
      layout(ab, g.b.trans ? g.k : g.n, g.b.trans ? g.n : g.k, g.b.ld, g.batch, g.b.batch_stride);
  plan->second =
      layout(ab, g.a.trans ? g.m : g.k, g.a.trans ? g.k : g.m, g.a.ld, g.batch, g.a.batch_stride);
  plan->out = layout(ct, g.n, g.m, g.ldc, g.batch, g.c_batch_stride);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  COHORT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kWorkspaceBytes});
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.b.data));
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.a.data));
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(g.c_data));
  set_pref(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.c_data));

  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      cublaslt_handle(device), raw_desc, plan->first.get(), plan->second.get(), plan->out.get(),
      plan->out.get(), raw_pref, 1, &plan->result, &found);
  // "No algorithm" is found == 0, or NOT_SUPPORTED / INVALID_VALUE for a
  // layout it cannot take (an epilogue's: whatever the cause, the parts then
  // run apart, as before the cache); other failures are not kept.
  const bool no_algorithm = st == CUBLAS_STATUS_NOT_SUPPORTED ||
                            st == CUBLAS_STATUS_INVALID_VALUE || g.epilogue != GemmEpilogue::kNone;
  if (st != CUBLAS_STATUS_SUCCESS && !no_algorithm)
    throw_cublas_error(st, "cublasLtMatmulAlgoGetHeuristic");
  plan->found = st == CUBLAS_STATUS_SUCCESS && found > 0;
  return plan;
}

std::shared_ptr<GemmPlan> find_plan(Device device, const GemmCall& g) {
  const bool tf32 = native::allow_tf32();
  return plan_cache().get(gemm_key(device, g, tf32), [&] { return build_plan(device, g, tf32); });
}

void run_plan(Device device, const GemmCall& g, GemmPlan& plan) {
  set_pointers(plan.desc.get(), g);
  void* ws = workspace(device, kWorkspaceBytes);
  cudaStream_t stream = current_cuda_stream(device);
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  const bool f64 = scale_type(g.ab) == CUDA_R_64F;
  const void* alpha = f64 ? static_cast<const void*>(&g.alpha) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&g.beta) : &beta32;
  COHORT_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(device), plan.desc.get(), alpha, g.b.data,
                                     plan.first.get(), g.a.data, plan.second.get(), beta, g.c_data,
                                     plan.out.get(), g.c_data, plan.out.get(), &plan.result.algo,
                                     ws, kWorkspaceBytes, stream));
}

NotSupported no_algorithm(Device device, const GemmCall& g, const char* why) {
  return NotSupported(fmt::format(
      "{}: cuBLASLt has no algorithm for {} x {} -> {} (m={} n={} k={} batch={}, leading "
      "dimensions {} {} {}) on {}{}",
      g.op, dtype_name(g.ab), dtype_name(g.ab), dtype_name(g.c), g.m, g.n, g.k, g.batch, g.a.ld,
      g.b.ld, g.ldc, device.str(), why));
}

void run_copy(const PitchCopy& c, const void* src, void* dst, cudaStream_t stream) {
  for (int64_t i = 0; i < c.count; ++i)
    COHORT_CUDA_CHECK(cudaMemcpy2DAsync(
        static_cast<char*>(dst) + i * c.dst_step, static_cast<size_t>(c.dst_pitch),
        static_cast<const char*>(src) + i * c.src_step, static_cast<size_t>(c.src_pitch),
        static_cast<size_t>(c.row_bytes), static_cast<size_t>(c.rows), cudaMemcpyDeviceToDevice,
        stream));
}

}  // namespace

bool gemm(Device device, const GemmCall& g) {
  COHORT_CHECK(g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0,
               "{}: empty product m={} n={} k={} batch={}", g.op, g.m, g.n, g.k, g.batch);
  std::shared_ptr<GemmPlan> plan = find_plan(device, g);
  if (plan->found) {
    run_plan(device, g, *plan);
    return true;
  }
  if (g.epilogue != GemmEpilogue::kNone) return false;
  gemm_padded(device, g);
  return true;
}

void gemm_padded(Device device, const GemmCall& g) {
  COHORT_CHECK(g.epilogue == GemmEpilogue::kNone, "{}: padded products take no epilogue", g.op);
  const bool batched = g.batch > 1;
  const auto address = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  const GemmPadding p = gemm_padding(
      stored_a(g.m, g.k, g.a.trans, g.a.ld, batched ? g.a.batch_stride : 0, address(g.a.data)),
      stored_b(g.k, g.n, g.b.trans, g.b.ld, batched ? g.b.batch_stride : 0, address(g.b.data)),
      stored_c(g.m, g.n, g.ldc, batched ? g.c_batch_stride : 0, address(g.c_data)),
      static_cast<int64_t>(dtype_size(g.ab)), static_cast<int64_t>(dtype_size(g.c)), g.batch);
  if (!p.any()) throw no_algorithm(device, g, " (its operands are aligned)");
  cudaStream_t stream = current_cuda_stream(device);
  GemmCall q = g;
  auto padded_operand = [&](const PaddedMatrix& pm, GemmOperand& o) {
    if (!pm.padded) return;
    Tensor t = Tensor::empty({pm.bytes}, DType::kUInt8, device);
    run_copy(pm.to_padded, o.data, t.device_data(), stream);
    o.keep = t;
    o.data = t.device_data();
    o.ld = pm.ld;
    o.batch_stride = pm.batch_stride;
  };
  padded_operand(p.a, q.a);
  padded_operand(p.b, q.b);
  Tensor c_copy;
  if (p.c.padded) {
    c_copy = Tensor::empty({p.c.bytes}, DType::kUInt8, device);
    if (g.beta != 0) run_copy(p.c.to_padded, g.c_data, c_copy.device_data(), stream);
    q.c_data = c_copy.device_data();
    q.ldc = p.c.ld;
    q.c_batch_stride = p.c.batch_stride;
  }
  std::shared_ptr<GemmPlan> plan = find_plan(device, q);
  if (!plan->found) throw no_algorithm(device, g, ", even with its operands padded to 16 bytes");
  run_plan(device, q, *plan);
  if (p.c.padded) run_copy(p.c.from_padded, c_copy.device_data(), g.c_data, stream);
}

PlanCacheStats gemm_plan_cache_stats() { return plan_cache().stats(); }

LinearForward linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const char* op,
                             bool gelu) {
  Device d = op_device(op, {&x, &w, &b});
  check_gemm_dtypes(x, w, op);
  COHORT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.sizes()[1],
               "{}: input {} does not match weight {} (want [..., in] and [out, in])", op,
               shape_str(x.sizes()), shape_str(w.sizes()));
  const DType yt = result_dtype(x.dtype());
  const int64_t in = w.sizes()[1], outf = w.sizes()[0];
  Tensor bias;
  if (b.defined()) {
    COHORT_CHECK(b.dim() == 1 && b.sizes()[0] == outf, "{}: bias must be [{}], got {}", op, outf,
                 shape_str(b.sizes()));
    // As the CPU's linear: a bias of another floating dtype is converted.
    bias = b.to(yt).contiguous();
  }
  Tensor x2 = x.reshape({-1, in});
  const int64_t rows = x2.sizes()[0];
  Shape os(x.sizes().begin(), x.sizes().end() - 1);
  os.push_back(outf);
  LinearForward r;
  r.out = Tensor::empty(os, yt, d);
  if (gelu) r.pre = Tensor::empty(os, yt, d);
  Tensor target = gelu ? r.pre : r.out;  // what the plain product writes
  if (rows == 0 || outf == 0) return r;
  cudaStream_t stream = current_cuda_stream(d);
  if (in == 0) {
    COHORT_CUDA_CHECK(cudaMemsetAsync(target.device_data(), 0, target.nbytes(), stream));
  } else {
    GemmCall c;
    c.op = op;
    c.ab = x.dtype();
    c.c = yt;
    c.m = rows;
    c.n = outf;
    c.k = in;
    c.a = gemm_operand(x2);
    c.b = gemm_operand(w);
    c.b.trans = !c.b.trans;  // x w^T
    c.c_data = target.device_data();
    c.ldc = outf;
    // GELU in the epilogue: cuBLASLt's GELU is the tanh form (GPT-2's); its
    // aux output (the pre-activation) wants a leading dimension that is a
    // multiple of 8, otherwise the parts run apart.
    if (gelu && outf % 8 == 0) {
      GemmCall f = c;
      f.c_data = r.out.device_data();
      f.epilogue = bias.defined() ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kGeluAux;
      f.bias = bias.defined() ? bias.device_data() : nullptr;
      f.aux = r.pre.device_data();
      if (gemm(d, f)) return r;
    }
    if (bias.defined()) {
      GemmCall f = c;
      f.epilogue = GemmEpilogue::kBias;
      f.bias = bias.device_data();
      if (!gemm(d, f)) {
        gemm(d, c);
        launch_add_bias_rows(yt, target.device_data(), bias.device_data(), rows, outf, stream);
      }
    } else {
      gemm(d, c);
    }
  }
  if (in == 0 && bias.defined())
    launch_add_bias_rows(yt, target.device_data(), bias.device_data(), rows, outf, stream);
  if (gelu) launch_gelu_tanh(yt, r.pre.device_data(), r.out.device_data(), r.out.numel(), stream);
  return r;
}

void register_gemm_kernels() {
  native::mm_device.set(DeviceType::kCUDA, &cuda_mm);
  native::matmul_device.set(DeviceType::kCUDA, &cuda_matmul);
  native::linear_device.set(DeviceType::kCUDA, &cuda_linear);
  native::mm_bf16_device.set(DeviceType::kCUDA, &cuda_mm_bf16);
  native::matmul_bf16_device.set(DeviceType::kCUDA, &cuda_matmul_bf16);
  native::linear_bf16_device.set(DeviceType::kCUDA, &cuda_linear_bf16);
}

}  // namespace cohort::cuda
