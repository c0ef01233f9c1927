// The real NcclComm: a non-blocking NCCL communicator (ncclConfig_t::blocking
// = 0), so that no call can hang the issuing thread: a call that answers
// ncclInProgress is polled with ncclCommGetAsyncError until it settles,
// bounded by the group's timeout, and abort() from another thread ends the
// poll at once. Built when COHORT_HAVE_NCCL; the library is opened on first
// use (nccl_library.h).
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/core/device_runtime.h"
#include "cohort/distributed/nccl/nccl_comm.h"
#include "cohort/distributed/nccl/nccl_library.h"

namespace cohort::distributed {
namespace {

using collectives::DataType;
using collectives::ReduceOp;
using detail::NcclLibrary;
using Clock = std::chrono::steady_clock;

ncclDataType_t to_nccl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
    case DataType::kBool:  // 0/1 bytes; its reductions map onto uint8's (to_nccl(op, dtype))
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat16:
      return ncclFloat16;
  }
  throw InvalidArgument(
      fmt::format("nccl backend: element type {} has no NCCL equivalent", static_cast<int>(dtype)));
}

ncclRedOp_t to_nccl(ReduceOp op, DataType dtype) {
  // bool as uint8 0/1 values: or (sum, max) is max, and (product, min) is
  // min, so the results stay 0/1. avg on bool is refused by check_op_args.
  if (dtype == DataType::kBool) {
    if (op == ReduceOp::kSum || op == ReduceOp::kMax) return ncclMax;
    if (op == ReduceOp::kProduct || op == ReduceOp::kMin) return ncclMin;
  }
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;  // integer types: truncating division, as the native backend
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      // NcclBackend refuses these before issuing (nccl_backend.cc).
      throw NotSupported(fmt::format(
          "nccl backend: reduction '{}' is not supported: NCCL has no bitwise reductions",
          collectives::reduce_op_name(op)));
  }
  throw InvalidArgument(
      fmt::format("nccl backend: reduction {} has no NCCL equivalent", static_cast<int>(op)));
}

// Polls `comm` until its pending call settles; returns the final result
// (ncclInProgress when `deadline` passed or `stop` was set first).
ncclResult_t poll_until_settled(const NcclLibrary& lib, ncclComm_t comm, Clock::time_point deadline,
                                const std::atomic<bool>& stop) {
  ncclResult_t state = ncclInProgress;
  for (int spins = 0;; ++spins) {
    if (lib.comm_get_async_error(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress || stop.load() || Clock::now() >= deadline) return state;
    // Issue calls settle in microseconds; creation takes up to seconds.
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

class RealNcclComm final : public NcclComm {
 public:
  RealNcclComm(const NcclLibrary& lib, ncclComm_t comm, int rank, int size, std::string group,
               collectives::Duration timeout)
      : lib_(lib),
        comm_(comm),
        rank_(rank),
        size_(size),
        group_(std::move(group)),
        timeout_(timeout) {}

  ~RealNcclComm() override {
    if (aborted_.load()) return;
    // A clean end: finalize (flushes the communicator's work), bounded; a
    // communicator that does not finish in time is aborted instead.
    std::lock_guard<std::mutex> lk(handle_mu_);
    if (comm_ == nullptr) return;
    ncclResult_t r = lib_.comm_finalize(comm_);
    if (r == ncclInProgress) {
      r = poll_until_settled(lib_, comm_, Clock::now() + std::chrono::seconds(10), aborted_);
    }
    if (r == ncclSuccess) {
      lib_.comm_destroy(comm_);
    } else {
      lib_.comm_abort(comm_);
    }
    comm_ = nullptr;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                  void* stream) override {
    issue("ncclAllReduce", [&](ncclComm_t c) {
      return lib_.all_reduce(send, recv, count, to_nccl(dtype), to_nccl(op, dtype), c,
                             cuda(stream));
    });
  }
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                 void* stream) override {
    issue("ncclBroadcast", [&](ncclComm_t c) {
      return lib_.broadcast(send, recv, count, to_nccl(dtype), root, c, cuda(stream));
    });
  }
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
              void* stream) override {
    issue("ncclReduce", [&](ncclComm_t c) {
      return lib_.reduce(send, recv, count, to_nccl(dtype), to_nccl(op, dtype), root, c,
                         cuda(stream));
    });
  }
  void all_gather(const void* send, void* recv, size_t count, DataType dtype,
                  void* stream) override {
    issue("ncclAllGather", [&](ncclComm_t c) {
      return lib_.all_gather(send, recv, count, to_nccl(dtype), c, cuda(stream));
    });
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      void* stream) override {
    issue("ncclReduceScatter", [&](ncclComm_t c) {
      return lib_.reduce_scatter(send, recv, count, to_nccl(dtype), to_nccl(op, dtype), c,
                                 cuda(stream));
    });
  }
  void send(const void* data, size_t count, DataType dtype, int peer, void* stream) override {
    issue("ncclSend", [&](ncclComm_t c) {
      return lib_.send(data, count, to_nccl(dtype), peer, c, cuda(stream));
    });
  }
  void recv(void* data, size_t count, DataType dtype, int peer, void* stream) override {
    issue("ncclRecv", [&](ncclComm_t c) {
      return lib_.recv(data, count, to_nccl(dtype), peer, c, cuda(stream));
    });
  }
  void group_start() override {
    issue("ncclGroupStart", [&](ncclComm_t) { return lib_.group_start(); });
  }
  void group_end() override {
    issue("ncclGroupEnd", [&](ncclComm_t) { return lib_.group_end(); });
  }

  NcclAsyncError async_error() override {
    std::lock_guard<std::mutex> lk(handle_mu_);
    if (comm_ == nullptr) return {false, false, "the communicator was aborted"};
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = lib_.comm_get_async_error(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess || state == ncclInProgress) return {};
    return {false, state == ncclRemoteError || state == ncclSystemError, describe(state)};
  }

  void abort() override {
    // The flag first: an issuing thread polling a call sees it and lets go
    // of issue_mu_ within one poll.
    aborted_.store(true);
    std::lock_guard<std::mutex> issue(issue_mu_);
    std::lock_guard<std::mutex> lk(handle_mu_);
    if (comm_ == nullptr) return;
    lib_.comm_abort(comm_);
    comm_ = nullptr;
  }

 private:
  static cudaStream_t cuda(void* stream) { return static_cast<cudaStream_t>(stream); }

  // NCCL's text for `result`, with the communicator's last error when it has one.
  std::string describe(ncclResult_t result) const {
    std::string text = lib_.get_error_string(result);
    const char* last = comm_ ? lib_.get_last_error(comm_) : nullptr;
    if (last != nullptr && *last != '\0') text += fmt::format(" ({})", last);
    return text;
  }

  template <typename Call>
  void issue(const char* what, Call&& call) {
    std::lock_guard<std::mutex> lk(issue_mu_);
    if (aborted_.load() || comm_ == nullptr) {
      throw Error(fmt::format("nccl: rank {} of group '{}': {} on an aborted communicator", rank_,
                              group_, what));
    }
    ncclResult_t r = call(comm_);
    if (r == ncclInProgress) {
      r = poll_until_settled(lib_, comm_, Clock::now() + timeout_, aborted_);
      if (r == ncclInProgress) {
        throw TimeoutError(fmt::format(
            "nccl: rank {} of group '{}': {} did not settle within {} ms{}", rank_, group_, what,
            timeout_.count(), aborted_.load() ? " (the communicator was aborted)" : ""));
      }
    }
    if (r != ncclSuccess) {
      throw Error(fmt::format("nccl: rank {} of group '{}': {} failed: {}", rank_, group_, what,
                              describe(r)));
    }
  }

  const NcclLibrary& lib_;
  // issue_mu_: one issuing call at a time (and abort waits for it);
  // handle_mu_: comm_'s lifetime against async_error() from the watchdog.
  std::mutex issue_mu_, handle_mu_;
  ncclComm_t comm_;
  std::atomic<bool> aborted_{false};
  int rank_, size_;
  std::string group_;
  collectives::Duration timeout_;
};

// Sets the calling thread's current device for a scope (NCCL creates the
// communicator on the current device), as core's DeviceScope: the previous
// one is restored only where that creates no context.
class CurrentDevice {
 public:
  explicit CurrentDevice(int index)
      : scope_(device_runtime(Device(DeviceType::kCUDA, index), "nccl backend"), index) {}

 private:
  DeviceScope scope_;
};

}  // namespace

