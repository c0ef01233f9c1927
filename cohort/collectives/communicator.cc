#include "cohort/collectives/communicator.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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
// The single-copy "pull" algorithms are opt-in (COHORT_*_ALGO=pull): on the
// measured machine the kernel's process_vm_readv copy cost more CPU and time
// than two user-space copies through a cache-resident ring (see
// bench/collectives/bench_allreduce_raw and docs in allreduce_pull.h).

std::string env_choice(const char* name, std::initializer_list<const char*> allowed) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return "";
  for (const char* a : allowed) {
    if (std::strcmp(v, a) == 0) return v;
  }
  std::string list;
  for (const char* a : allowed) list += std::string(list.empty() ? "" : "|") + a;
  throw InvalidArgument(fmt::format("{}={}: expected one of {}", name, v, list));
}

bool use_first(const std::string& override, const char* first, bool by_size) {
  if (override.empty()) return by_size;
  return override == first;
}

void check_root(const Communicator& c, int root, const char* op) {
  COHORT_CHECK(root >= 0 && root < c.size(), "{} in group '{}': root must be in [0, {}), got {}",
               op, c.name(), c.size(), root);
}

void check_buffer(const void* p, size_t count, const char* op, const char* which) {
  COHORT_CHECK(p != nullptr || count == 0, "{}: {} buffer is null with count {}", op, which, count);
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(rendezvous::Store& store, int rank, int size,
                                                   CommunicatorOptions options) {
  COHORT_CHECK(size >= 1 && rank >= 0 && rank < size,
               "Communicator::create: rank must be in [0, size), got rank {} of size {}", rank,
               size);
  COHORT_CHECK(options.timeout.count() > 0, "Communicator::create: timeout must be > 0, got {} ms",
               options.timeout.count());
  bool force_tcp = options.transport == TransportKind::kTcp;
  if (options.transport == TransportKind::kAuto) {
    std::string t = env_choice("COHORT_TRANSPORT", {"tcp", "shm", "auto"});
    force_tcp = t == "tcp";
  }
  AlgoOverrides ov;
  ov.all_reduce = env_choice("COHORT_ALLREDUCE_ALGO", {"ring", "direct", "pull"});
  ov.broadcast = env_choice("COHORT_BROADCAST_ALGO", {"flat", "chain", "pull"});
  ov.reduce = env_choice("COHORT_REDUCE_ALGO", {"direct", "ring"});
  ov.all_gather = env_choice("COHORT_ALLGATHER_ALGO", {"direct", "ring", "pull"});
  ov.reduce_scatter = env_choice("COHORT_REDUCE_SCATTER_ALGO", {"direct", "ring"});

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
  comm->overrides_ = std::move(ov);
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

void Communicator::all_reduce(void* data, size_t count, DataType dtype, ReduceOp op,
                              Duration timeout) {
  check_buffer(data, count, "all_reduce", "data");
  size_t bytes = count * element_size(dtype);
  const std::string& o = overrides_.all_reduce;
  bool direct =
      o.empty() ? bytes * static_cast<size_t>(size_ - 1) <= kDirectAllReduceBytes : o == "direct";
  bool pull = single_copy_ && o == "pull";
  if (direct) {
    AllreduceDirect(*this, data, count, dtype, op).run(timeout);
  } else if (pull) {
    AllreducePull(*this, data, count, dtype, op).run(timeout);
  } else {
    AllreduceRing(*this, data, count, dtype, op).run(timeout);
  }
}

void Communicator::broadcast(void* data, size_t count, DataType dtype, int root, Duration timeout) {
  check_root(*this, root, "broadcast");
  check_buffer(data, count, "broadcast", "data");
  size_t bytes = count * element_size(dtype);
  const std::string& o = overrides_.broadcast;
  if (single_copy_ && o == "pull") {
    BroadcastPull(*this, data, count, dtype, root).run(timeout);
  } else if (use_first(o, "flat",
                       size_ <= 2 || bytes * static_cast<size_t>(size_ - 1) <= kDirectBytes)) {
    BroadcastFlat(*this, data, count, dtype, root).run(timeout);
  } else {
    BroadcastChain(*this, data, count, dtype, root).run(timeout);
  }
}

void Communicator::reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                          Duration timeout) {
  check_root(*this, root, "reduce");
  check_buffer(data, count, "reduce", "data");
  size_t bytes = count * element_size(dtype) * static_cast<size_t>(size_ - 1);
  if (use_first(overrides_.reduce, "direct", bytes <= kDirectBytes)) {
    ReduceDirect(*this, data, count, dtype, op, root).run(timeout);
  } else {
    ReduceRing(*this, data, count, dtype, op, root).run(timeout);
  }
}

void Communicator::all_gather(const void* send, void* recv, size_t count, DataType dtype,
                              Duration timeout) {
  check_buffer(send, count, "all_gather", "send");
  check_buffer(recv, count, "all_gather", "recv");
  size_t bytes = count * element_size(dtype) * static_cast<size_t>(size_);
  const std::string& o = overrides_.all_gather;
  if (single_copy_ && o == "pull") {
    AllgatherPull(*this, send, recv, count, dtype).run(timeout);
  } else if (use_first(o, "direct", bytes <= kDirectBytes)) {
    AllgatherDirect(*this, send, recv, count, dtype).run(timeout);
  } else {
    AllgatherRing(*this, send, recv, count, dtype).run(timeout);
  }
}

void Communicator::gather(const void* send, void* recv, size_t count, DataType dtype, int root,
                          Duration timeout) {
  check_root(*this, root, "gather");
  check_buffer(send, count, "gather", "send");
  if (rank_ == root) check_buffer(recv, count, "gather", "recv");
  GatherDirect(*this, send, recv, count, dtype, root).run(timeout);
}

void Communicator::scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
                           Duration timeout) {
  check_root(*this, root, "scatter");
  if (rank_ == root) check_buffer(send, count, "scatter", "send");
  check_buffer(recv, count, "scatter", "recv");
  ScatterDirect(*this, send, recv, count, dtype, root).run(timeout);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op, Duration timeout) {
  check_buffer(send, count, "reduce_scatter", "send");
  check_buffer(recv, count, "reduce_scatter", "recv");
  size_t bytes = count * element_size(dtype) * static_cast<size_t>(size_);
  if (use_first(overrides_.reduce_scatter, "direct", bytes <= kDirectBytes)) {
    ReduceScatterDirect(*this, send, recv, count, dtype, op).run(timeout);
  } else {
    ReduceScatterRing(*this, send, recv, count, dtype, op).run(timeout);
  }
}

void Communicator::all_to_all(const void* send, void* recv, size_t count, DataType dtype,
                              Duration timeout) {
  check_buffer(send, count, "all_to_all", "send");
  check_buffer(recv, count, "all_to_all", "recv");
  AlltoallDirect(*this, send, recv, count, dtype).run(timeout);
}

void Communicator::barrier(Duration timeout) { BarrierDirect(*this).run(timeout); }

void Communicator::send(const void* data, size_t count, DataType dtype, int dst, uint32_t tag,
                        Duration timeout) {
  check_buffer(data, count, "send", "data");
  PointToPoint(*this).send(data, count, dtype, dst, tag, timeout);
}

void Communicator::recv(void* data, size_t count, DataType dtype, int src, uint32_t tag,
                        Duration timeout) {
  check_buffer(data, count, "recv", "data");
  PointToPoint(*this).recv(data, count, dtype, src, tag, timeout);
}

}  // namespace cohort::collectives
