// CUDA kernels of conv2d forward and backward (core/kernels/conv2d_device.h)
// through cuDNN's convolution API: NCHW float32, cross-correlation as
// PyTorch's, bias and ReLU after the convolution (cudnnAddTensor, a mask
// kernel). float32 runs on TF32 tensor cores only when native::allow_tf32()
// says so (the one switch for products and convolutions; PyTorch has a
// second one for cuDNN). Algorithms: cuDNN's heuristic order, deterministic
// ones first (the same bits every run), the first that runs. Descriptors and
// the chosen algorithm of each shape and direction are kept (conv2d_plan.h),
// so that the search runs on a shape's first call only.
#include <algorithm>
#include <memory>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/core/kernels/conv2d_device.h"
#include "cohort/core/native/linalg.h"
#include "cohort/core/shape.h"
#include "cohort/cuda/check.h"
#include "cohort/cuda/conv2d_plan.h"
#include "cohort/cuda/dense_kernels.h"
#include "cohort/cuda/dense_register.h"
#include "cohort/cuda/runtime.h"

namespace cohort::cuda {
namespace {

// The most scratch an algorithm may ask for.
constexpr size_t kMaxWorkspace = size_t{512} << 20;

struct CudnnDeleter {
  void operator()(cudnnTensorStruct* d) const { cudnnDestroyTensorDescriptor(d); }
  void operator()(cudnnFilterStruct* d) const { cudnnDestroyFilterDescriptor(d); }
  void operator()(cudnnConvolutionStruct* d) const { cudnnDestroyConvolutionDescriptor(d); }
};

std::unique_ptr<cudnnTensorStruct, CudnnDeleter> tensor_desc(int64_t n, int64_t c, int64_t h,
                                                             int64_t w) {
  cudnnTensorDescriptor_t d = nullptr;
  COHORT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  std::unique_ptr<cudnnTensorStruct, CudnnDeleter> out(d);
  COHORT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                static_cast<int>(n), static_cast<int>(c),
                                                static_cast<int>(h), static_cast<int>(w)));
  return out;
}

// The descriptors of one convolution.
struct ConvDescs {
  std::unique_ptr<cudnnTensorStruct, CudnnDeleter> x, y, bias;
  std::unique_ptr<cudnnFilterStruct, CudnnDeleter> w;
  std::unique_ptr<cudnnConvolutionStruct, CudnnDeleter> conv;
  bool tf32 = false;

  ConvDescs(const kernels::Conv2dGeometry& g, bool allow_tf32) : tf32(allow_tf32) {
    COHORT_CHECK(std::max({g.batch, g.in_channels, g.in_h, g.in_w, g.out_channels}) < (1ll << 31),
                 "conv2d: sizes beyond cuDNN's int range");
    x = tensor_desc(g.batch, g.in_channels, g.in_h, g.in_w);
    y = tensor_desc(g.batch, g.out_channels, g.out_h(), g.out_w());
    bias = tensor_desc(1, g.out_channels, 1, 1);
    cudnnFilterDescriptor_t fd = nullptr;
    COHORT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&fd));
    w.reset(fd);
    COHORT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(g.out_channels),
        static_cast<int>(g.in_channels), static_cast<int>(g.kernel_h),
        static_cast<int>(g.kernel_w)));
    cudnnConvolutionDescriptor_t cd = nullptr;
    COHORT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cd));
    conv.reset(cd);
    COHORT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        cd, static_cast<int>(g.pad_h), static_cast<int>(g.pad_w), static_cast<int>(g.stride_h),
        static_cast<int>(g.stride_w), 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    COHORT_CUDNN_CHECK(cudnnSetConvolutionMathType(cd, math()));
  }
  // FMA_MATH keeps float32 products off the TF32 tensor cores.
  cudnnMathType_t math() const { return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }
};

// One shape and direction's descriptors and, once a call has run, the
// algorithm that ran (its math type and scratch).
struct ConvPlan {
  ConvDescs descs;
  bool chosen = false;
  int algo = 0;  // the cuDNN algorithm enum of the plan's direction
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t memory = 0;
  ConvPlan(const kernels::Conv2dGeometry& g, bool tf32) : descs(g, tf32) {}
};

using ConvPlanCache = PlanCache<ConvKey, ConvPlan, Int64FieldsHash<ConvKey>>;

ConvPlanCache& plan_cache() {
  thread_local ConvPlanCache cache(kConvPlanCacheCapacity);
  return cache;
}

