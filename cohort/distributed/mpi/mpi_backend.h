// MpiBackend: a process group's ops as MPI calls (built when COHORT_HAVE_MPI;
// links MPI::MPI_C). The world group is a duplicate of MPI_COMM_WORLD, so its
// rank and size are MPI's (run the job with mpirun); subgroups are made with
// MPI_Comm_split. Reductions MPI lacks are done with user ops over the
// collectives layer's kernels: bfloat16/float16 (reduced in float32), and avg
// (a sum divided once at the end). int8 is MPI_INT8_T; bool is MPI_C_BOOL,
// reduced by MPI_LOR / MPI_LAND / MPI_LXOR (types.h); band/bor/bxor are
// MPI_BAND / MPI_BOR / MPI_BXOR. all_to_all_v is MPI_Alltoallv after one
// MPI_Allgather of every rank's counts, checked alike on every rank, so
// counts that disagree (which MPI itself does not catch) are a mismatch on
// every rank, and a rank's counts or offsets past INT_MAX are refused.
//
// MPI is process-wide: the first MpiBackend initializes it
// (MPI_Init_thread, MPI_THREAD_SERIALIZED, because ops run on the group's
// thread or on a waiting thread, never two at once) unless the program did,
// and then registers MPI_Finalize to run at exit.
//
// Limits (MPI's, not hidden): an MPI call cannot be timed out or
// interrupted, so op timeouts are not enforced (Work::wait's own timeout
// still is, except for a blocking call, which runs the MPI call on the
// calling thread), abort() only fails later ops, a dead peer is handled by mpirun
// (it ends the job), and mismatched collectives are not detected (but
// all_to_all_v's counts, above). Counts are
// limited to INT_MAX elements per call (InvalidArgument beyond).
// Thread safety: one op at a time; abort() from any thread.
#pragma once

// Only MPI's C API (the C++ bindings would need libmpi_cxx).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "cohort/distributed/backend.h"

namespace cohort::distributed {

class MpiBackend final : public Backend {
 public:
  // The world group. rank/size -1: take MPI's; otherwise they must match it.
  static std::unique_ptr<MpiBackend> create_world(int rank, int size,
                                                  const ProcessGroupOptions& options);
  // Takes ownership of comm (MPI_Comm_free in the destructor).
  MpiBackend(MPI_Comm comm, std::string name);
  ~MpiBackend() override;

  BackendKind kind() const override { return BackendKind::kMpi; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool ops_have_deadlines() const override { return false; }
  std::string transport_name(int peer) const override { return peer == rank_ ? "self" : "mpi"; }

  void run(const OpArgs& a) override;

  std::unique_ptr<Backend> new_subgroup(const std::vector<int>& ranks,
                                        std::shared_ptr<rendezvous::Store> store,
                                        const ProcessGroupOptions& options) override;
  void abort(const std::string& reason) override;

 private:
  // Throws the abort reason when aborted.
  void check_usable(const char* op) const;
  // Throws cohort::Error naming the MPI call and MPI's error string.
  void check(int rc, const char* call) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;  // guards abort_reason_
  std::string abort_reason_;
};

}  // namespace cohort::distributed
