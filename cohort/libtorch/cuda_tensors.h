// How the LibTorch adapter carries CUDA torch::Tensors through cohort's
// process groups. Every op of libtorch::ProcessGroup (and so
// DistributedDataParallel and ZeroRedundancyOptimizer) takes CUDA tensors as
// it takes CPU ones; one of two paths carries them, chosen per process by
// cuda_tensor_path():
//
//  * zero copy (CudaTensorPath::kZeroCopy): the tensor's own device memory
//    becomes a cohort tensor on the same cuda:<index> (core's
//    Tensor::from_blob on a device; not copied, never freed by cohort: the
//    wrapper only holds a reference to the torch tensor, so LibTorch's
//    caching allocator keeps the block until the op's Work is done), and the
//    op is issued with LibTorch's current CUDA stream as cohort's current
//    stream (a StreamGuard for the call and for Work::wait). cohort's group
//    then does what it does for its own CUDA tensors
//    (distributed/process_group_device.cc): a device backend (nccl) enqueues
//    the op after an event on that stream, and a blocking op or Work::wait()
//    makes LibTorch's current stream wait for the op's end without blocking
//    the host, as PyTorch's ProcessGroupNCCL does; native and mpi stage the
//    bytes through cohort's pinned buffers on a side stream ordered after
//    that event. It needs (1) a LibTorch that names its current stream's
//    cudaStream_t without ATen's CUDA headers (which would need LibTorch's
//    c10_cuda library, absent from Debian's CPU-only LibTorch 1.13):
//    c10::Stream::native_handle(), which PyTorch added in February 2026
//    (so 2.11; 2.1 to 2.10 lack it). It is detected
//    at compile time (a requires-expression on c10::Stream), not by
//    torch/version.h, so a LibTorch with it takes this path whatever its
//    number; (2) LibTorch built with CUDA (its CUDA device guard is
//    registered), and (3) cohort built with its CUDA layer, which found a
//    device (find_device_runtime(kCUDA)). Both
//    runtimes use the driver's primary context of the device, so torch's
//    cudaStream_t and cohort's events work on one another.
//  * host staging (CudaTensorPath::kHostStaging), everywhere else: LibTorch
//    copies each CUDA tensor to the host (t.to(torch::kCPU), which waits for
//    the work queued on LibTorch's current stream), cohort runs the op on the
//    host copies, and the results are copied back with t.copy_(host) -- for
//    an async op in Work::wait(), so do not read the tensors before it. Any
//    LibTorch and any backend; the copies cost two trips over PCIe per op.
//
// gather and scatter (list forms cohort has no device form of) take the
// staging path on both. The choice can be read (cuda_tensor_path(), with
// the reason) but not changed: it follows from the build.
// Thread safety: everything here may be called from any thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <concepts>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cohort/core/device_runtime.h"
#include "cohort/core/tensor.h"

namespace cohort::libtorch {

class Work;

enum class CudaTensorPath { kZeroCopy, kHostStaging };
std::string_view cuda_tensor_path_name(CudaTensorPath path);  // "zero copy", "host staging"

struct CudaTensorPathChoice {
  CudaTensorPath path = CudaTensorPath::kHostStaging;
  std::string reason;  // one sentence: why this path here
};

// What the adapter knows about its surroundings, for choose_cuda_tensor_path.
struct CudaTensorEnvironment {
  int torch_major = 0, torch_minor = 0;  // LibTorch's version (torch/version.h), for messages
  bool torch_names_streams = false;      // c10::Stream::native_handle() exists
  bool torch_has_cuda = false;           // LibTorch registered a CUDA device guard
  bool cohort_has_cuda = false;          // cohort's CUDA layer is linked ...
  int cohort_devices = 0;                // ... and sees this many devices
  std::string cohort_unavailable;        // its unavailable_reason() when it sees none
};

// The rule (pure: tests feed it environments).
CudaTensorPathChoice choose_cuda_tensor_path(const CudaTensorEnvironment& env);
// This process's environment, and its path.
CudaTensorEnvironment cuda_tensor_environment();
CudaTensorPathChoice cuda_tensor_path();

namespace detail {

// Whether a stream type S has native_handle() (a template, so that the
// answer for c10::Stream is a value, not a compile error, on LibTorches
// without it).
template <typename S>
constexpr bool has_native_handle = requires(const S& s) {
  { s.native_handle() } -> std::convertible_to<void*>;
};
// Whether this LibTorch can name its current CUDA stream.
bool torch_names_cuda_streams();

// cohort's Stream for LibTorch's stream `handle` (a cudaStream_t) on
// `device`: the null handle is the device's default stream, which both
// libraries share (id 0); other streams get ids that cohort's own pool
// streams never have (the top bit set), because cohort's caching allocator
// keeps freed blocks per stream id.
Stream stream_for_torch_handle(Device device, void* handle);
// LibTorch's current CUDA stream on device `index` as cohort's Stream;
// nullopt when this LibTorch cannot name it (see the header).
std::optional<Stream> torch_current_stream(int index);

// For the scope of a zero-copy call: cohort's current stream on cuda:<index>
// is LibTorch's current one (unchanged where LibTorch cannot name it).
class TorchStreamScope {
 public:
  explicit TorchStreamScope(int index);

 private:
  std::optional<StreamGuard> guard_;
};

// cohort's dtype of a tensor the adapter accepted (to_data_type's seven).
DType to_cohort_dtype(c10::ScalarType type);
// A 1-d cohort tensor over t's memory (t contiguous, on CUDA) on the same
// device; the wrapper holds a reference to t until it is destroyed.
Tensor wrap_device_memory(const at::Tensor& t);

// Host staging of one op: in(t) is the host copy the op reads, out(t) one it
// also writes, copied back into t by done(). CUDA tensors only, unless
// `stage_cpu_tensors` (tests: the same copies on a CPU-only LibTorch).
class HostStaging {
 public:
  explicit HostStaging(bool stage_cpu_tensors = false) : stage_cpu_(stage_cpu_tensors) {}
  at::Tensor in(const at::Tensor& t) const;
  std::vector<at::Tensor> in(const std::vector<at::Tensor>& list) const;
  at::Tensor out(const at::Tensor& t);
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& list);
  // `work`: the op on the host copies (undefined for a blocking op, which
  // has completed): copies the results back now, or in the returned Work's
  // wait().
  Work done(Work work);
  size_t copies_back() const { return back_.size(); }

 private:
  at::Tensor host(const at::Tensor& t) const;
  bool stage_cpu_;
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (tensor, host copy)
};

// A Work that waits for `inner`, then runs `after`, keeping `keep` alive
// until then (process_group.cc, where Work's state lives).
Work chain(Work inner, std::vector<at::Tensor> keep, std::function<void()> after);

}  // namespace detail
}  // namespace cohort::libtorch
