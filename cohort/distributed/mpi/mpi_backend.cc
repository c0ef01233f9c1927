#include "cohort/distributed/mpi/mpi_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/collectives/reduce_kernels.h"

namespace cohort::distributed {
namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Initializes MPI once per process (MPI itself is process-wide state).
void ensure_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw NotSupported(fmt::format(
          "mpi backend: MPI was initialized with thread level {}; the backend runs MPI calls on "
          "the group's thread and needs MPI_THREAD_SERIALIZED or higher",
          provided));
    }
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw Error("mpi backend: MPI was already finalized in this process");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    throw Error("mpi backend: MPI_Init_thread failed");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw NotSupported(fmt::format(
        "mpi backend: this MPI provides thread level {}, MPI_THREAD_SERIALIZED is needed",
        provided));
  }
  std::atexit(finalize_at_exit);
}

MPI_Datatype mpi_type(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kBool:
      return MPI_C_BOOL;  // reduced by MPI's logical ops (mpi_op)
    case DataType::kBFloat16:
    case DataType::kFloat16:
      return MPI_UINT16_T;  // moved as bits; reduced by user ops
  }
  throw InvalidArgument("mpi backend: unknown dtype");
}

// User reduction for the 16-bit float types: MPI's inout = in (op) inout.
template <DataType D, ReduceOp O>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  collectives::reduce_into(inout, in, static_cast<size_t>(*len), D, O);
}

template <DataType D>
MPI_Op user_op(ReduceOp op) {
  // Created once per process and never freed: MPI_Op handles are process
  // wide like MPI itself, and MPI_Finalize releases them.
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&user_reduce<D, ReduceOp::kSum>, 1, &ops[0]);
    MPI_Op_create(&user_reduce<D, ReduceOp::kProduct>, 1, &ops[1]);
    MPI_Op_create(&user_reduce<D, ReduceOp::kMin>, 1, &ops[2]);
    MPI_Op_create(&user_reduce<D, ReduceOp::kMax>, 1, &ops[3]);
  });
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return ops[0];
    case ReduceOp::kProduct:
      return ops[1];
    case ReduceOp::kMin:
      return ops[2];
    case ReduceOp::kMax:
      return ops[3];
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      break;  // refused on float types by check_op_args
  }
  return MPI_OP_NULL;
}

// bool's reductions (collectives/types.h) as MPI's logical ops on MPI_C_BOOL.
MPI_Op bool_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return MPI_LAND;
    case ReduceOp::kBxor:
      return MPI_LXOR;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // refused on bool by check_op_args
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return MPI_LOR;
  }
  throw InvalidArgument("mpi backend: unknown reduce op");
}

MPI_Op mpi_op(ReduceOp op, DataType dtype) {
  if (dtype == DataType::kBFloat16) return user_op<DataType::kBFloat16>(op);
  if (dtype == DataType::kFloat16) return user_op<DataType::kFloat16>(op);
  if (dtype == DataType::kBool) return bool_op(op);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kBand:
      return MPI_BAND;
    case ReduceOp::kBor:
      return MPI_BOR;
    case ReduceOp::kBxor:
      return MPI_BXOR;
  }
  throw InvalidArgument("mpi backend: unknown reduce op");
}

