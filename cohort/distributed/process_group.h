// ProcessGroup: a group of ranks and the collectives over them, with
// PyTorch's names (torch.distributed / c10d). What DDP, the other parallel
// strategies and the CLI hold. There is no process-wide default group: the
// group returned by init_process_group is passed explicitly.
//
//   auto pg = cohort::distributed::init_process_group("native", "env://");
//   pg->all_reduce(grad, {.op = ReduceOp::kAvg});   // blocks, like PyTorch
//   Work w = pg->all_reduce(grad, {}, async_op);    // returns at once
//   ...                                              // overlap other work
//   w.wait();
//   auto evens = pg->new_group({0, 2});   // null on ranks 1 and 3
//   cohort::distributed::destroy_process_group(pg);
//
// As in PyTorch, an op blocks unless async_op is asked for: the plain call
// returns when the op completed and throws its error. With the async_op tag
// it returns a [[nodiscard]] Work at once and the op runs later, in issue
// order, on the group's execution thread (work.h). A blocking call on an
// idle group (nothing queued or running) runs the op on the calling thread
// with no allocation, lock or hand-off, which keeps small ops at the
// collectives layer's latency; behind queued ops it queues and waits
// (stats() counts both). Ops must be issued in the same order on every rank
// (with several issuing threads per rank, the order they enter). Argument
// errors (bad root, a non-contiguous tensor, list sizes that do not match
// the group) are thrown
// by the call itself; failures of the op (a lost peer, a mismatch between
// ranks, a timeout) are thrown by a blocking call or come through the Work,
// with the op, group, rank and
// sequence number named. After a failure the group is broken: later ops fail
// at once with the first error (native backend).
//
// Shapes: `count` is elements per rank. Raw-buffer overloads: all_gather's
// and gather's recv hold size()*count elements, scatter's, reduce_scatter's
// and all_to_all's send size()*count. Tensor overloads follow PyTorch:
// lists of size() tensors, or one tensor of size()*numel elements for the
// *_into_tensor / *_tensor / *_single forms. Tensors must be contiguous; an
// async Work keeps them alive; do not touch their data until it completed.
//
// Ownership: a group owns its backend (sockets, shared memory, MPI
// communicator), its execution thread and a share of the store. destroy()
// (also run by the destructor) aborts the ops still pending, if any (they
// fail at once here and on the peers instead of waiting out a timeout), and
// releases everything. Wait for your Works before destroying a group.
// Thread safety: every method may be called from any thread; ops issued
// concurrently from several threads run in the order the calls entered.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cohort/core/tensor.h"
#include "cohort/distributed/backend.h"
#include "cohort/distributed/options.h"
#include "cohort/distributed/work.h"
#include "cohort/rendezvous/store.h"

