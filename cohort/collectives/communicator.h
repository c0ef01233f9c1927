// Communicator: one process's membership in one group of `size` ranks, and
// the collectives over raw buffers `(void*, count, DataType[, ReduceOp])`.
//
// Create one per group per process with Communicator::create(store, rank,
// size, options): the ranks meet through the store (addresses, shared-memory
// segment names) and connect a pair to every peer: shared memory when the
// peer runs on the same host (same hostname and boot id), TCP otherwise.
// options.transport = kTcp forces TCP for every peer (COHORT_TRANSPORT=tcp at
// the env:// bootstrap; knobs.h).
// Every rank of the group must call create with the same store namespace;
// give each communicator on one store its own options.name.
//
// Large messages between same-host ranks go through cache-sized
// shared-memory rings: the sender copies in, the receiver reduces (or copies)
// in place, block by block, pipelined. Where every rank may read its peers'
// memory (process_vm_readv: same pid namespace, ptrace allowed;
// single_copy()), the "pull" algorithms of all_reduce, broadcast and
// all_gather (options.tuning.algorithms) copy straight out of the peers'
// buffers instead (one copy; not the default: slower than the rings where
// measured).
//
// Semantics (PyTorch's c10d names): all ranks call the same collectives in the
// same order with the same count, dtype, op and root; `count` is elements (not
// bytes). In-place ops work on `data`; out-of-place ones take `send`/`recv`
// buffers that must not overlap. Counts of 0 are valid (the op still
// synchronises the ranks' sequence numbers and checks agreement). Results of
// all_reduce are bitwise identical on every rank.
//
// Algorithms are chosen by message size and world size (see communicator.cc);
// options.tuning.algorithms forces one per op (the algorithms each op offers:
// op_table.h; all ranks must agree; a disagreement is reported as a
// mismatch). The env:// bootstrap fills it from COHORT_<OP>_ALGO (knobs.h).
//
// Failures (every one is an exception, and the communicator is then broken:
// every later op rethrows the first error at once, and the peers are told so
// that theirs fail too instead of hanging):
//  - cohort::PeerLost naming the rank when a peer process dies or closes its
//    communicator while this one still needs it (seen within ~100 ms while
//    waiting, however the peer died);
//  - cohort::InvalidArgument for a mismatch: ranks calling different
//    collectives, or the same one with different count/dtype/op/root; the
//    message shows both sides; no byte of the payload is written;
//  - cohort::TimeoutError naming the op, the group, the sequence number and
//    the ranks that have not arrived (shared memory peers) or that this rank
//    still waited on (TCP peers);
//  - when a peer failed first, the same exception type as its failure with
//    the message "rank R of group 'g' failed: <its reason>" (so a dead rank
//    is named as PeerLost on every rank, whoever noticed first); abort()
//    gives cohort::Error "rank R of group 'g' aborted: <reason>".
//
// Point-to-point: send/recv are blocking and tagged; messages between two
// ranks are delivered in the order they were sent and share that order with
// the collectives (a recv whose next message is a different tag, count or a
// collective is a mismatch). A send returns once its bytes are in the
// transport (ring or socket buffer); one larger than that waits for the
// receiver, so two ranks must not both send large messages to each other
// before receiving.
// recv_any receives from whichever peer's matching send arrives first
// (PyTorch's recv without src; the sender calls an ordinary send) and returns
// its rank. Order stays per pair: a peer is chosen only when its next message
// is a send with the tag; a peer whose next message is something else
// (another tag, a collective) is passed over and that message stays for the
// op it belongs to; so is a peer that closed its communicator. The chosen
// message must match count and dtype as for recv (else a mismatch). When
// several peers' messages are in, the peer after the last recv_any's source
// (in rank order, wrapping) goes first, so peers that keep sending are served
// in turn. When every peer was passed over, no message can come: it fails at
// once (InvalidArgument listing each peer's next message, or PeerLost when
// all left) instead of waiting for its timeout.
//
// Thread safety: one operation at a time per communicator (the ProcessGroup
// runs them on one thread); abort() may be called from any thread.
// Ownership: owns its sockets, shared-memory mappings and scratch buffers;
// the store is only used inside create().
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cohort/collectives/flight_recorder.h"
#include "cohort/collectives/op_table.h"
#include "cohort/collectives/types.h"
#include "cohort/rendezvous/store.h"
#include "cohort/transport/network.h"

namespace cohort::transport {
class Context;
}