// Checks all_to_all_v's counts of every rank against every other's (`all`:
// each rank's send_counts then recv_counts, gathered from every rank), so
// that every rank reaches the same verdict and none is left waiting in
// MPI_Alltoallv: a pair that disagrees is a mismatch naming both sides; a
// rank whose counts or offsets pass INT_MAX (MPI's int) is refused.
void check_v_counts(const std::vector<uint64_t>& all, int size, const std::string& group) {
  const auto n = static_cast<size_t>(size);
  auto sent = [&](size_t from, size_t to) { return all[from * 2 * n + to]; };
  auto expected = [&](size_t at, size_t from) { return all[at * 2 * n + n + from]; };
  for (size_t s = 0; s < n; ++s) {
    for (size_t d = 0; d < n; ++d) {
      if (sent(s, d) != expected(d, s)) {
        throw InvalidArgument(fmt::format(
            "collective mismatch in group '{}' between rank {} and rank {}: all_to_all_v: rank {} "
            "sends {} elements to rank {} (its send_counts[{}]), but rank {} expects {} from rank "
            "{} (its recv_counts[{}])",
            group, s, d, s, sent(s, d), d, d, d, expected(d, s), s, s));
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    uint64_t send_end = 0, recv_end = 0;
    for (size_t j = 0; j < n; ++j) {
      send_end += sent(r, j);
      recv_end += expected(r, j);
    }
    if (std::max(send_end, recv_end) > static_cast<uint64_t>(INT_MAX)) {
      throw InvalidArgument(fmt::format(
          "all_to_all_v (mpi backend): rank {} of group '{}' sends {} and receives {} elements; "
          "MPI_Alltoallv takes int counts and offsets, at most INT_MAX ({}) elements: split the "
          "exchange or use the native backend",
          r, group, send_end, recv_end, INT_MAX));
    }
  }
}

// MPI's int counts and offsets of `counts` (checked by check_v_counts).
void to_int_blocks(const size_t* counts, int size, std::vector<int>& out,
                   std::vector<int>& displs) {
  out.resize(static_cast<size_t>(size));
  displs.resize(static_cast<size_t>(size));
  size_t at = 0;
  for (size_t j = 0; j < out.size(); ++j) {
    out[j] = static_cast<int>(counts[j]);
    displs[j] = static_cast<int>(at);
    at += counts[j];
  }
}

int as_int(size_t count, const char* op) {
  if (count > static_cast<size_t>(INT_MAX)) {
    throw InvalidArgument(fmt::format(
        "{} (mpi backend): count {} exceeds MPI's limit of INT_MAX ({}) elements per call", op,
        count, INT_MAX));
  }
  return static_cast<int>(count);
}

// MPI wants non-const pointers in its C prototypes of older versions.
void* mut(const void* p) { return const_cast<void*>(p); }

}  // namespace

std::unique_ptr<MpiBackend> MpiBackend::create_world(int rank, int size,
                                                     const ProcessGroupOptions& options) {
  ensure_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) {
    throw Error("mpi backend: MPI_Comm_dup(MPI_COMM_WORLD) failed");
  }
  auto backend = std::make_unique<MpiBackend>(comm, options.name);
  if (rank >= 0 && rank != backend->rank()) {
    throw InvalidArgument(fmt::format(
        "init_process_group(mpi): rank {} was given but MPI says this process is rank {}", rank,
        backend->rank()));
  }
  if (size >= 0 && size != backend->size()) {
    throw InvalidArgument(fmt::format(
        "init_process_group(mpi): world_size {} was given but MPI's world has {} processes", size,
        backend->size()));
  }
  return backend;
}

MpiBackend::MpiBackend(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  // Errors come back as codes (exceptions here) instead of ending the job.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiBackend::check_usable(const char* op) const {
  if (!aborted_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(mu_);
  throw Error(fmt::format("{}: group '{}' was aborted: {}", op, name_, abort_reason_));
}

void MpiBackend::check(int rc, const char* call) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(fmt::format("{} failed on rank {} of group '{}': {}", call, rank_, name_,
                          std::string(text, static_cast<size_t>(len))));
}

void MpiBackend::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
  }
  aborted_.store(true, std::memory_order_release);
}