namespace cohort::distributed {

namespace detail {
class WorkQueue;
}

inline constexpr Duration kDefaultGroupTimeout = std::chrono::seconds(300);

// How a group's ops ran. A blocking op issued while nothing is queued or
// running on the group runs inline on the calling thread (no allocation, no
// hand-off: the small-op latency of the collectives layer itself); any other
// op (async, or blocking behind queued ops) is queued and runs in issue order
// on the group's thread or on a thread waiting for it. Errors, sequence
// numbers and the flight recorder are the same either way.
struct ProcessGroupStats {
  uint64_t ops_inline = 0;  // blocking ops run on the calling thread
  uint64_t ops_queued = 0;  // ops that went through the queue
};

struct NewGroupOptions {
  std::string name;  // "" = "<parent>/<n>" (n counts this parent's new_group calls)
  Duration timeout = kUseDefaultTimeout;  // default: the parent's
};

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  // A group over `store` (native: every rank calls with the same store
  // namespace, rank in [0, size)) or over MPI (store may be null, rank and
  // size -1 = MPI's). Blocks until all ranks arrived or options.timeout.
  static std::shared_ptr<ProcessGroup> create(BackendKind backend,
                                              std::shared_ptr<rendezvous::Store> store, int rank,
                                              int size, ProcessGroupOptions options = {});
  // A group over a backend made by the caller (a backend outside
  // create_backend's list, or a test's double); `store` as the backend's.
  static std::shared_ptr<ProcessGroup> create(std::unique_ptr<Backend> backend,
                                              std::shared_ptr<rendezvous::Store> store,
                                              ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  BackendKind backend() const { return backend_kind_; }
  const std::string& name() const { return options_.name; }
  Duration timeout() const { return options_.timeout; }
  // The world ranks of this group's members, by group rank (identity for the world).
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  // "shm", "tcp", "self" or "mpi": how this rank reaches `peer` (group rank).
  std::string transport_name(int peer) const;
  // The last collectives of this group, as JSON (collectives/flight_recorder.h);
  // "" for mpi. Any thread, any time.
  std::string flight_record() const;
  // How this group's ops were run so far (see ProcessGroupStats). Any thread.
  ProcessGroupStats stats() const;

  // A subgroup of this group's ranks `ranks` (this group's numbering; empty =
  // all). Every rank of this group must call it, in the same order relative to
  // its other new_group calls and ops, as in PyTorch; returns null on ranks
  // outside the subgroup. Blocks until the members have met.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks, NewGroupOptions options = {});

  // Aborts the pending ops (see the header) and releases the group; later
  // calls throw. Idempotent.
  void destroy();
  // Fails the running and every later op with `reason`; the native backend
  // tells the peers, whose ops then fail too. Safe from any thread.
  void abort(const std::string& reason);

  // ---- raw buffers (collectives/op_table.h: each op's buffers and sizes) ----
  // Each op in two forms: the plain call blocks until the op completed and
  // throws its error; with the async_op tag it returns the op's Work at once.
  // run(OpArgs) is the one entry point; the named forms build its OpArgs
  // (recv_any: a blocking run writes the sender's rank to a.source, if set;
  // an async one reports it through Work::source_rank).
  void run(const OpArgs& a) { run_op(a, {}, false); }
  [[nodiscard]] Work run(const OpArgs& a, AsyncOp) { return run_op(a, {}, true); }

  void all_reduce(void* data, size_t count, DataType dtype, const AllReduceOptions& opts = {}) {
    run(op_args(OpKind::kAllReduce, nullptr, data, count, dtype, opts));
  }
  [[nodiscard]] Work all_reduce(void* data, size_t count, DataType dtype,
                                const AllReduceOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kAllReduce, nullptr, data, count, dtype, opts), async_op);
  }
  void broadcast(void* data, size_t count, DataType dtype, const BroadcastOptions& opts = {}) {
    run(op_args(OpKind::kBroadcast, nullptr, data, count, dtype, opts));
  }
  [[nodiscard]] Work broadcast(void* data, size_t count, DataType dtype,
                               const BroadcastOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kBroadcast, nullptr, data, count, dtype, opts), async_op);
  }
  void reduce(void* data, size_t count, DataType dtype, const ReduceOptions& opts = {}) {
    run(op_args(OpKind::kReduce, nullptr, data, count, dtype, opts));
  }
  [[nodiscard]] Work reduce(void* data, size_t count, DataType dtype, const ReduceOptions& opts,
                            AsyncOp) {
    return run(op_args(OpKind::kReduce, nullptr, data, count, dtype, opts), async_op);
  }
  void all_gather(const void* send, void* recv, size_t count, DataType dtype,
                  const AllGatherOptions& opts = {}) {
    run(op_args(OpKind::kAllGather, send, recv, count, dtype, opts));
  }
  [[nodiscard]] Work all_gather(const void* send, void* recv, size_t count, DataType dtype,
                                const AllGatherOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kAllGather, send, recv, count, dtype, opts), async_op);
  }
  void gather(const void* send, void* recv, size_t count, DataType dtype,
              const GatherOptions& opts = {}) {
    run(op_args(OpKind::kGather, send, recv, count, dtype, opts));
  }
  [[nodiscard]] Work gather(const void* send, void* recv, size_t count, DataType dtype,
                            const GatherOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kGather, send, recv, count, dtype, opts), async_op);
  }
  void scatter(const void* send, void* recv, size_t count, DataType dtype,
               const ScatterOptions& opts = {}) {
    run(op_args(OpKind::kScatter, send, recv, count, dtype, opts));
  }
  [[nodiscard]] Work scatter(const void* send, void* recv, size_t count, DataType dtype,
                             const ScatterOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kScatter, send, recv, count, dtype, opts), async_op);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      const ReduceScatterOptions& opts = {}) {
    run(op_args(OpKind::kReduceScatter, send, recv, count, dtype, opts));
  }
  [[nodiscard]] Work reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                    const ReduceScatterOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kReduceScatter, send, recv, count, dtype, opts), async_op);
  }
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype,
                  const AllToAllOptions& opts = {}) {
    run(op_args(OpKind::kAllToAll, send, recv, count, dtype, opts));
  }
  [[nodiscard]] Work all_to_all(const void* send, void* recv, size_t count, DataType dtype,
                                const AllToAllOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kAllToAll, send, recv, count, dtype, opts), async_op);
  }
  // Uneven all_to_all (PyTorch's all_to_all_single with input/output split
  // sizes, MPI's Alltoallv): send_counts[j] elements go to rank j, taken
  // consecutively from send (block j starts at send_counts[0] + ... +
  // send_counts[j-1]); recv_counts[i] elements arrive from rank i, stored the
  // same way in recv. Both spans hold size() counts (else InvalidArgument);
  // each rank's send_counts[j] must equal rank j's recv_counts[rank()]: a
  // disagreement fails the op on both ranks as a mismatch naming both sides.
  // The async form copies the counts: the spans need not outlive the call.
  // nccl: on CUDA tensors only, through the tensor form below.
  void all_to_all_v(const void* send, std::span<const size_t> send_counts, void* recv,
                    std::span<const size_t> recv_counts, DataType dtype,
                    const AllToAllOptions& opts = {}) {
    run(all_to_all_v_args(send, send_counts, recv, recv_counts, dtype, opts));
  }
  [[nodiscard]] Work all_to_all_v(const void* send, std::span<const size_t> send_counts, void* recv,
                                  std::span<const size_t> recv_counts, DataType dtype,
                                  const AllToAllOptions& opts, AsyncOp) {
    return run(all_to_all_v_args(send, send_counts, recv, recv_counts, dtype, opts), async_op);
  }
  void barrier(const BarrierOptions& opts = {}) {
    run(op_args(OpKind::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, opts));
  }
  [[nodiscard]] Work barrier(const BarrierOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, opts), async_op);
  }
  void send(const void* data, size_t count, DataType dtype, int dst, const SendOptions& opts = {}) {
    run(op_args(OpKind::kSend, data, nullptr, count, dtype, opts, dst));
  }
  [[nodiscard]] Work send(const void* data, size_t count, DataType dtype, int dst,
                          const SendOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kSend, data, nullptr, count, dtype, opts, dst), async_op);
  }
  void recv(void* data, size_t count, DataType dtype, int src, const RecvOptions& opts = {}) {
    run(op_args(OpKind::kRecv, nullptr, data, count, dtype, opts, src));
  }
  [[nodiscard]] Work recv(void* data, size_t count, DataType dtype, int src,
                          const RecvOptions& opts, AsyncOp) {
    return run(op_args(OpKind::kRecv, nullptr, data, count, dtype, opts, src), async_op);
  }
  // A recv from any source (PyTorch's recv without src, c10d's
  // recvAnysource): the next message sent to this rank with opts.tag by
  // whichever peer's send arrives first; the senders call an ordinary send.
  // Returns the sender's group rank; the async form's Work reports it
  // (Work::source_rank) once completed. count and dtype must match the
  // sender's as for recv. native: order stays per pair, so a peer is chosen
  // only when its next message is a send with the tag; one whose next
  // message is another tag or a collective is passed over (that message stays
  // for its own op), and when no peer can send a match the op fails at once
  // (collectives/communicator.h has the rules, docs/transports.md the
  // details); the group's timeout applies, a lost peer is named. mpi:
  // MPI_ANY_SOURCE with MPI's tag matching. nccl: NotSupported.
  int recv_any(void* data, size_t count, DataType dtype, const RecvOptions& opts = {}) {
    int source = -1;
    OpArgs a = op_args(OpKind::kRecvAny, nullptr, data, count, dtype, opts, -1);
    a.source = &source;
    run(a);
    return source;
  }
  [[nodiscard]] Work recv_any(void* data, size_t count, DataType dtype, const RecvOptions& opts,
                              AsyncOp) {
    return run(op_args(OpKind::kRecvAny, nullptr, data, count, dtype, opts, -1), async_op);
  }

  // ---- tensors (contiguous; any shape; the op works on all elements) ----
  void all_reduce(const Tensor& tensor, const AllReduceOptions& opts = {}) {
    run_tensor(op_args(OpKind::kAllReduce, nullptr, nullptr, 0, {}, opts), tensor, false);
  }
  [[nodiscard]] Work all_reduce(const Tensor& tensor, const AllReduceOptions& opts, AsyncOp) {
    return run_tensor(op_args(OpKind::kAllReduce, nullptr, nullptr, 0, {}, opts), tensor, true);
  }
  void broadcast(const Tensor& tensor, const BroadcastOptions& opts = {}) {
    run_tensor(op_args(OpKind::kBroadcast, nullptr, nullptr, 0, {}, opts), tensor, false);
  }
  [[nodiscard]] Work broadcast(const Tensor& tensor, const BroadcastOptions& opts, AsyncOp) {
    return run_tensor(op_args(OpKind::kBroadcast, nullptr, nullptr, 0, {}, opts), tensor, true);
  }
  void reduce(const Tensor& tensor, const ReduceOptions& opts = {}) {
    run_tensor(op_args(OpKind::kReduce, nullptr, nullptr, 0, {}, opts), tensor, false);
  }
  [[nodiscard]] Work reduce(const Tensor& tensor, const ReduceOptions& opts, AsyncOp) {
    return run_tensor(op_args(OpKind::kReduce, nullptr, nullptr, 0, {}, opts), tensor, true);
  }
  // outputs: size() tensors shaped like input.
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input,
                  const AllGatherOptions& opts = {}) {
    all_gather_impl(outputs, input, opts, false);
  }
  [[nodiscard]] Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input,
                                const AllGatherOptions& opts, AsyncOp) {
    return all_gather_impl(outputs, input, opts, true);
  }
  // output: size()*input.numel() elements.
  void all_gather_into_tensor(const Tensor& output, const Tensor& input,
                              const AllGatherOptions& opts = {}) {
    all_gather_into_tensor_impl(output, input, opts, false);
  }
  [[nodiscard]] Work all_gather_into_tensor(const Tensor& output, const Tensor& input,
                                            const AllGatherOptions& opts, AsyncOp) {
    return all_gather_into_tensor_impl(output, input, opts, true);
  }
  // outputs: size() tensors on root, empty elsewhere.
  void gather(const std::vector<Tensor>& outputs, const Tensor& input,
              const GatherOptions& opts = {}) {
    gather_impl(outputs, input, opts, false);
  }
  [[nodiscard]] Work gather(const std::vector<Tensor>& outputs, const Tensor& input,
                            const GatherOptions& opts, AsyncOp) {
    return gather_impl(outputs, input, opts, true);
  }
  // inputs: size() tensors on root, empty elsewhere.
  void scatter(const Tensor& output, const std::vector<Tensor>& inputs,
               const ScatterOptions& opts = {}) {
    scatter_impl(output, inputs, opts, false);
  }
  [[nodiscard]] Work scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                             const ScatterOptions& opts, AsyncOp) {
    return scatter_impl(output, inputs, opts, true);
  }
  // inputs: size() tensors shaped like output.
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                      const ReduceScatterOptions& opts = {}) {
    reduce_scatter_impl(output, inputs, opts, false);
  }
  [[nodiscard]] Work reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                    const ReduceScatterOptions& opts, AsyncOp) {
    return reduce_scatter_impl(output, inputs, opts, true);
  }
  // input: size()*output.numel() elements.
  void reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                             const ReduceScatterOptions& opts = {}) {
    reduce_scatter_tensor_impl(output, input, opts, false);
  }
  [[nodiscard]] Work reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                                           const ReduceScatterOptions& opts, AsyncOp) {
    return reduce_scatter_tensor_impl(output, input, opts, true);
  }
  // outputs[j] <- rank j's inputs[rank()]; size() tensors each, all the same numel.
  void all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                  const AllToAllOptions& opts = {}) {
    all_to_all_impl(outputs, inputs, opts, false);
  }
  [[nodiscard]] Work all_to_all(const std::vector<Tensor>& outputs,
                                const std::vector<Tensor>& inputs, const AllToAllOptions& opts,
                                AsyncOp) {
    return all_to_all_impl(outputs, inputs, opts, true);
  }
  // Equal splits: output and input hold size()*k elements.
  void all_to_all_single(const Tensor& output, const Tensor& input,
                         const AllToAllOptions& opts = {}) {
    all_to_all_single_impl(output, input, opts, false);
  }
  [[nodiscard]] Work all_to_all_single(const Tensor& output, const Tensor& input,
                                       const AllToAllOptions& opts, AsyncOp) {
    return all_to_all_single_impl(output, input, opts, true);
  }
  // Uneven splits along dim 0 (PyTorch's all_to_all_single with
  // output_split_sizes / input_split_sizes): input_split_sizes[j] rows of
  // input go to rank j, in order; output_split_sizes[i] rows arrive from
  // rank i. Each span holds size() sizes summing to its tensor's size(0), or
  // is empty for equal splits (as in PyTorch); both tensors have one dtype
  // and the same row shape. Run as all_to_all_v (see the raw form above);
  // on CUDA tensors nccl runs it as grouped send/recv.
  void all_to_all_single(const Tensor& output, const Tensor& input,
                         std::span<const int64_t> output_split_sizes,
                         std::span<const int64_t> input_split_sizes,
                         const AllToAllOptions& opts = {}) {
    all_to_all_split_impl(output, input, output_split_sizes, input_split_sizes, opts, false);
  }
  [[nodiscard]] Work all_to_all_single(const Tensor& output, const Tensor& input,
                                       std::span<const int64_t> output_split_sizes,
                                       std::span<const int64_t> input_split_sizes,
                                       const AllToAllOptions& opts, AsyncOp) {
    return all_to_all_split_impl(output, input, output_split_sizes, input_split_sizes, opts, true);
  }
  void send(const Tensor& tensor, int dst, const SendOptions& opts = {}) {
    run_tensor(op_args(OpKind::kSend, nullptr, nullptr, 0, {}, opts, dst), tensor, false);
  }
  [[nodiscard]] Work send(const Tensor& tensor, int dst, const SendOptions& opts, AsyncOp) {
    return run_tensor(op_args(OpKind::kSend, nullptr, nullptr, 0, {}, opts, dst), tensor, true);
  }
  void recv(const Tensor& tensor, int src, const RecvOptions& opts = {}) {
    run_tensor(op_args(OpKind::kRecv, nullptr, nullptr, 0, {}, opts, src), tensor, false);
  }
  [[nodiscard]] Work recv(const Tensor& tensor, int src, const RecvOptions& opts, AsyncOp) {
    return run_tensor(op_args(OpKind::kRecv, nullptr, nullptr, 0, {}, opts, src), tensor, true);
  }
  // recv_any into a tensor (see the raw form): returns the sender's rank.
  int recv_any(const Tensor& tensor, const RecvOptions& opts = {}) {
    int source = -1;
    OpArgs a = op_args(OpKind::kRecvAny, nullptr, nullptr, 0, {}, opts, -1);
    a.source = &source;
    run_tensor(a, tensor, false);
    return source;
  }
  [[nodiscard]] Work recv_any(const Tensor& tensor, const RecvOptions& opts, AsyncOp) {
    return run_tensor(op_args(OpKind::kRecvAny, nullptr, nullptr, 0, {}, opts, -1), tensor, true);
  }

 private:
  struct Private {};

 public:
  ProcessGroup(Private, BackendKind kind, std::unique_ptr<Backend> backend,
               std::shared_ptr<rendezvous::Store> store, std::vector<int> world_ranks,
               ProcessGroupOptions options);

 private:
  // The tensors behind an op's buffers (null: none), kept alive by a queued op
  // until it ran; an op run inline needs no reference (the caller holds them).
  struct Keep {
    const Tensor* first = nullptr;
    const Tensor* second = nullptr;
    // An async op on device buffers through a backend that enqueues it: the
    // Work's device side (work.h), filled in by the op's body.
    std::shared_ptr<detail::DeviceEnd> device_end = nullptr;
    // recv_any: the slot its body writes the sender's rank to (the Work's
    // source_rank), owned by the op so that it outlives any caller.
    std::shared_ptr<int> source = nullptr;
    // all_to_all_v: the op's own copy of its count arrays (a queued op
    // outlives the caller's), which its OpArgs point into.
    std::shared_ptr<const std::vector<size_t>> counts = nullptr;
  };
  // Every op: checks a's arguments against the op table (check_op_args),
  // resolves its timeout and submits backend->run(a).
  // Tensors on a device go to run_device_op. recv_any: the backend writes
  // the sender's rank to keep.source (made here), which a blocking call then
  // copies to a.source (may be null).
  Work run_op(OpArgs a, Keep keep, bool async);
  // `a` on the buffers of keep's tensors, which live on `device` (not the
  // CPU): enqueued by a backend that runs on the device, else staged through
  // host memory around backend->run (process_group_device.cc).
  Work run_device_op(const OpArgs& a, Keep keep, bool async, Device device);
  // The one-tensor forms (all_reduce, broadcast, reduce, send, recv): `a`
  // with the tensor's memory as its buffer.
  Work run_tensor(OpArgs a, const Tensor& tensor, bool async);
  // The list and flat tensor forms.
  Work all_gather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                       const AllGatherOptions& o, bool async);
  Work all_gather_into_tensor_impl(const Tensor& output, const Tensor& input,
                                   const AllGatherOptions& o, bool async);
  Work gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, const GatherOptions& o,
                   bool async);
  Work scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                    const ScatterOptions& o, bool async);
  Work reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                           const ReduceScatterOptions& o, bool async);
  Work reduce_scatter_tensor_impl(const Tensor& output, const Tensor& input,
                                  const ReduceScatterOptions& o, bool async);
  Work all_to_all_impl(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                       const AllToAllOptions& o, bool async);
  Work all_to_all_single_impl(const Tensor& output, const Tensor& input, const AllToAllOptions& o,
                              bool async);
  Work all_to_all_split_impl(const Tensor& output, const Tensor& input,
                             std::span<const int64_t> output_split_sizes,
                             std::span<const int64_t> input_split_sizes, const AllToAllOptions& o,
                             bool async);
  // Issues op `op`, whose work is call() (any callable; `keep` as in Keep).
  // A blocking op on an idle group runs call() right here (begin_inline),
  // with no WorkState, no std::function and no queue hand-off, and returns
  // an undefined Work; every other op goes through enqueue. Defined in
  // process_group_submit.h.
  template <typename Call>
  Work submit(const char* op, bool collective, Duration timeout, bool async, Keep keep,
              Call&& call);
  // Claims the idle queue for a blocking op and numbers it (seq: its
  // sequence number); false when ops are queued or running. Throws when the
  // group was destroyed. Lock-free.
  bool begin_inline(const char* op, bool collective, uint64_t& seq);
  // In the handler of an inline op's failure: releases the claim and rethrows
  // the exception with the op's context, as a queued op's Work would.
  [[noreturn]] void fail_inline(const char* op, bool collective, uint64_t seq);
  // A WorkState for the next queued op.
  std::shared_ptr<detail::WorkState> new_state() const;
  // Queues body as op `op` and returns its Work (waited for unless async_op).
  Work enqueue(const char* op, bool collective, std::function<void()> body, Duration timeout,
               bool async_op, std::shared_ptr<detail::DeviceEnd> device_end = nullptr,
               std::shared_ptr<const int> source = nullptr);
  // all_to_all_v's OpArgs; InvalidArgument when a span does not hold size() counts.
  OpArgs all_to_all_v_args(const void* send, std::span<const size_t> send_counts, void* recv,
                           std::span<const size_t> recv_counts, DataType dtype,
                           const AllToAllOptions& o) const;
  void check_root(const char* op, int root) const;
  void check_peer(const char* op, int peer) const;
  Duration op_timeout(Duration t) const { return t == kUseDefaultTimeout ? options_.timeout : t; }

  BackendKind backend_kind_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<rendezvous::Store> store_;  // native: the group's namespace (null for mpi)
  std::vector<int> world_ranks_;
  ProcessGroupOptions options_;
  int rank_;
  int size_;
  bool ops_have_deadlines_;
  std::shared_ptr<const std::string> group_name_;  // shared with every Work
  std::shared_ptr<detail::WorkQueue> queue_;
  mutable std::mutex issue_mu_;  // guards the queued path and destroy; the inline path takes none
  int subgroups_ = 0;            // issue_mu_
  std::atomic<bool> destroyed_{false};  // written under issue_mu_
  std::atomic<uint64_t> ops_inline_{0};
  std::atomic<uint64_t> ops_queued_{0};
};

