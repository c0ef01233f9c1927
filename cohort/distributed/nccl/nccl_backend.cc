#include "cohort/distributed/nccl/nccl_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "cohort/base/config.h"
#include "cohort/base/error.h"
#include "cohort/collectives/op_table.h"

namespace cohort::distributed {
namespace {

using collectives::DataType;

Device resolve_cuda(int index) {
  DeviceRuntime& rt = device_runtime(Device(DeviceType::kCUDA, 0), "nccl backend");
  return Device(DeviceType::kCUDA, index >= 0 ? index : rt.current_device());
}

const std::byte* at(const void* base, size_t block, int i) {
  return static_cast<const std::byte*>(base) + block * static_cast<size_t>(i);
}
std::byte* at(void* base, size_t block, int i) {
  return static_cast<std::byte*>(base) + block * static_cast<size_t>(i);
}

// Ends a group of point-to-point calls even when one of them throws (the
// communicator is failed then, but NCCL's group depth must stay balanced).
class P2PGroup {
 public:
  explicit P2PGroup(NcclComm& comm) : comm_(comm) { comm_.group_start(); }
  ~P2PGroup() {
    if (ended_) return;
    try {
      comm_.group_end();
    } catch (...) {  // the call's own failure is already on its way
    }
  }
  void end() {
    ended_ = true;
    comm_.group_end();
  }
  P2PGroup(const P2PGroup&) = delete;
  P2PGroup& operator=(const P2PGroup&) = delete;

 private:
  NcclComm& comm_;
  bool ended_ = false;
};

// NCCL pairs each recv with a send of one named peer: there is no receive
// from whichever peer sends first.
[[noreturn]] void throw_recv_any_not_supported(const std::string& group, int rank) {
  throw NotSupported(
      fmt::format("nccl backend: recv_any (a receive from any source) is not supported (group "
                  "'{}', rank {}): NCCL has no any-source receive; receive from a named rank "
                  "with recv(tensor, src), or use the native or mpi backend",
                  group, rank));
}

}  // namespace

NcclBackend::NcclBackend(std::unique_ptr<NcclComm> comm, const ProcessGroupOptions& options,
                         NcclBackendOptions nccl)
    : comm_(std::move(comm)),
      group_(options.name),
      device_(resolve_cuda(options.device_index)),
      runtime_(&device_runtime(device_, "nccl backend")),
      nccl_(std::move(nccl)) {
  COHORT_CHECK(comm_ != nullptr, "nccl backend: the communicator is null (group '{}')", group_);
  // A stream of the group's own: its collectives queue behind no other
  // group's (whose peers may order them differently) nor behind copies.
  stream_ = runtime_->side_stream(device_.index(), StreamPurpose::kCollectives);
  barrier_buffer_ = runtime_->allocate(device_.index(), sizeof(float), stream_);
  runtime_->fill_bytes(barrier_buffer_, 0, sizeof(float), stream_);
  NcclWatchdogOptions w;
  w.group = group_;
  w.rank = comm_->rank();
  w.device = device_.index();
  w.interval = nccl_.watchdog_interval;
  w.flight_recorder_entries = options.flight_recorder_entries;
  watchdog_ = std::make_shared<NcclWatchdog>(*comm_, *runtime_, w);
}

NcclBackend::~NcclBackend() {
  watchdog_->stop();
  // Ops still running would make a clean finalize wait for them (or for
  // peers that never come): abort instead, so destruction never hangs.
  if (!watchdog_->failed() && watchdog_->pending() > 0) {
    watchdog_->fail(std::make_exception_ptr(Error(fmt::format(
        "nccl: rank {} of group '{}': the group was destroyed with ops running", rank(), group_))));
  }
  comm_.reset();
  runtime_->deallocate(device_.index(), barrier_buffer_);
  // Nothing of the group's runs on it any more (finalized or aborted).
  runtime_->release_stream(stream_);
}

std::unique_ptr<NcclBackend> NcclBackend::create(std::shared_ptr<rendezvous::Store> store, int rank,
                                                 int size, const ProcessGroupOptions& options) {
#if COHORT_HAVE_NCCL
  COHORT_CHECK(store != nullptr, "nccl backend: a store is required");
  ProcessGroupOptions o = options;
  o.device_index = resolve_cuda(options.device_index).index();
  auto comm = create_nccl_comm(*store, rank, size, o.device_index, o.name, o.timeout);
  return std::make_unique<NcclBackend>(std::move(comm), o);
#else
  (void)store, (void)rank, (void)size, (void)options;
  throw NotSupported(
      "nccl backend not built: cohort was built without NCCL (COHORT_HAVE_NCCL=0: the CUDA "
      "toolkit's nccl.h and libnccl were not found)");
#endif
}

void NcclBackend::run(const OpArgs& a) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  if (a.kind == OpKind::kRecvAny) throw_recv_any_not_supported(group_, rank());
  if (a.kind != OpKind::kBarrier) {
    if (info.collective) ++seq_;  // the ProcessGroup numbered it
    throw InvalidArgument(fmt::format(
        "nccl backend: {} on host buffers; nccl works on CUDA tensors — move them with .cuda() "
        "or use the native backend",
        info.name));
  }
  auto [id, end] = enqueue(a, Event{}, {});
  wait_host(id, end, a.timeout, info.name);
}