void MpiBackend::run(const OpArgs& a) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  check_usable(info.name);
  const int n = as_int(a.count, info.name);
  const MPI_Datatype type = mpi_type(a.dtype);
  const MPI_Op reduce = info.reduces ? mpi_op(a.op, a.dtype) : MPI_OP_NULL;
  const bool root = rank_ == a.root;
  void* send = mut(a.send);
  if (info.has_tag) {
    COHORT_CHECK(a.tag <= 32767, "{} (mpi backend): tag {} exceeds MPI's guaranteed limit 32767",
                 info.name, a.tag);
  }
  switch (a.kind) {
    case OpKind::kAllReduce:
      check(MPI_Allreduce(MPI_IN_PLACE, a.recv, n, type, reduce, comm_), "MPI_Allreduce");
      break;
    case OpKind::kBroadcast:
      check(MPI_Bcast(a.recv, n, type, a.root, comm_), "MPI_Bcast");
      break;
    case OpKind::kReduce:
      check(MPI_Reduce(root ? MPI_IN_PLACE : a.recv, root ? a.recv : nullptr, n, type, reduce,
                       a.root, comm_),
            "MPI_Reduce");
      break;
    case OpKind::kAllGather:
      check(MPI_Allgather(send, n, type, a.recv, n, type, comm_), "MPI_Allgather");
      break;
    case OpKind::kGather:
      check(MPI_Gather(send, n, type, root ? a.recv : nullptr, n, type, a.root, comm_),
            "MPI_Gather");
      break;
    case OpKind::kScatter:
      check(MPI_Scatter(root ? send : nullptr, n, type, a.recv, n, type, a.root, comm_),
            "MPI_Scatter");
      break;
    case OpKind::kReduceScatter:
      check(MPI_Reduce_scatter_block(send, a.recv, n, type, reduce, comm_),
            "MPI_Reduce_scatter_block");
      break;
    case OpKind::kAllToAll:
      check(MPI_Alltoall(send, n, type, a.recv, n, type, comm_), "MPI_Alltoall");
      break;
    case OpKind::kAllToAllV: {
      // MPI does not check that the pairs agree (a disagreement is undefined
      // behaviour, a hang or a truncation error): one allgather of the
      // counts first, checked alike on every rank.
      const auto w = static_cast<size_t>(size_);
      std::vector<uint64_t> mine(2 * w), all(2 * w * w);
      for (size_t j = 0; j < w; ++j) {
        mine[j] = a.send_counts[j];
        mine[w + j] = a.recv_counts[j];
      }
      check(MPI_Allgather(mine.data(), static_cast<int>(2 * w), MPI_UINT64_T, all.data(),
                          static_cast<int>(2 * w), MPI_UINT64_T, comm_),
            "MPI_Allgather");
      check_v_counts(all, size_, name_);
      std::vector<int> sc, sd, rc, rd;
      to_int_blocks(a.send_counts, size_, sc, sd);
      to_int_blocks(a.recv_counts, size_, rc, rd);
      check(MPI_Alltoallv(send, sc.data(), sd.data(), type, a.recv, rc.data(), rd.data(), type,
                          comm_),
            "MPI_Alltoallv");
      break;
    }
    case OpKind::kBarrier:
      check(MPI_Barrier(comm_), "MPI_Barrier");
      break;
    case OpKind::kSend:
      check(MPI_Send(send, n, type, a.root, static_cast<int>(a.tag), comm_), "MPI_Send");
      break;
    case OpKind::kRecv: {
      MPI_Status status;
      check(MPI_Recv(a.recv, n, type, a.root, static_cast<int>(a.tag), comm_, &status), "MPI_Recv");
      int got = 0;
      MPI_Get_count(&status, type, &got);
      if (static_cast<size_t>(got) != a.count) {
        throw InvalidArgument(fmt::format(
            "recv (mpi backend): rank {} expected {} elements from rank {}, the message had {}",
            rank_, a.count, a.root, got));
      }
      break;
    }
    case OpKind::kRecvAny: {
      // MPI matches by tag: the first message with it from any rank (MPI's
      // order among senders; per sender, in send order).
      MPI_Status status;
      check(MPI_Recv(a.recv, n, type, MPI_ANY_SOURCE, static_cast<int>(a.tag), comm_, &status),
            "MPI_Recv");
      int got = 0;
      MPI_Get_count(&status, type, &got);
      if (static_cast<size_t>(got) != a.count) {
        throw InvalidArgument(fmt::format(
            "recv_any (mpi backend): rank {} expected {} elements, the message from rank {} had {}",
            rank_, a.count, status.MPI_SOURCE, got));
      }
      if (a.source != nullptr) *a.source = status.MPI_SOURCE;
      break;
    }
  }
  // MPI has no avg: the ops above summed, and the ranks that hold a result
  // (all of them, but only the root for reduce) divide it.
  if (info.reduces && a.op == ReduceOp::kAvg && (a.kind != OpKind::kReduce || root)) {
    collectives::finish_avg(a.recv, a.count, a.dtype, size_);
  }
}

std::unique_ptr<Backend> MpiBackend::new_subgroup(const std::vector<int>& ranks,
                                                  std::shared_ptr<rendezvous::Store>,
                                                  const ProcessGroupOptions& options) {
  check_usable("new_group");
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  bool member = it != ranks.end();
  MPI_Comm sub = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED,
                       member ? static_cast<int>(it - ranks.begin()) : 0, &sub),
        "MPI_Comm_split");
  if (!member) return nullptr;
  return std::make_unique<MpiBackend>(sub, options.name);
}

}  // namespace cohort::distributed
