// ProcessGroup: a group of ranks and the collectives over them, with
// PyTorch's names (torch.distributed / c10d). What DDP, the other parallel
// strategies and the CLI hold. There is no process-wide default group: the
// group returned by init_process_group is passed explicitly.
//
//   auto pg = cohort::distributed::init_process_group("native", "env://");
//   Work w = pg->all_reduce(grad, {.op = ReduceOp::kAvg});
//   w.wait();
//   auto evens = pg->new_group({0, 2});   // null on ranks 1 and 3
//   cohort::distributed::destroy_process_group(pg);
//
// Every op returns a Work at once and runs later, in issue order, on the
// group's execution thread (work.h); with `.async_op = false` the call
// returns when the op completed (and throws its error), as PyTorch's default
// blocking calls do. Ops must be issued in the same order on every rank
// (with several issuing threads per rank, the order they enter). Argument errors (bad root, a
// non-contiguous tensor, list sizes that do not match the group) are thrown
// by the call itself; failures of the op (a lost peer, a mismatch between
// ranks, a timeout) come through the Work, with the op, group, rank and
// sequence number named. After a failure the group is broken: later ops fail
// at once with the first error (native backend).
//
// Shapes: `count` is elements per rank. Raw-buffer overloads: all_gather's
// and gather's recv hold size()*count elements, scatter's, reduce_scatter's
// and all_to_all's send size()*count. Tensor overloads follow PyTorch:
// lists of size() tensors, or one tensor of size()*numel elements for the
// *_into_tensor / *_tensor / *_single forms. Tensors must be contiguous; the
// Work keeps them alive; do not touch their data until the Work completed.
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

  // ---- raw buffers (see communicator.h for each op's contract) ----
  Work all_reduce(void* data, size_t count, DataType dtype, const AllReduceOptions& opts = {});
  Work broadcast(void* data, size_t count, DataType dtype, const BroadcastOptions& opts = {});
  Work reduce(void* data, size_t count, DataType dtype, const ReduceOptions& opts = {});
  Work all_gather(const void* send, void* recv, size_t count, DataType dtype,
                  const AllGatherOptions& opts = {});
  Work gather(const void* send, void* recv, size_t count, DataType dtype,
              const GatherOptions& opts = {});
  Work scatter(const void* send, void* recv, size_t count, DataType dtype,
               const ScatterOptions& opts = {});
  Work reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                      const ReduceScatterOptions& opts = {});
  Work all_to_all(const void* send, void* recv, size_t count, DataType dtype,
                  const AllToAllOptions& opts = {});
  Work barrier(const BarrierOptions& opts = {});
  Work send(const void* data, size_t count, DataType dtype, int dst, const SendOptions& opts = {});
  Work recv(void* data, size_t count, DataType dtype, int src, const RecvOptions& opts = {});

  // ---- tensors (contiguous; any shape; the op works on all elements) ----
  Work all_reduce(const Tensor& tensor, const AllReduceOptions& opts = {});
  Work broadcast(const Tensor& tensor, const BroadcastOptions& opts = {});
  Work reduce(const Tensor& tensor, const ReduceOptions& opts = {});
  // outputs: size() tensors shaped like input.
  Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input,
                  const AllGatherOptions& opts = {});
  // output: size()*input.numel() elements.
  Work all_gather_into_tensor(const Tensor& output, const Tensor& input,
                              const AllGatherOptions& opts = {});
  // outputs: size() tensors on root, empty elsewhere.
  Work gather(const std::vector<Tensor>& outputs, const Tensor& input,
              const GatherOptions& opts = {});
  // inputs: size() tensors on root, empty elsewhere.
  Work scatter(const Tensor& output, const std::vector<Tensor>& inputs,
               const ScatterOptions& opts = {});
  // inputs: size() tensors shaped like output.
  Work reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                      const ReduceScatterOptions& opts = {});
  // input: size()*output.numel() elements.
  Work reduce_scatter_tensor(const Tensor& output, const Tensor& input,
                             const ReduceScatterOptions& opts = {});
  // outputs[j] <- rank j's inputs[rank()]; size() tensors each, all the same numel.
  Work all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                  const AllToAllOptions& opts = {});
  // Equal splits: output and input hold size()*k elements.
  Work all_to_all_single(const Tensor& output, const Tensor& input,
                         const AllToAllOptions& opts = {});
  Work send(const Tensor& tensor, int dst, const SendOptions& opts = {});
  Work recv(const Tensor& tensor, int src, const RecvOptions& opts = {});

 private:
  struct Private {};

 public:
  ProcessGroup(Private, BackendKind kind, std::unique_ptr<Backend> backend,
               std::shared_ptr<rendezvous::Store> store, std::vector<int> world_ranks,
               ProcessGroupOptions options);

 private:
  // The raw ops, keeping `keep` (the tensors behind the buffers) alive until the op ran.
  Work all_reduce_impl(void* data, size_t count, DataType dtype, const AllReduceOptions& o,
                       std::vector<Tensor> keep);
  Work broadcast_impl(void* data, size_t count, DataType dtype, const BroadcastOptions& o,
                      std::vector<Tensor> keep);
  Work reduce_impl(void* data, size_t count, DataType dtype, const ReduceOptions& o,
                   std::vector<Tensor> keep);
  Work all_gather_impl(const void* send, void* recv, size_t count, DataType dtype,
                       const AllGatherOptions& o, std::vector<Tensor> keep);
  Work gather_impl(const void* send, void* recv, size_t count, DataType dtype,
                   const GatherOptions& o, std::vector<Tensor> keep);
  Work scatter_impl(const void* send, void* recv, size_t count, DataType dtype,
                    const ScatterOptions& o, std::vector<Tensor> keep);
  Work reduce_scatter_impl(const void* send, void* recv, size_t count, DataType dtype,
                           const ReduceScatterOptions& o, std::vector<Tensor> keep);
  Work all_to_all_impl(const void* send, void* recv, size_t count, DataType dtype,
                       const AllToAllOptions& o, std::vector<Tensor> keep);
  Work barrier_impl(const BarrierOptions& o, std::vector<Tensor> keep);
  Work send_impl(const void* data, size_t count, DataType dtype, int dst, const SendOptions& o,
                 std::vector<Tensor> keep);
  Work recv_impl(void* data, size_t count, DataType dtype, int src, const RecvOptions& o,
                 std::vector<Tensor> keep);
  // Queues body as op `op` and returns its Work.
  // A WorkState for the next op (issue_mu_ held).
  std::shared_ptr<detail::WorkState> fresh_state();
  Work enqueue(const char* op, bool collective, std::function<void()> body, Duration timeout,
               bool async_op);
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
  mutable std::mutex issue_mu_;  // orders sequence numbers with queue order; guards below
  uint64_t next_seq_ = 0;
  int subgroups_ = 0;
  bool destroyed_ = false;
  std::shared_ptr<detail::WorkState> spare_;  // reused once no Work holds it
};