namespace cohort::collectives {

struct EngineState;

enum class TransportKind { kAuto, kTcp, kShm };

// How the collectives run, beyond where they run: the same on every rank.
struct CollectiveTuning {
  // Forced algorithms per op (none: chosen by size).
  AlgoOverrides algorithms;
  // How long a waiting op spins before it sleeps in the kernel (engine.cc;
  // ops over 16 MiB spin at most 50 us).
  std::chrono::microseconds spin = std::chrono::microseconds(1000);
};

struct CommunicatorOptions {
  // Names the group in errors and namespaces the bootstrap keys in the store.
  std::string name = "default";
  // Default timeout of every op (and of create itself).
  Duration timeout = std::chrono::seconds(300);
  // kAuto: shared memory to same-host peers, TCP to others. kTcp: TCP to
  // every peer. kShm: shared memory to every peer (create throws
  // InvalidArgument when a peer is on another host).
  TransportKind transport = TransportKind::kAuto;
  // Forced algorithms and the waiters' spin (all ranks alike).
  CollectiveTuning tuning;
  // The address to advertise, the connect time-out and the waiting reports
  // (transport/network.h); create() waits for the others' addresses no
  // longer than network.connect_timeout either.
  transport::NetworkOptions network;
  // The flight recorder (flight_recorder.h): how many of the last
  // collectives it keeps (0: off), and a directory where each rank writes
  // flight_recorder_rank<R>.json when an op fails ("" = none).
  size_t flight_recorder_entries = 2048;
  std::string flight_recorder_dir;
  // On a time-out or a lost peer, how long a failing rank waits for the
  // others' records in the store before it reports.
  Duration compare_timeout = std::chrono::seconds(1);
};

class Communicator {
 public:
  // Meets the other size-1 ranks through the store and connects to them.
  // Blocks until all have arrived or options.timeout passes (TimeoutError).
  static std::unique_ptr<Communicator> create(rendezvous::Store& store, int rank, int size,
                                              CommunicatorOptions options = {});
  // Tells the peers this rank left (so they do not mistake it for a crash
  // unless they still wait on it) and releases everything. Never blocks long.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  const CommunicatorOptions& options() const { return options_; }
  // Number of collectives started so far (the next op's sequence number).
  uint64_t sequence() const { return seq_; }
  // "self", "shm" or "tcp".
  std::string transport_name(int peer) const;

  // Runs one op (op_table.h: what each op does with send, recv and count),
  // checking its arguments first (check_op_args). The one entry point of
  // this layer; the named forms below build an OpArgs and call it.
  void run(const OpArgs& a);

