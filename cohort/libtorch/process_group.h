// cohort's collectives on LibTorch tensors: every op of
// cohort::distributed::ProcessGroup, blocking and async, taking torch::Tensor
// (at::Tensor) where cohort's own overloads take cohort::Tensor, with the same
// names and options (PyTorch's c10d names). Part of the optional LibTorch
// adapter (cohort/libtorch/, target cohort_libtorch, built when CMake finds
// LibTorch; docs/libtorch.md).
//
//   auto pg = cohort::libtorch::init_process_group("native", "env://");  // cohort run
//   torch::Tensor t = torch::ones({4});
//   pg.all_reduce(t, {.op = cohort::distributed::ReduceOp::kAvg});   // blocks
//   auto w = pg.all_reduce(t, {}, cohort::libtorch::async_op);        // returns at once
//   w.wait();
//
// Zero copy: a contiguous CPU tensor's own memory (data_ptr()) is what the op
// reads and writes; the list forms (all_gather, gather, scatter,
// reduce_scatter, all_to_all over std::vector<at::Tensor>) pack into or
// unpack from one flat buffer, as cohort's own do. dtypes: Float, Double,
// Half, BFloat16, Int, Long and Byte (Half and BFloat16 reduce in float32),
// and on CPU tensors Char and Bool (cohort's int8 and bool; the CUDA path
// wraps cohort tensors, which have neither dtype, and refuses them).
// CUDA tensors (all of an op's tensors on one device) take the path
// cuda_tensors.h describes: their own memory, ordered on LibTorch's current
// CUDA stream (a blocking op returns once that stream waits for the op, as
// PyTorch's NCCL group does; Work::wait() makes the waiting thread's current
// stream wait), or host copies that are copied back before the blocking call
// returns or in Work::wait().
//
// Argument errors are thrown by the call itself as cohort::InvalidArgument
// naming the op, the argument and what would be right: an undefined,
// sparse or non-contiguous tensor, one on a device other than the CPU and
// CUDA, tensors of one op on two devices, an unsupported dtype,
// a list with other than size() tensors, a tensor whose dtype or element
// count differs from what the op needs. Failures of the op itself (a lost
// peer, a timeout, a mismatch between ranks) are those of the underlying
// group: thrown by a blocking call or by Work::wait(), with cohort's types
// (PeerLost, TimeoutError, ...) and the op, group, rank and sequence number
// in the message.
//
// Ownership and lifetime: ProcessGroup is a handle sharing one
// cohort::distributed::ProcessGroup (group() gives it, for cohort's own
// tensors or DDP). An async Work keeps its tensors alive; the last copy of a
// Work that is dropped before its op completed waits for it (bounded by the
// op's timeout) so that the op never writes into freed memory. Do not touch
// the tensors' data until the op completed. The list forms fill their outputs
// in wait() (the blocking call: before it returns).
// Thread safety: as cohort's ProcessGroup (any thread; ops run in the order
// the calls entered). A Work is used from one thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/distributed/process_group.h"
#include "cohort/libtorch/cuda_tensors.h"

namespace cohort::libtorch {

using distributed::AllGatherOptions;
using distributed::AllReduceOptions;
using distributed::AllToAllOptions;
using distributed::async_op;
using distributed::AsyncOp;
using distributed::BarrierOptions;
using distributed::BroadcastOptions;
using distributed::DataType;
using distributed::Duration;
using distributed::GatherOptions;
using distributed::kUseDefaultTimeout;
using distributed::NewGroupOptions;
using distributed::OpKind;
using distributed::RecvOptions;
using distributed::ReduceOp;
using distributed::ReduceOptions;
using distributed::ReduceScatterOptions;
using distributed::ScatterOptions;
using distributed::SendOptions;

// LibTorch's scalar type as cohort's collective type. Throws InvalidArgument
// ("<op>: argument '<arg>' has dtype Char; ... take Float, Double, ...") for
// the types cohort's collectives lack (Bool, Char, Short, complex, ...).
DataType to_data_type(c10::ScalarType type, std::string_view op = "to_data_type",
                      std::string_view arg = "dtype");

// The handle of one async op on torch tensors (see the header for lifetime).
class Work {
 public:
  Work() = default;  // undefined: every method but defined() throws
  bool defined() const { return state_ != nullptr; }
  // Blocks until the op completed, rethrows its error, then fills the outputs
  // of a list form. timeout: as distributed::Work::wait.
  void wait(Duration timeout = kUseDefaultTimeout) const;
  bool is_completed() const;
  bool is_success() const;
  std::exception_ptr exception() const;
  // The underlying op (sequence number, start and end times for traces).
  const distributed::Work& work() const;

  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  const State& state() const;
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  ProcessGroup() = default;
  // Shares `group` (may be null: an undefined handle, e.g. new_group's result
  // on ranks outside the subgroup).
  ProcessGroup(std::shared_ptr<distributed::ProcessGroup> group)  // NOLINT: implicit by design
      : pg_(std::move(group)) {}