int64_t address_alignment(const Tensor& t) {
  const auto v = reinterpret_cast<uintptr_t>(t.device_data());
  int64_t a = 16;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

std::shared_ptr<ConvPlan> find_plan(const kernels::Conv2dGeometry& g, Device d,
                                    ConvDirection direction,
                                    std::initializer_list<const Tensor*> operands) {
  int64_t align = 16;
  for (const Tensor* t : operands) align = std::min(align, address_alignment(*t));
  const bool tf32 = native::allow_tf32();
  return plan_cache().get(conv_key(g, DType::kFloat32, d, tf32, direction, align),
                          [&] { return std::make_shared<ConvPlan>(g, tf32); });
}

// Runs `run(algo, workspace, bytes)` with the plan's algorithm; on the plan's
// first call, with the candidates of search()'s cuDNN perf list: successful
// ones within kMaxWorkspace, deterministic first, each in cuDNN's order,
// until one is accepted by cuDNN, which the plan keeps.
template <class Perf, class Search, class Run>
void run_plan(Device d, const char* op, ConvPlan& plan, Search search, Run run) {
  using Algo = decltype(Perf{}.algo);
  cudnnConvolutionDescriptor_t conv = plan.descs.conv.get();
  if (plan.chosen) {
    COHORT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, plan.math));
    void* ws = plan.memory > 0 ? workspace(d, plan.memory) : nullptr;
    const cudnnStatus_t st = run(static_cast<Algo>(plan.algo), ws, plan.memory);
    if (st != CUDNN_STATUS_SUCCESS) throw_cudnn_error(st, op);
    return;
  }
  const std::vector<Perf> perfs = search();
  std::vector<const Perf*> order;
  for (int pass = 0; pass < 2; ++pass)
    for (const Perf& p : perfs)
      if (p.status == CUDNN_STATUS_SUCCESS && p.memory <= kMaxWorkspace &&
          (p.determinism == CUDNN_DETERMINISTIC) == (pass == 0))
        order.push_back(&p);
  for (const Perf* p : order) {
    // With TF32 allowed the algorithm runs with the math type cuDNN rated;
    // without, FMA only.
    const cudnnMathType_t math = plan.descs.tf32 ? p->mathType : CUDNN_FMA_MATH;
    COHORT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
    void* ws = p->memory > 0 ? workspace(d, p->memory) : nullptr;
    const cudnnStatus_t st = run(p->algo, ws, p->memory);
    if (st == CUDNN_STATUS_SUCCESS) {
      plan.chosen = true;
      plan.algo = static_cast<int>(p->algo);
      plan.math = math;
      plan.memory = p->memory;
      return;
    }
    if (st != CUDNN_STATUS_NOT_SUPPORTED && st != CUDNN_STATUS_BAD_PARAM) throw_cudnn_error(st, op);
  }
  throw NotSupported(fmt::format("{}: cuDNN has no algorithm for this convolution on {}{}", op,
                                 d.str(), plan.descs.tf32 ? "" : " without TF32"));
}

// cuDNN's perf list of a direction: up to `count` entries from `get`.
template <class Perf, class Get>
std::vector<Perf> perf_list(int count, Get get) {
  std::vector<Perf> perfs(static_cast<size_t>(count));
  int found = 0;
  COHORT_CUDNN_CHECK(get(count, &found, perfs.data()));
  perfs.resize(static_cast<size_t>(found));
  return perfs;
}

void check_conv_operand(const Tensor& t, const char* what) {
  COHORT_CHECK(t.dtype() == DType::kFloat32, "conv2d: CUDA kernel takes float32 {}, got {}", what,
               dtype_name(t.dtype()));
}

Tensor cuda_conv2d(const kernels::Conv2dGeometry& g, const Tensor& x_in, const Tensor& w_in,
                   const Tensor& b_in, bool relu) {
  kernels::check_conv2d_geometry(g, "conv2d");
  check_conv_operand(x_in, "input");
  check_conv_operand(w_in, "weight");
  if (b_in.defined()) check_conv_operand(b_in, "bias");
  Device d = x_in.device();
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor y = Tensor::empty({g.batch, g.out_channels, g.out_h(), g.out_w()}, DType::kFloat32, d);
  cudaStream_t stream = current_cuda_stream(d);
  cudnnHandle_t h = cudnn_handle(d);
  std::shared_ptr<ConvPlan> plan = find_plan(g, d, ConvDirection::kForward, {&x, &w, &y});
  const ConvDescs& c = plan->descs;
  const float one = 1.0f, zero = 0.0f;
  run_plan<cudnnConvolutionFwdAlgoPerf_t>(
      d, "conv2d", *plan,
      [&] {
        return perf_list<cudnnConvolutionFwdAlgoPerf_t>(
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, [&](int n, int* found, auto* out) {
              return cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.get(), c.w.get(), c.conv.get(),
                                                            c.y.get(), n, found, out);
            });
      },
      [&](cudnnConvolutionFwdAlgo_t algo, void* ws, size_t bytes) {
        return cudnnConvolutionForward(h, &one, c.x.get(), x.device_data(), c.w.get(),
                                       w.device_data(), c.conv.get(), algo, ws, bytes, &zero,
                                       c.y.get(), y.device_data());
      });
  if (b_in.defined()) {
    Tensor b = b_in.contiguous();
    COHORT_CUDNN_CHECK(
        cudnnAddTensor(h, &one, c.bias.get(), b.device_data(), &one, c.y.get(), y.device_data()));
  }
  if (relu)
    launch_relu_mask(y.device_ptr<float>(), y.device_ptr<float>(), y.device_ptr<float>(), y.numel(),
                     stream);
  return y;
}