std::unique_ptr<NcclComm> create_nccl_comm(rendezvous::Store& store, int rank, int size,
                                           int device_index, const std::string& group,
                                           collectives::Duration timeout) {
  COHORT_CHECK(size >= 1 && rank >= 0 && rank < size,
               "nccl backend: rank must be in [0, world_size), got rank {} world_size {}", rank,
               size);
  const NcclLibrary& lib = detail::nccl_library();
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string key = "cohort/nccl/" + group + "/unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = lib.get_unique_id(&id);
    if (r != ncclSuccess) {
      throw Error(fmt::format("nccl: rank 0 of group '{}': ncclGetUniqueId failed: {}", group,
                              lib.get_error_string(r)));
    }
    store.set(key, rendezvous::Bytes(id.internal, id.internal + sizeof(id.internal)));
  } else {
    try {
      store.wait({key}, timeout);
    } catch (const Error&) {
      std::rethrow_exception(with_message(
          std::current_exception(),
          fmt::format("nccl: rank {} of group '{}': waiting for rank 0's unique id: ", rank,
                      group)));
    }
    rendezvous::Bytes b = store.get(key);
    COHORT_CHECK(
        b.size() == sizeof(id.internal),
        "nccl: rank {} of group '{}': the unique id in the store has {} bytes, expected {}", rank,
        group, b.size(), sizeof(id.internal));
    std::memcpy(id.internal, b.data(), b.size());
  }

  CurrentDevice on(device_index);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns; hangs are the watchdog's to end
  config.commName = group.c_str();
  ncclComm_t comm = nullptr;
  ncclResult_t r = lib.comm_init_rank_config(&comm, size, id, rank, &config);
  if (r == ncclInProgress || (r == ncclSuccess && comm != nullptr)) {
    std::atomic<bool> never{false};
    r = poll_until_settled(lib, comm, deadline, never);
  }
  if (r == ncclInProgress) {
    lib.comm_abort(comm);
    throw TimeoutError(fmt::format(
        "nccl: rank {} of group '{}': creating the communicator on cuda:{} timed out after {} ms "
        "(every rank of the group must create it); aborted the communicator",
        rank, group, device_index, timeout.count()));
  }
  if (r != ncclSuccess) {
    std::string message = lib.get_error_string(r);
    if (comm != nullptr) {
      if (const char* last = lib.get_last_error(comm); last != nullptr && *last != '\0') {
        message += fmt::format(" ({})", last);
      }
      lib.comm_abort(comm);
    }
    throw Error(
        fmt::format("nccl: rank {} of group '{}': creating the communicator on cuda:{} "
                    "failed: {}",
                    rank, group, device_index, message));
  }
  return std::make_unique<RealNcclComm>(lib, comm, rank, size, group, timeout);
}

}  // namespace cohort::distributed
