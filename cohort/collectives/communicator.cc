#include "cohort/collectives/communicator.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/collectives/allgather_direct.h"
#include "cohort/collectives/allgather_pull.h"
#include "cohort/collectives/allgather_ring.h"
#include "cohort/collectives/allreduce_direct.h"
#include "cohort/collectives/allreduce_pull.h"
#include "cohort/collectives/allreduce_ring.h"
#include "cohort/collectives/alltoall_direct.h"
#include "cohort/collectives/alltoallv_direct.h"
#include "cohort/collectives/barrier_direct.h"
#include "cohort/collectives/broadcast_chain.h"
#include "cohort/collectives/broadcast_flat.h"
#include "cohort/collectives/broadcast_pull.h"
#include "cohort/collectives/engine.h"
#include "cohort/collectives/gather_direct.h"
#include "cohort/collectives/point_to_point.h"
#include "cohort/collectives/reduce_direct.h"
#include "cohort/collectives/reduce_ring.h"
#include "cohort/collectives/reduce_scatter_direct.h"
#include "cohort/collectives/reduce_scatter_ring.h"
#include "cohort/collectives/scatter_direct.h"
#include "cohort/rendezvous/wait_for_ranks.h"
#include "cohort/transport/context.h"
#include "cohort/transport/endpoint.h"

namespace cohort::collectives {

namespace {

// Messages up to this many bytes per peer-sum go the one-hop "direct" way;
// larger ones the bandwidth-optimal ring/chain (measured in bench/collectives).
constexpr size_t kDirectAllReduceBytes = 64 * 1024;
constexpr size_t kDirectBytes = 256 * 1024;
// The single-copy "pull" algorithms are opt-in (Algo::kPull): on the
// measured machine the kernel's process_vm_readv copy cost more CPU and time
// than two user-space copies through a cache-resident ring (see
// bench/collectives/bench_allreduce_raw and docs in allreduce_pull.h).

// The forced algorithm `first` when one is forced, else the size's choice.
bool use_first(Algo forced, Algo first, bool by_size) {
  return forced == Algo::kNone ? by_size : forced == first;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(rendezvous::Store& store, int rank, int size,
                                                   CommunicatorOptions options) {
  COHORT_CHECK(size >= 1 && rank >= 0 && rank < size,
               "Communicator::create: rank must be in [0, size), got rank {} of size {}", rank,
               size);
  COHORT_CHECK(options.timeout.count() > 0, "Communicator::create: timeout must be > 0, got {} ms",
               options.timeout.count());
  const bool force_tcp = options.transport == TransportKind::kTcp;

  auto deadline = transport::Clock::now() + options.timeout;
  transport::Endpoint endpoint(rank, size, {force_tcp, options.network});
  std::string prefix = "cohort/comm/" + options.name + "/";
  store.set(prefix + "addr/" + std::to_string(rank), endpoint.address());
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + "addr/" + std::to_string(r));
  rendezvous::wait_for_ranks(
      store, keys, rank, fmt::format("group '{}': exchanging addresses", options.name),
      std::min<Duration>(options.timeout,
                         std::chrono::duration_cast<Duration>(options.network.connect_timeout)),
      std::chrono::duration_cast<Duration>(options.network.report_interval));
  std::vector<std::string> addresses;
  for (const auto& k : keys) addresses.push_back(store.get_string(k));
  std::unique_ptr<transport::Context> ctx = endpoint.connect(addresses, deadline);
  if (options.transport == TransportKind::kShm) {
    for (int p = 0; p < size; ++p) {
      COHORT_CHECK(p == rank || ctx->pair(p)->kind() == "shm",
                   "Communicator::create: transport shm was asked for, but rank {} cannot reach "
                   "rank {} through shared memory (another host?)",
                   rank, p);
    }
  }
  // Every peer has mapped our segment once all are connected: drop its name.
  // The ready value says whether this rank can read all its peers' memory;
  // single-copy algorithms need every rank to say yes.
  bool can_pull = size > 1;
  for (int p = 0; p < size; ++p) {
    if (p != rank && !ctx->pair(p)->can_read_peer_memory()) can_pull = false;
  }
  store.set(prefix + "ready/" + std::to_string(rank), std::string(can_pull ? "1" : "0"));
  std::vector<std::string> ready;
  for (int r = 0; r < size; ++r) ready.push_back(prefix + "ready/" + std::to_string(r));
  rendezvous::wait_for_ranks(
      store, ready, rank,
      fmt::format("group '{}': waiting for every rank to connect", options.name), options.timeout,
      std::chrono::duration_cast<Duration>(options.network.report_interval));
  ctx->unlink_shm_name();
  bool single_copy = size > 1;
  for (const auto& k : ready) single_copy = single_copy && store.get_string(k) == "1";
  auto comm = std::unique_ptr<Communicator>(
      new Communicator(rank, size, std::move(options), std::move(ctx)));
  comm->single_copy_ = single_copy;
  return comm;
}

Communicator::Communicator(int rank, int size, CommunicatorOptions options,
                           std::unique_ptr<transport::Context> context)
    : rank_(rank),
      size_(size),
      options_(std::move(options)),
      context_(std::move(context)),
      sent_(static_cast<size_t>(size), 0),
      received_(static_cast<size_t>(size), 0),
      engine_state_(std::make_unique<EngineState>(size)),
      recorder_(options_.flight_recorder_entries) {}

Communicator::~Communicator() = default;

std::string Communicator::transport_name(int peer) const {
  COHORT_CHECK(peer >= 0 && peer < size_, "transport_name: peer must be in [0, {}), got {}", size_,
               peer);
  if (peer == rank_) return "self";
  return std::string(context_->pair(peer)->kind());
}

std::byte* Communicator::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void Communicator::check_usable() const {
  if (!error_ && context_->aborted()) {
    try {
      context_->check_peers();
    } catch (...) {
      const_cast<Communicator*>(this)->error_ = std::current_exception();
    }
  }
  if (error_) std::rethrow_exception(error_);
}

std::string Communicator::compare_with_peers() {
  if (!diag_store_ || size_ == 1) return "";
  const std::string prefix = "cohort/flight/" + options_.name + "/rank";
  try {
    diag_store_->set(prefix + std::to_string(rank_), recorder_.summary());
  } catch (const std::exception& e) {
    return fmt::format(" [flight recorder: the store is unreachable ({})]", e.what());
  }
  // Ranks that fail too post within the wait; one that never does is dead,
  // stuck outside cohort, or still computing.
  const auto deadline = std::chrono::steady_clock::now() + options_.compare_timeout;
  std::vector<std::string> said(static_cast<size_t>(size_));
  int missing = size_ - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || !said[static_cast<size_t>(r)].empty()) continue;
      if (context_->peer_gone(r)) {
        // Dead ranks never answer: do not wait for them.
        said[static_cast<size_t>(r)] = "is gone (its connection closed: the process died)";
        --missing;
        continue;
      }
      try {
        if (diag_store_->check({prefix + std::to_string(r)})) {
          said[static_cast<size_t>(r)] = diag_store_->get_string(prefix + std::to_string(r));
          --missing;
        }
      } catch (const std::exception&) {
        missing = 0;  // the store went away: report what is known
        break;
      }
    }
    if (missing > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string out =
      fmt::format(" [flight recorder: rank {} (this one) {}", rank_, recorder_.summary());
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    out += said[static_cast<size_t>(r)].empty()
               ? fmt::format("; rank {} did not answer within {} ms (dead, or not in a collective)",
                             r, options_.compare_timeout.count())
               : fmt::format("; rank {} {}", r, said[static_cast<size_t>(r)]);
  }
  return out + "]";
}