  // data[count] on every rank <- reduction over ranks of data[count].
  void all_reduce(void* data, size_t count, DataType dtype, ReduceOp op,
                  Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kAllReduce, nullptr, data, count, dtype, op, 0, 0, timeout});
  }
  // data[count] on every rank <- data[count] of root.
  void broadcast(void* data, size_t count, DataType dtype, int root,
                 Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kBroadcast, nullptr, data, count, dtype, ReduceOp::kSum, root, 0, timeout});
  }
  // data[count] on root <- reduction over ranks; other ranks' data unchanged.
  void reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
              Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kReduce, nullptr, data, count, dtype, op, root, 0, timeout});
  }
  // recv[size][count] <- send[count] of each rank, in rank order.
  void all_gather(const void* send, void* recv, size_t count, DataType dtype,
                  Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kAllGather, send, recv, count, dtype, ReduceOp::kSum, 0, 0, timeout});
  }
  // On root: recv[size][count] <- send[count] of each rank; recv unused elsewhere (may be null).
  void gather(const void* send, void* recv, size_t count, DataType dtype, int root,
              Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kGather, send, recv, count, dtype, ReduceOp::kSum, root, 0, timeout});
  }
  // recv[count] <- root's send[rank][count]; send unused off root (may be null).
  void scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
               Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kScatter, send, recv, count, dtype, ReduceOp::kSum, root, 0, timeout});
  }
  // recv[count] <- reduction over ranks of their send[rank][count] (send holds size*count).
  void reduce_scatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kReduceScatter, send, recv, count, dtype, op, 0, 0, timeout});
  }
  // recv[j][count] <- send[rank][count] of rank j (both hold size*count elements).
  void all_to_all(const void* send, void* recv, size_t count, DataType dtype,
                  Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kAllToAll, send, recv, count, dtype, ReduceOp::kSum, 0, 0, timeout});
  }
  // Uneven all_to_all (op_table.h, OpArgs): send_counts[j] elements of send
  // go to rank j, recv_counts[i] from rank i land in recv, each block after
  // the previous ones; both arrays hold size() counts. A rank whose
  // send_counts[j] is not rank j's recv_counts[rank] is a mismatch.
  void all_to_all_v(const void* send, const size_t* send_counts, void* recv,
                    const size_t* recv_counts, DataType dtype,
                    Duration timeout = kUseDefaultTimeout) {
    OpArgs a{OpKind::kAllToAllV, send, recv, 0, dtype, ReduceOp::kSum, 0, 0, timeout};
    a.send_counts = send_counts;
    a.recv_counts = recv_counts;
    run(a);
  }
  // Returns once every rank has entered the barrier.
  void barrier(Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kBarrier, nullptr, nullptr, 0, DataType::kUInt8, ReduceOp::kSum, 0, 0, timeout});
  }
  // Tagged point-to-point (see the header paragraph for ordering).
  void send(const void* data, size_t count, DataType dtype, int dst, uint32_t tag = 0,
            Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kSend, data, nullptr, count, dtype, ReduceOp::kSum, dst, tag, timeout});
  }
  void recv(void* data, size_t count, DataType dtype, int src, uint32_t tag = 0,
            Duration timeout = kUseDefaultTimeout) {
    run({OpKind::kRecv, nullptr, data, count, dtype, ReduceOp::kSum, src, tag, timeout});
  }
  // A recv from any peer (see the header paragraph): returns the sender.
  int recv_any(void* data, size_t count, DataType dtype, uint32_t tag = 0,
               Duration timeout = kUseDefaultTimeout) {
    int source = -1;
    run({OpKind::kRecvAny, nullptr, data, count, dtype, ReduceOp::kSum, -1, tag, timeout, &source});
    return source;
  }

  // The last collectives (flight_recorder.h) and their JSON dump.
  FlightRecorder& recorder() { return recorder_; }
  std::string flight_record_json() const { return recorder_.to_json(rank_, options_.name); }
  // The store the ranks compare their records through when an op times out
  // or a peer fails (every rank of the group the same; null: no comparison).
  void set_diagnostic_store(std::shared_ptr<rendezvous::Store> store) {
    diag_store_ = std::move(store);
  }

  // True once an op has failed; error() is that failure.
  bool broken() const { return static_cast<bool>(error_); }
  std::exception_ptr error() const { return error_; }
  // Breaks the communicator with `reason` and tells the peers (their pending
  // and later ops fail with "rank R aborted: reason"). Safe from any thread.
  void abort(const std::string& reason);

  // For the algorithm classes (algorithm.h): the pairs, the sequence number
  // and failure bookkeeping. Not for users.
  transport::Context& context() { return *context_; }
  uint64_t next_sequence() { return seq_++; }
  Duration resolve(Duration timeout) const {
    return timeout == kUseDefaultTimeout ? options_.timeout : timeout;
  }
  // Rethrows the stored error when broken.
  void check_usable() const;
  // Records the first failure, tells the peers, and rethrows it.
  [[noreturn]] void fail(std::exception_ptr error);
  // The Engine's reusable per-op state.
  EngineState& engine_state() { return *engine_state_; }
  // A scratch buffer of at least `bytes`, reused across ops (one op at a time).
  std::byte* scratch(size_t bytes);
  // Per-pair message numbers of send/recv (checked like collective sequence numbers).
  uint64_t next_send_number(int peer) { return sent_[static_cast<size_t>(peer)]++; }
  uint64_t next_recv_number(int peer) { return received_[static_cast<size_t>(peer)]++; }
  uint64_t recv_number(int peer) const { return received_[static_cast<size_t>(peer)]; }
  // True when every rank reaches every other through shared memory and may
  // read its memory directly (process_vm_readv), on all ranks alike: the
  // single-copy "pull" algorithms are available. COHORT_SHM_SINGLE_COPY=0 turns it off.
  bool single_copy() const { return single_copy_; }

 private:
  Communicator(int rank, int size, CommunicatorOptions options,
               std::unique_ptr<transport::Context> context);

  int rank_;
  int size_;
  CommunicatorOptions options_;
  std::unique_ptr<transport::Context> context_;
  uint64_t seq_ = 0;
  std::exception_ptr error_;
  std::vector<std::byte> scratch_;
  std::vector<uint64_t> sent_;
  std::vector<uint64_t> received_;
  bool single_copy_ = false;
  std::unique_ptr<EngineState> engine_state_;
  FlightRecorder recorder_;
  std::shared_ptr<rendezvous::Store> diag_store_;

  // What the other ranks' records say, as a sentence for the error message.
  std::string compare_with_peers();
  void dump_flight_record() const;
};

}  // namespace cohort::collectives