DeviceCompletion NcclBackend::run_on_device(const OpArgs& a, const DeviceOpContext& ctx) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  if (a.kind == OpKind::kRecvAny) throw_recv_any_not_supported(group_, rank());
  if (ctx.device != device_) {
    if (info.collective) ++seq_;
    throw InvalidArgument(
        fmt::format("nccl backend: {} on {} buffers, but group '{}' (rank {}) "
                    "runs on {}",
                    info.name, ctx.device.str(), group_, rank(), device_.str()));
  }
  if (info.reduces && collectives::is_bitwise(a.op)) {
    if (info.collective) ++seq_;  // the ProcessGroup numbered it
    throw NotSupported(
        fmt::format("nccl backend: {} with reduction '{}' is not supported: NCCL has no bitwise "
                    "reductions (use the native or mpi backend, or reduce on the host)",
                    info.name, collectives::reduce_op_name(a.op)));
  }
  auto [id, end] = enqueue(a, ctx.ready, ctx.blocks);
  if (a.kind == OpKind::kBarrier) wait_host(id, end, a.timeout, info.name);
  DeviceCompletion done;
  done.end = std::move(end);
  done.check = [w = watchdog_, id = id] { w->check(id); };
  return done;
}

std::pair<uint64_t, Event> NcclBackend::enqueue(const OpArgs& a, const Event& ready,
                                                const std::vector<void*>& blocks) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  const uint64_t seq = info.collective ? seq_++ : 0;
  // NCCL enqueues on the current device, whichever thread issues the op.
  DeviceScope on_device(*runtime_, device_.index());
  watchdog_->check_healthy();
  if (ready.valid()) runtime_->wait(stream_, ready);
  for (void* b : blocks) runtime_->record_stream(device_.index(), b, stream_);
  collectives::OpDesc desc{
      a.kind,  a.dtype, a.op, collectives::Algo::kNone, info.has_root ? a.root : -1,
      a.count, a.tag,   seq};
  std::string label = info.collective           ? fmt::format("{} (seq {})", info.name, seq)
                      : a.kind == OpKind::kSend ? fmt::format("send to rank {}", a.root)
                                                : fmt::format("recv from rank {}", a.root);
  const uint64_t id = watchdog_->begin(desc, info.collective, std::move(label));
  try {
    issue(a);
  } catch (...) {
    // A refused call leaves the communicator in an unknown state (a group
    // half issued, peers waiting): the group fails, as the watchdog would.
    std::rethrow_exception(watchdog_->fail(with_message(
        std::current_exception(),
        fmt::format("nccl: rank {} of group '{}': issuing {}: ", rank(), group_, info.name))));
  }
  Event end = runtime_->record(stream_);
  watchdog_->watch(id, end, a.timeout);
  return {id, std::move(end)};
}

