// The CUDA implementation of core's DeviceRuntime (cohort/core/device_runtime.h):
// one caching allocator per device (core's CachingAllocator over cudaMalloc),
// a pinned host pool (the same cache over cudaHostAlloc, its blocks reused only
// after the copies that read them have completed), side streams per device
// and purpose (runtime_impl.h), events, and the library handles kernels need
// (cuBLASLt, cuDNN) per device and thread, with a workspace per stream. The
// allocator and the pinned pool are attached to the process Runtime
// (base/runtime.h), so that `Runtime::stats()` counts them and
// `release_caches()` empties them.
//
// Kernels enqueue on current_cuda_stream(device), the calling thread's current
// stream of core's StreamGuard.
// Thread safety: every function may be called from any thread.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "cohort/core/device_runtime.h"
#include "cohort/core/tensor.h"

namespace cohort::cuda {

// The process's CUDA runtime, registered with core by install().
DeviceRuntime& runtime();
// Registers the runtime and every kernel table entry with core (idempotent;
// done at load by install.cc).
void install();

cudaStream_t raw_stream(const Stream& stream);
// The calling thread's current stream on `device`, and makes it the current
// CUDA device of the thread (kernels launch there).
cudaStream_t current_cuda_stream(Device device);

// Per device and thread, bound to the current stream when returned.
cublasLtHandle_t cublaslt_handle(Device device);
cudnnHandle_t cudnn_handle(Device device);
// Scratch for cuBLASLt / cuDNN for work on `stream`: at least `bytes`,
// valid until the next call on this thread for that stream (one buffer per
// thread and stream, grown as needed; work on one stream is ordered, so
// reusing it for that stream's next call is safe, while two streams never
// share one).
void* workspace(const Stream& stream, size_t bytes);
// The same for the current stream of `device`.
void* workspace(Device device, size_t bytes);

// Number of streaming multiprocessors of `device` (grid sizing), cached.
int multiprocessors(Device device);

}  // namespace cohort::cuda
