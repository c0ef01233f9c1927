// Backend: what carries one process group's operations. The ProcessGroup
// owns the order (its WorkQueue) and the argument checks; a backend performs
// one op at a time, synchronously, on the thread the queue gives it, through
// one entry point, run(OpArgs), with a case per op of the op table
// (collectives/op_table.h). Implementations: NativeBackend (cohort's
// Communicator), MpiBackend (mpi/mpi_backend.h, built when COHORT_HAVE_MPI).
// NcclBackend (nccl/nccl_backend.h, built when COHORT_HAVE_NCCL) runs ops on
// device memory only, through run_on_device.
//
// Device buffers (CUDA tensors): a backend that takes them (runs_on_device)
// enqueues the op on its own stream after `ready` and returns at once with
// the op's DeviceCompletion; the ProcessGroup stages device buffers through
// host memory for the others (process_group_device.cc), so every backend
// carries CUDA tensors.
// Shapes follow the op table: counts are elements per rank; all_gather's recv
// holds size()*count elements, etc. (OpInfo::send, OpInfo::recv).
// Errors are exceptions of cohort's types; the ProcessGroup adds the op's
// context. Thread safety: one op at a time; abort() from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/collectives/communicator.h"
#include "cohort/core/device_runtime.h"
#include "cohort/distributed/options.h"
#include "cohort/rendezvous/store.h"

namespace cohort::distributed {

// Settings of a group, given to ProcessGroup::create and init_process_group.
struct ProcessGroupOptions {
  std::string name = "default";  // names the group in errors
  // Default timeout of every op and of the group's creation.
  Duration timeout = std::chrono::seconds(300);
  // native: kAuto = shared memory to same-host peers, TCP to others;
  // init_process_group takes COHORT_TRANSPORT from the env:// bootstrap when
  // this is kAuto; see docs/transports.md.
  collectives::TransportKind transport = collectives::TransportKind::kAuto;
  // native: forced algorithms and the waiters' spin (collectives/knobs.h;
  // init_process_group takes COHORT_<OP>_ALGO and COHORT_SPIN_US from the
  // env:// bootstrap).
  collectives::CollectiveTuning tuning;
  // nccl: the CUDA device of this rank's communicator (-1: the current device
  // when the group is created, as PyTorch's torch.cuda.set_device sets it).
  int device_index = -1;
  // native: which address to advertise, the connect time-out and waiting
  // reports (transport/network.h); init_process_group fills it from env://.
  transport::NetworkOptions network;
  // native: the flight recorder (collectives/flight_recorder.h): entries kept
  // (0: off) and where each rank dumps it when an op fails ("": nowhere;
  // init_process_group takes COHORT_FLIGHT_RECORDER_DIR from the env://
  // bootstrap).
  size_t flight_recorder_entries = 2048;
  std::string flight_recorder_dir;
};

// One op on device buffers: the issuing thread's current stream on the
// buffers' device, an event recorded on it when the op was issued (the op
// must see everything enqueued before it), and the base pointers of the
// allocator blocks the op uses (the backend marks them used by its stream,
// as PyTorch's recordStream, so they are not reused before the op ends).
struct DeviceOpContext {
  Device device;
  Stream stream;
  Event ready;
  std::vector<void*> blocks;
};

// The device side of an op that the host only enqueued: `end` completes when
// the op did on the device; `check` (may be empty) throws the op's failure
// found since (the backend's watchdog: a time-out, a lost peer), with the
// group, rank, op and sequence number named.
struct DeviceCompletion {
  Event end;
  std::function<void()> check;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // True when every op ends by its timeout (native). MPI calls cannot be
  // interrupted, so Work::wait must not run them on the waiting thread.
  virtual bool ops_have_deadlines() const = 0;
  // "shm", "tcp", "self", "mpi" (the way to peer; for messages and the bench).
  virtual std::string transport_name(int peer) const = 0;
  // The flight recorder's JSON (collectives/flight_recorder.h); "" when the
  // backend keeps none (mpi).
  virtual std::string flight_record() const { return ""; }

  // Runs one op (arguments checked by the caller; a.timeout resolved, never
  // kUseDefaultTimeout). One case per OpKind.
  virtual void run(const OpArgs& a) = 0;

  // Whether run_on_device takes buffers in `device`'s memory.
  virtual bool runs_on_device(Device /*device*/) const { return false; }
  // Enqueues one op on device buffers (see DeviceOpContext) and returns
  // without waiting for it. Only called when runs_on_device(ctx.device).
  virtual DeviceCompletion run_on_device(const OpArgs& a, const DeviceOpContext& ctx);

  // The backend of a subgroup of this group's ranks `ranks` (sorted, in this
  // group's numbering), or null on ranks outside it. Every rank of this group
  // calls it, in the same order relative to its other ops. `store` is a
  // namespace for the subgroup alone.
  virtual std::unique_ptr<Backend> new_subgroup(const std::vector<int>& ranks,
                                                std::shared_ptr<rendezvous::Store> store,
                                                const ProcessGroupOptions& options) = 0;

  // Fails the running and every later op with `reason` and, where the
  // backend can, makes the peers' ops fail too. Safe from any thread.
  virtual void abort(const std::string& reason) = 0;
};

// Creates the backend of a whole group. native: meets the other ranks through
// `store` (rank and size required). mpi: a duplicate of MPI_COMM_WORLD; rank
// and size come from MPI (when given, they must match it); store unused.
// nccl, or mpi in a build without MPI: NotSupported.
std::unique_ptr<Backend> create_backend(BackendKind kind, std::shared_ptr<rendezvous::Store> store,
                                        int rank, int size, const ProcessGroupOptions& options);

}  // namespace cohort::distributed