void Communicator::dump_flight_record() const {
  if (options_.flight_recorder_dir.empty()) return;
  const std::string path =
      fmt::format("{}/flight_recorder_rank{}.json", options_.flight_recorder_dir, rank_);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    COHORT_WARN("rank {}: cannot write the flight record to {}: {}", rank_, path,
                std::strerror(errno));
    return;
  }
  const std::string json = flight_record_json();
  std::fwrite(json.data(), 1, json.size(), f);
  std::fclose(f);
}

void Communicator::fail(std::exception_ptr error) {
  if (!error_) {
    transport::AbortKind kind = transport::AbortKind::kError;
    std::string what;
    // Time-outs and lost peers are where "who is behind?" matters; a
    // mismatch already names both sides.
    bool compare = false;
    try {
      std::rethrow_exception(error);
    } catch (const PeerLost& e) {
      kind = transport::AbortKind::kPeerLost;
      what = e.what();
      compare = true;
    } catch (const InvalidArgument& e) {
      kind = transport::AbortKind::kMismatch;
      what = e.what();
    } catch (const TimeoutError& e) {
      kind = transport::AbortKind::kTimeout;
      what = e.what();
      compare = true;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown error";
    }
    // Tell the peers first: their pending ops fail now, and they post their
    // records while this rank waits for theirs.
    context_->abort(kind, fmt::format("rank {} of group '{}' failed: {}", rank_, name(), what));
    if (compare) error = with_message(error, "", compare_with_peers());
    recorder_.fail_newest();
    dump_flight_record();
    error_ = error;
  }
  std::rethrow_exception(error);
}