void NcclBackend::issue(const OpArgs& a) {
  void* s = stream_.handle;
  const int n = size();
  const int me = rank();
  const size_t block = a.count * collectives::element_size(a.dtype);
  switch (a.kind) {
    case OpKind::kAllReduce:
      comm_->all_reduce(a.recv, a.recv, a.count, a.dtype, a.op, s);
      return;
    case OpKind::kBroadcast:
      comm_->broadcast(a.recv, a.recv, a.count, a.dtype, a.root, s);
      return;
    case OpKind::kReduce:
      comm_->reduce(a.recv, a.recv, a.count, a.dtype, a.op, a.root, s);
      return;
    case OpKind::kAllGather:
      comm_->all_gather(a.send, a.recv, a.count, a.dtype, s);
      return;
    case OpKind::kReduceScatter:
      comm_->reduce_scatter(a.send, a.recv, a.count, a.dtype, a.op, s);
      return;
    case OpKind::kAllToAll: {
      P2PGroup g(*comm_);
      for (int p = 0; p < n; ++p) {
        comm_->send(at(a.send, block, p), a.count, a.dtype, p, s);
        comm_->recv(at(a.recv, block, p), a.count, a.dtype, p, s);
      }
      g.end();
      return;
    }
    case OpKind::kAllToAllV: {
      // NCCL has no alltoallv: one group of a send and a receive per peer,
      // at the prefix sums of the counts (as PyTorch's ProcessGroupNCCL).
      const size_t es = collectives::element_size(a.dtype);
      size_t send_at = 0, recv_at = 0;
      P2PGroup g(*comm_);
      for (int p = 0; p < n; ++p) {
        const auto j = static_cast<size_t>(p);
        comm_->send(static_cast<const std::byte*>(a.send) + send_at, a.send_counts[j], a.dtype, p,
                    s);
        comm_->recv(static_cast<std::byte*>(a.recv) + recv_at, a.recv_counts[j], a.dtype, p, s);
        send_at += a.send_counts[j] * es;
        recv_at += a.recv_counts[j] * es;
      }
      g.end();
      return;
    }
    case OpKind::kGather: {
      P2PGroup g(*comm_);
      if (me == a.root) {
        for (int p = 0; p < n; ++p) comm_->recv(at(a.recv, block, p), a.count, a.dtype, p, s);
      }
      comm_->send(a.send, a.count, a.dtype, a.root, s);
      g.end();
      return;
    }
    case OpKind::kScatter: {
      P2PGroup g(*comm_);
      if (me == a.root) {
        for (int p = 0; p < n; ++p) comm_->send(at(a.send, block, p), a.count, a.dtype, p, s);
      }
      comm_->recv(a.recv, a.count, a.dtype, a.root, s);
      g.end();
      return;
    }
    case OpKind::kBarrier:
      comm_->all_reduce(barrier_buffer_, barrier_buffer_, 1, DataType::kFloat32, ReduceOp::kSum, s);
      return;
    case OpKind::kSend:
      comm_->send(a.send, a.count, a.dtype, a.root, s);
      return;
    case OpKind::kRecv:
      comm_->recv(a.recv, a.count, a.dtype, a.root, s);
      return;
    case OpKind::kRecvAny:
      throw_recv_any_not_supported(group_, rank());  // refused before issue
  }
  throw InvalidArgument(
      fmt::format("nccl backend: op kind {} is not in the op table", static_cast<int>(a.kind)));
}

void NcclBackend::wait_host(uint64_t id, const Event& end, collectives::Duration timeout,
                            const char* op) {
  // The watchdog fails the op at its deadline; the margin only guards
  // against a watchdog that cannot run.
  const auto limit = std::chrono::steady_clock::now() + timeout + 10 * nccl_.watchdog_interval +
                     std::chrono::seconds(1);
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    // The event first, then the failure: the watchdog records a failure
    // before it aborts, so an end reached by an aborted kernel is caught.
    const bool done = runtime_->query(end);
    watchdog_->check(id);
    if (done) return;
    if (std::chrono::steady_clock::now() >= limit) {
      throw TimeoutError(
          fmt::format("nccl: {} on group '{}' (rank {}): the host waited {} ms "
                      "and the watchdog did not end it",
                      op, group_, rank(), timeout.count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

std::unique_ptr<Backend> NcclBackend::new_subgroup(const std::vector<int>& ranks,
                                                   std::shared_ptr<rendezvous::Store> store,
                                                   const ProcessGroupOptions& options) {
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  if (it == ranks.end()) return nullptr;
  COHORT_CHECK(store != nullptr, "nccl backend: new_group of group '{}' needs a store", group_);
  const int sub_rank = static_cast<int>(it - ranks.begin());
  ProcessGroupOptions o = options;
  o.device_index = device_.index();
  // A fresh unique id through the subgroup's own store namespace (simpler
  // than ncclCommSplit, which every rank of the parent must call).
  std::unique_ptr<NcclComm> comm;
  if (nccl_.make_comm) {
    comm = nccl_.make_comm(*store, sub_rank, static_cast<int>(ranks.size()), o.device_index, o.name,
                           o.timeout);
  } else {
#if COHORT_HAVE_NCCL
    comm = create_nccl_comm(*store, sub_rank, static_cast<int>(ranks.size()), o.device_index,
                            o.name, o.timeout);
#else
    throw NotSupported(
        "nccl backend not built: cohort was built without NCCL (COHORT_HAVE_NCCL=0)");
#endif
  }
  return std::make_unique<NcclBackend>(std::move(comm), o, nccl_);
}

void NcclBackend::abort(const std::string& reason) {
  watchdog_->fail(std::make_exception_ptr(
      Error(fmt::format("nccl: rank {} of group '{}' aborted: {}", rank(), group_, reason))));
}

}  // namespace cohort::distributed
