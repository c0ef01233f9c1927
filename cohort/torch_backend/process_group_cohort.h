// ProcessGroupCohort: cohort's collectives as a torch.distributed backend.
// `import cohort_torch` registers it under the name "cohort"; then
// `dist.init_process_group("cohort")` (env://, file://, tcp://; under
// torchrun, `cohort run`, mpirun or srun) creates one per group, over the
// store torch.distributed hands it (docs/pytorch_backend.md).
//
// Every op of c10d's ProcessGroup (PyTorch 1.13's interface) on CPU tensors,
// zero copy on contiguous ones, through cohort's libtorch adapter
// (cohort/libtorch/process_group.h) and cohort's ProcessGroup: broadcast,
// allreduce (+ coalesced), reduce, allgather (+ _base, coalesced), gather,
// scatter, reduce_scatter (+ _base), alltoall (+ _base with split sizes),
// send, recv, recvAnysource, barrier, monitoredBarrier and sequence numbers.
// Reductions take what cohort's collectives take (types.h); ops that only
// move data take any dtype (complex, int16, ...: moved as bytes). CUDA
// tensors go through host staging or zero copy as the adapter decides
// (cuda_tensors.h).
//
// Which cohort backend carries a group: `backend` of create() ("auto": mpi
// under mpirun when this build has MPI, else native: shared memory on one
// host, TCP between hosts; "native", "mpi", "nccl"), from COHORT_TORCH_BACKEND
// at the edge (module.cc). The group's options come from the environment as
// for cohort's own init_process_group (options_from_env).
//
// Errors: a bad argument is thrown by the call (c10::Error-free: cohort's
// InvalidArgument, RuntimeError in Python) naming the op and what would be
// right; a failed op (a lost peer, a timeout, a mismatch between ranks)
// surfaces from Work::wait and the Work's future with cohort's message.
// Thread safety: as cohort's ProcessGroup: any thread, ops run in the order
// the calls entered.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "cohort/libtorch/process_group.h"
#include "cohort/rendezvous/store.h"

namespace cohort::torch_backend {

class ProcessGroupCohort final : public c10d::ProcessGroup {
 public:
  using OpType = c10d::OpType;
  // Joins the group of `size` ranks over `store` (blocks until all arrived,
  // or `timeout`); `name` names it in errors. backend: see the header.
  static c10::intrusive_ptr<ProcessGroupCohort> create(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout,
                                                       const std::string& backend = "auto",
                                                       const std::string& name = "default");

  ProcessGroupCohort(std::shared_ptr<rendezvous::Store> store,
                     std::shared_ptr<distributed::ProcessGroup> group);
  ~ProcessGroupCohort() override;

  const std::string getBackendName() const override { return "cohort"; }
  // The cohort group underneath (its name, transport, flight record).
  const std::shared_ptr<distributed::ProcessGroup>& group() const { return group_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Every rank checks in at the store; rank 0 waits up to the timeout for
  // each and names the ranks that did not arrive (the first, or all of them
  // with wait_all_ranks), as gloo's does.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // The count of collectives this group issued (the same on every rank that
  // issued the same ops).
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  int rank() const { return getRank(); }
  // Counts a collective (the sequence number) and returns its Work.
  c10::intrusive_ptr<c10d::Work> collective(c10::intrusive_ptr<c10d::Work> w) {
    ++sequence_;
    return w;
  }

  // all_to_all with per-rank sizes: `in_counts[j]` bytes of `send` go to
  // rank j, `out_counts[i]` bytes from rank i land in `recv`.
  c10::intrusive_ptr<c10d::Work> all_to_all_bytes(
      OpType type, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
      const at::Tensor& recv, const at::Tensor& send, std::vector<size_t> out_counts,
      std::vector<size_t> in_counts, const distributed::AllToAllOptions& o,
      std::function<void()> after);

  std::shared_ptr<rendezvous::Store> store_;  // the group's PyTorch store, as cohort's
  std::shared_ptr<distributed::ProcessGroup> group_;
  libtorch::ProcessGroup pg_;
  std::atomic<uint64_t> sequence_{0};
  uint64_t monitored_barriers_ = 0;
};

}  // namespace cohort::torch_backend