void Communicator::abort(const std::string& reason) {
  context_->abort(transport::AbortKind::kError,
                  fmt::format("rank {} of group '{}' aborted: {}", rank_, name(), reason));
}

void Communicator::run(const OpArgs& a) {
  check_op_args(a, rank_, size_, options_.name);
  const Algo forced = options_.tuning.algorithms.get(a.kind);
  const size_t bytes = a.count * element_size(a.dtype);
  const auto size = static_cast<size_t>(size_);
  switch (a.kind) {
    case OpKind::kAllReduce:
      if (use_first(forced, Algo::kDirect, bytes * (size - 1) <= kDirectAllReduceBytes)) {
        AllreduceDirect(*this, a.recv, a.count, a.dtype, a.op).run(a.timeout);
      } else if (single_copy_ && forced == Algo::kPull) {
        AllreducePull(*this, a.recv, a.count, a.dtype, a.op).run(a.timeout);
      } else {
        AllreduceRing(*this, a.recv, a.count, a.dtype, a.op).run(a.timeout);
      }
      return;
    case OpKind::kBroadcast:
      if (single_copy_ && forced == Algo::kPull) {
        BroadcastPull(*this, a.recv, a.count, a.dtype, a.root).run(a.timeout);
      } else if (use_first(forced, Algo::kFlat, size <= 2 || bytes * (size - 1) <= kDirectBytes)) {
        BroadcastFlat(*this, a.recv, a.count, a.dtype, a.root).run(a.timeout);
      } else {
        BroadcastChain(*this, a.recv, a.count, a.dtype, a.root).run(a.timeout);
      }
      return;
    case OpKind::kReduce:
      if (use_first(forced, Algo::kDirect, bytes * (size - 1) <= kDirectBytes)) {
        ReduceDirect(*this, a.recv, a.count, a.dtype, a.op, a.root).run(a.timeout);
      } else {
        ReduceRing(*this, a.recv, a.count, a.dtype, a.op, a.root).run(a.timeout);
      }
      return;
    case OpKind::kAllGather:
      if (single_copy_ && forced == Algo::kPull) {
        AllgatherPull(*this, a.send, a.recv, a.count, a.dtype).run(a.timeout);
      } else if (use_first(forced, Algo::kDirect, bytes * size <= kDirectBytes)) {
        AllgatherDirect(*this, a.send, a.recv, a.count, a.dtype).run(a.timeout);
      } else {
        AllgatherRing(*this, a.send, a.recv, a.count, a.dtype).run(a.timeout);
      }
      return;
    case OpKind::kGather:
      GatherDirect(*this, a.send, a.recv, a.count, a.dtype, a.root).run(a.timeout);
      return;
    case OpKind::kScatter:
      ScatterDirect(*this, a.send, a.recv, a.count, a.dtype, a.root).run(a.timeout);
      return;
    case OpKind::kReduceScatter:
      if (use_first(forced, Algo::kDirect, bytes * size <= kDirectBytes)) {
        ReduceScatterDirect(*this, a.send, a.recv, a.count, a.dtype, a.op).run(a.timeout);
      } else {
        ReduceScatterRing(*this, a.send, a.recv, a.count, a.dtype, a.op).run(a.timeout);
      }
      return;
    case OpKind::kAllToAll:
      AlltoallDirect(*this, a.send, a.recv, a.count, a.dtype).run(a.timeout);
      return;
    case OpKind::kAllToAllV:
      AlltoallvDirect(*this, a.send, a.send_counts, a.recv, a.recv_counts, a.dtype).run(a.timeout);
      return;
    case OpKind::kBarrier:
      BarrierDirect(*this).run(a.timeout);
      return;
    case OpKind::kSend:
      PointToPoint(*this).send(a.send, a.count, a.dtype, a.root, a.tag, a.timeout);
      return;
    case OpKind::kRecv:
      PointToPoint(*this).recv(a.recv, a.count, a.dtype, a.root, a.tag, a.timeout);
      return;
    case OpKind::kRecvAny: {
      const int source = PointToPoint(*this).recv_any(a.recv, a.count, a.dtype, a.tag, a.timeout);
      if (a.source != nullptr) *a.source = source;
      return;
    }
  }
}

}  // namespace cohort::collectives