  bool defined() const { return pg_ != nullptr; }
  explicit operator bool() const { return defined(); }
  int rank() const { return get().rank(); }
  int size() const { return get().size(); }
  const std::shared_ptr<distributed::ProcessGroup>& group() const { return pg_; }
  distributed::ProcessGroup* operator->() const { return &get(); }

  // A subgroup (collective over this group; undefined on ranks outside it).
  ProcessGroup new_group(std::vector<int> ranks, NewGroupOptions options = {}) const {
    ProcessGroup sub(get().new_group(std::move(ranks), std::move(options)));
    sub.cuda_path_ = cuda_path_;
    return sub;
  }
  // A handle on the same group whose ops carry CUDA tensors by `path`
  // (cuda_tensors.h) instead of this process's choice: kHostStaging always
  // (e.g. to compare the paths, or where a LibTorch and cohort built against
  // two CUDA versions disagree), kZeroCopy only where it is this process's
  // choice anyway (NotSupported with the reason otherwise). nccl takes
  // device memory only, so staging needs native or mpi.
  ProcessGroup with_cuda_tensor_path(CudaTensorPath path) const;
  // The path this handle's ops take for CUDA tensors.
  CudaTensorPath cuda_tensor_path() const;
  // Tests only: zero copy even where this process stages, so that the path
  // runs on a CPU-only LibTorch against core's fake CUDA device (whose device
  // memory is host memory; cohort's current stream stands for LibTorch's).
  friend ProcessGroup zero_copy_for_testing(const ProcessGroup& pg) {
    ProcessGroup out = pg;
    out.cuda_path_ = CudaTensorPath::kZeroCopy;
    return out;
  }
  void destroy() const { get().destroy(); }