kernels::Conv2dGrads cuda_conv2d_backward(const kernels::Conv2dGeometry& g, const Tensor& x_in,
                                          const Tensor& w_in, const Tensor& dy_in,
                                          const Tensor& y_relu, bool need_dx, bool need_dw,
                                          bool need_db) {
  kernels::check_conv2d_geometry(g, "conv2d_backward");
  const Shape ys{g.batch, g.out_channels, g.out_h(), g.out_w()};
  COHORT_CHECK(dy_in.sizes() == ys, "conv2d_backward: grad {} must be {}", shape_str(dy_in.sizes()),
               shape_str(ys));
  Device d = x_in.device();
  Tensor x = x_in.contiguous(), w = w_in.contiguous();
  Tensor dy = dy_in.to(DType::kFloat32).contiguous();
  cudaStream_t stream = current_cuda_stream(d);
  if (y_relu.defined()) {
    Tensor masked = Tensor::empty(ys, DType::kFloat32, d);
    Tensor yc = y_relu.contiguous();
    launch_relu_mask(dy.device_ptr<float>(), yc.device_ptr<float>(), masked.device_ptr<float>(),
                     dy.numel(), stream);
    dy = masked;
  }
  cudnnHandle_t h = cudnn_handle(d);
  const float one = 1.0f, zero = 0.0f;
  kernels::Conv2dGrads r;
  if (need_dx) {
    r.dx = Tensor::empty({g.batch, g.in_channels, g.in_h, g.in_w}, DType::kFloat32, d);
    std::shared_ptr<ConvPlan> plan =
        find_plan(g, d, ConvDirection::kBackwardData, {&w, &dy, &r.dx});
    const ConvDescs& c = plan->descs;
    run_plan<cudnnConvolutionBwdDataAlgoPerf_t>(
        d, "conv2d_backward (input)", *plan,
        [&] {
          return perf_list<cudnnConvolutionBwdDataAlgoPerf_t>(
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, [&](int n, int* found, auto* out) {
                return cudnnGetConvolutionBackwardDataAlgorithm_v7(
                    h, c.w.get(), c.y.get(), c.conv.get(), c.x.get(), n, found, out);
              });
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, size_t bytes) {
          return cudnnConvolutionBackwardData(h, &one, c.w.get(), w.device_data(), c.y.get(),
                                              dy.device_data(), c.conv.get(), algo, ws, bytes,
                                              &zero, c.x.get(), r.dx.device_data());
        });
  }
  if (need_dw) {
    r.dw = Tensor::empty(w.sizes(), DType::kFloat32, d);
    std::shared_ptr<ConvPlan> plan =
        find_plan(g, d, ConvDirection::kBackwardFilter, {&x, &dy, &r.dw});
    const ConvDescs& c = plan->descs;
    run_plan<cudnnConvolutionBwdFilterAlgoPerf_t>(
        d, "conv2d_backward (weight)", *plan,
        [&] {
          return perf_list<cudnnConvolutionBwdFilterAlgoPerf_t>(
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, [&](int n, int* found, auto* out) {
                return cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                    h, c.x.get(), c.y.get(), c.conv.get(), c.w.get(), n, found, out);
              });
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t bytes) {
          return cudnnConvolutionBackwardFilter(h, &one, c.x.get(), x.device_data(), c.y.get(),
                                                dy.device_data(), c.conv.get(), algo, ws, bytes,
                                                &zero, c.w.get(), r.dw.device_data());
        });
  }
  if (need_db) {
    r.db = Tensor::empty({g.out_channels}, DType::kFloat32, d);
    std::shared_ptr<ConvPlan> plan = find_plan(g, d, ConvDirection::kBackwardBias, {&dy});
    const ConvDescs& c = plan->descs;
    COHORT_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, c.y.get(), dy.device_data(), &zero,
                                                    c.bias.get(), r.db.device_data()));
  }
  return r;
}

}  // namespace

ConvKey conv_key(const kernels::Conv2dGeometry& g, DType dtype, Device device, bool allow_tf32,
                 ConvDirection direction, int64_t alignment) {
  ConvKey k{};
  k.batch = g.batch;
  k.in_channels = g.in_channels;
  k.in_h = g.in_h;
  k.in_w = g.in_w;
  k.out_channels = g.out_channels;
  k.kernel_h = g.kernel_h;
  k.kernel_w = g.kernel_w;
  k.stride_h = g.stride_h;
  k.stride_w = g.stride_w;
  k.pad_h = g.pad_h;
  k.pad_w = g.pad_w;
  k.dilation_h = k.dilation_w = k.groups = 1;  // the only ones conv2d has
  k.dtype = static_cast<int64_t>(dtype);
  k.tf32 = allow_tf32;
  k.device = device.index();
  k.direction = static_cast<int64_t>(direction);
  k.alignment = std::min<int64_t>(alignment, 16);
  return k;
}

PlanCacheStats conv2d_plan_cache_stats() { return plan_cache().stats(); }

void register_conv2d_kernels() {
  kernels::conv2d_forward_device.set(DeviceType::kCUDA, &cuda_conv2d);
  kernels::conv2d_backward_device.set(DeviceType::kCUDA, &cuda_conv2d_backward);
}

}  // namespace cohort::cuda