// ---- PyTorch's free functions ----

// Joins the job as PyTorch's init_process_group does and returns the world
// group. init_method: "env://" (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK; OpenMPI's OMPI_COMM_WORLD_* or Slurm's SLURM_* when those are
// what is set), "tcp://host:port" or "file:///path" (see
// rendezvous/env_bootstrap.h); world_size/rank -1 = from the method or the
// environment. The mpi backend ignores init_method: rank and size are MPI's.
// nccl: makes cuda:(LOCAL_RANK mod device count) the current device first
// (backend_choice.h), as the tutorials' torch.cuda.set_device(local_rank).
// Throws InvalidArgument for a bad method or backend name, NotSupported for a
// backend this build lacks ("nccl backend not built: ...") or nccl without a
// CUDA device (before waiting for anyone), TimeoutError when the other ranks
// do not arrive within timeout.
std::shared_ptr<ProcessGroup> init_process_group(BackendKind backend,
                                                 const std::string& init_method = "env://",
                                                 int world_size = -1, int rank = -1,
                                                 Duration timeout = kDefaultGroupTimeout);
// backend: "native", "mpi" or "nccl".
std::shared_ptr<ProcessGroup> init_process_group(std::string_view backend,
                                                 const std::string& init_method = "env://",
                                                 int world_size = -1, int rank = -1,
                                                 Duration timeout = kDefaultGroupTimeout);
// The options init_process_group gives a group from the environment: the
// transport, algorithm and spin knobs (collectives/knobs.h), the address to
// advertise, the shared-memory settings and the flight recorder's directory
// (rendezvous/env_bootstrap.h), with `timeout`. For a group created with
// ProcessGroup::create over a store from elsewhere (the PyTorch backend's,
// which gets PyTorch's store). InvalidArgument names a malformed variable.
ProcessGroupOptions options_from_env(Duration timeout = kDefaultGroupTimeout);
// pg->destroy(), then releases the caller's reference.
void destroy_process_group(std::shared_ptr<ProcessGroup>& pg);
int get_rank(const ProcessGroup& pg);
int get_world_size(const ProcessGroup& pg);
std::shared_ptr<ProcessGroup> new_group(ProcessGroup& parent, std::vector<int> ranks);

// core's dtype as the collectives layer's (all seven map one to one).
DataType to_data_type(DType dtype);

}  // namespace cohort::distributed