// ---- PyTorch's free functions ----

// Joins the job as PyTorch's init_process_group does and returns the world
// group. init_method: "env://" (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK; OpenMPI's OMPI_COMM_WORLD_* or Slurm's SLURM_* when those are
// what is set), "tcp://host:port" or "file:///path" (see
// rendezvous/env_bootstrap.h); world_size/rank -1 = from the method or the
// environment. The mpi backend ignores init_method: rank and size are MPI's.
// Throws InvalidArgument for a bad method or backend name, NotSupported for a
// backend this build lacks ("nccl backend not built: ..."), TimeoutError when
// the other ranks do not arrive within timeout.
std::shared_ptr<ProcessGroup> init_process_group(BackendKind backend,
                                                 const std::string& init_method = "env://",
                                                 int world_size = -1, int rank = -1,
                                                 Duration timeout = kDefaultGroupTimeout);
// backend: "native", "mpi" or "nccl".
std::shared_ptr<ProcessGroup> init_process_group(std::string_view backend,
                                                 const std::string& init_method = "env://",
                                                 int world_size = -1, int rank = -1,
                                                 Duration timeout = kDefaultGroupTimeout);
// pg->destroy(), then releases the caller's reference.
void destroy_process_group(std::shared_ptr<ProcessGroup>& pg);
int get_rank(const ProcessGroup& pg);
int get_world_size(const ProcessGroup& pg);
std::shared_ptr<ProcessGroup> new_group(ProcessGroup& parent, std::vector<int> ranks);

// core's dtype as the collectives layer's (all seven map one to one).
DataType to_data_type(DType dtype);

}  // namespace cohort::distributed