  void all_reduce(const at::Tensor& tensor, const AllReduceOptions& opts = {}) const {
    run_tensor(distributed::op_args(OpKind::kAllReduce, nullptr, nullptr, 0, {}, opts), tensor,
               false);
  }
  [[nodiscard]] Work all_reduce(const at::Tensor& tensor, const AllReduceOptions& opts,
                                AsyncOp) const {
    return run_tensor(distributed::op_args(OpKind::kAllReduce, nullptr, nullptr, 0, {}, opts),
                      tensor, true);
  }
  void broadcast(const at::Tensor& tensor, const BroadcastOptions& opts = {}) const {
    run_tensor(distributed::op_args(OpKind::kBroadcast, nullptr, nullptr, 0, {}, opts), tensor,
               false);
  }
  [[nodiscard]] Work broadcast(const at::Tensor& tensor, const BroadcastOptions& opts,
                               AsyncOp) const {
    return run_tensor(distributed::op_args(OpKind::kBroadcast, nullptr, nullptr, 0, {}, opts),
                      tensor, true);
  }
  void reduce(const at::Tensor& tensor, const ReduceOptions& opts = {}) const {
    run_tensor(distributed::op_args(OpKind::kReduce, nullptr, nullptr, 0, {}, opts), tensor, false);
  }
  [[nodiscard]] Work reduce(const at::Tensor& tensor, const ReduceOptions& opts, AsyncOp) const {
    return run_tensor(distributed::op_args(OpKind::kReduce, nullptr, nullptr, 0, {}, opts), tensor,
                      true);
  }
  // outputs: size() tensors with input's dtype and numel.
  void all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                  const AllGatherOptions& opts = {}) const {
    all_gather_impl(outputs, input, opts, false);
  }
  [[nodiscard]] Work all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                const AllGatherOptions& opts, AsyncOp) const {
    return all_gather_impl(outputs, input, opts, true);
  }
  // output: size() * input.numel() elements.
  void all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input,
                              const AllGatherOptions& opts = {}) const {
    all_gather_into_tensor_impl(output, input, opts, false);
  }
  [[nodiscard]] Work all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input,
                                            const AllGatherOptions& opts, AsyncOp) const {
    return all_gather_into_tensor_impl(output, input, opts, true);
  }
  // outputs: size() tensors on the root, empty elsewhere.
  void gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
              const GatherOptions& opts = {}) const {
    gather_impl(outputs, input, opts, false);
  }
  [[nodiscard]] Work gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                            const GatherOptions& opts, AsyncOp) const {
    return gather_impl(outputs, input, opts, true);
  }
  // inputs: size() tensors on the root, empty elsewhere.
  void scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
               const ScatterOptions& opts = {}) const {
    scatter_impl(output, inputs, opts, false);
  }
  [[nodiscard]] Work scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                             const ScatterOptions& opts, AsyncOp) const {
    return scatter_impl(output, inputs, opts, true);
  }
  // inputs: size() tensors with output's dtype and numel.
  void reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                      const ReduceScatterOptions& opts = {}) const {
    reduce_scatter_impl(output, inputs, opts, false);
  }
  [[nodiscard]] Work reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                    const ReduceScatterOptions& opts, AsyncOp) const {
    return reduce_scatter_impl(output, inputs, opts, true);
  }
  // input: size() * output.numel() elements.
  void reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input,
                             const ReduceScatterOptions& opts = {}) const {
    reduce_scatter_tensor_impl(output, input, opts, false);
  }
  [[nodiscard]] Work reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input,
                                           const ReduceScatterOptions& opts, AsyncOp) const {
    return reduce_scatter_tensor_impl(output, input, opts, true);
  }
  // outputs[j] <- rank j's inputs[rank()]; size() tensors each, one dtype and numel.
  void all_to_all(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                  const AllToAllOptions& opts = {}) const {
    all_to_all_impl(outputs, inputs, opts, false);
  }
  [[nodiscard]] Work all_to_all(const std::vector<at::Tensor>& outputs,
                                const std::vector<at::Tensor>& inputs, const AllToAllOptions& opts,
                                AsyncOp) const {
    return all_to_all_impl(outputs, inputs, opts, true);
  }
  // Equal splits: output and input hold size() * k elements.
  void all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                         const AllToAllOptions& opts = {}) const {
    all_to_all_single_impl(output, input, opts, false);
  }
  [[nodiscard]] Work all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                                       const AllToAllOptions& opts, AsyncOp) const {
    return all_to_all_single_impl(output, input, opts, true);
  }
  void barrier(const BarrierOptions& opts = {}) const { get().barrier(opts); }
  [[nodiscard]] Work barrier(const BarrierOptions& opts, AsyncOp) const;
  void send(const at::Tensor& tensor, int dst, const SendOptions& opts = {}) const {
    run_tensor(distributed::op_args(OpKind::kSend, nullptr, nullptr, 0, {}, opts, dst), tensor,
               false);
  }
  [[nodiscard]] Work send(const at::Tensor& tensor, int dst, const SendOptions& opts,
                          AsyncOp) const {
    return run_tensor(distributed::op_args(OpKind::kSend, nullptr, nullptr, 0, {}, opts, dst),
                      tensor, true);
  }
  void recv(const at::Tensor& tensor, int src, const RecvOptions& opts = {}) const {
    run_tensor(distributed::op_args(OpKind::kRecv, nullptr, nullptr, 0, {}, opts, src), tensor,
               false);
  }
  [[nodiscard]] Work recv(const at::Tensor& tensor, int src, const RecvOptions& opts,
                          AsyncOp) const {
    return run_tensor(distributed::op_args(OpKind::kRecv, nullptr, nullptr, 0, {}, opts, src),
                      tensor, true);
  }

 private:
  distributed::ProcessGroup& get() const;
  // The one-tensor forms (all_reduce, broadcast, reduce, send, recv): `a`
  // (collectives/op_table.h) on the tensor's memory.
  Work run_tensor(distributed::OpArgs a, const at::Tensor& tensor, bool async) const;
  Work all_gather_impl(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                       const AllGatherOptions& o, bool async) const;
  Work all_gather_into_tensor_impl(const at::Tensor& output, const at::Tensor& input,
                                   const AllGatherOptions& o, bool async) const;
  Work gather_impl(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                   const GatherOptions& o, bool async) const;
  Work scatter_impl(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                    const ScatterOptions& o, bool async) const;
  Work reduce_scatter_impl(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                           const ReduceScatterOptions& o, bool async) const;
  Work reduce_scatter_tensor_impl(const at::Tensor& output, const at::Tensor& input,
                                  const ReduceScatterOptions& o, bool async) const;
  Work all_to_all_impl(const std::vector<at::Tensor>& outputs,
                       const std::vector<at::Tensor>& inputs, const AllToAllOptions& o,
                       bool async) const;
  Work all_to_all_single_impl(const at::Tensor& output, const at::Tensor& input,
                              const AllToAllOptions& o, bool async) const;

  std::shared_ptr<distributed::ProcessGroup> pg_;
  std::optional<CudaTensorPath> cuda_path_;  // unset: this process's choice
};

// Joins the job as cohort::distributed::init_process_group does (the same
// env:// bootstrap that `cohort run`, mpirun and Slurm set up; tcp://,
// file://) and returns the world group as a LibTorch-facing handle.
ProcessGroup init_process_group(std::string_view backend = "native",
                                const std::string& init_method = "env://", int world_size = -1,
                                int rank = -1,
                                Duration timeout = distributed::kDefaultGroupTimeout);

}  // namespace cohort::libtorch
