// Context: one rank's connections to every other rank of a group: a data
// Pair per peer (shared memory or TCP), plus a small TCP control connection
// per peer that carries only "I failed: <reason>" and "I left" frames. The
// control connections are how failures travel: a peer killed with SIGKILL
// closes them (the kernel does), so waiters see it within one wait slice
// (100 ms) whatever transport the data uses; a peer that fails an op sends
// its reason so no one waits on it until a timeout.
//
// Built by Endpoint::connect (endpoint.h). Ownership: owns pairs, control
// sockets and this rank's shared-memory segment plus the mappings of its
// peers' segments. Thread safety: one op at a time (wait/check_peers);
// abort() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cohort/base/unique_fd.h"
#include "cohort/transport/pair.h"
#include "cohort/transport/shm_segment.h"
#include "cohort/transport/socket.h"

namespace cohort::transport {

// Why a rank aborted; decides the exception its peers throw.
enum class AbortKind : uint8_t { kError = 1, kPeerLost = 2, kMismatch = 3, kTimeout = 4 };

// A pair the caller wants to read from (write == false) or write to.
// optional: a read the caller can do without (one of several peers an
// any-source receive listens to): when its peer has left, wait() returns at
// once instead of throwing, and the caller drops it.
struct Want {
  Pair* pair;
  bool write;
  bool optional = false;
};

class Context {
 public:
  struct Peer {
    std::unique_ptr<Pair> pair;         // null for this rank
    UniqueFd control;                   // invalid for this rank
    std::optional<ShmSegment> segment;  // the peer's segment when it is a shm peer
    bool same_host = false;             // runs on this host (whatever the transport)
  };

  Context(int rank, int size, std::optional<ShmSegment> own_segment, std::vector<Peer> peers);
  // Sends "left" to the peers that are still there; never blocks long.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Pair* pair(int peer) const { return peers_[static_cast<size_t>(peer)].pair.get(); }
  // Ranks running on this host (any transport), this one included.
  int local_ranks() const { return local_ranks_; }
  // True when more local ranks than CPUs: waiters should yield, not spin.
  bool oversubscribed() const { return oversubscribed_; }

  // Blocks until one of `wants` may progress, about 100 ms pass, or deadline
  // passes (then returns; the caller decides). Throws when a peer died, left
  // while wanted (an optional want's peer that left makes it return instead),
  // or sent an abort (see check_peers).
  void wait(std::span<const Want> wants, Clock::time_point deadline);
  // Non-blocking look at the control connections. Throws cohort::PeerLost
  // for a dead peer, or the exception matching a peer's abort frame.
  void check_peers();
  // Tells every live peer that this rank failed, and makes this rank's own
  // later wait()/check_peers() throw cohort::Error(message). Safe from any
  // thread; never throws; only the first call counts.
  void abort(AbortKind kind, const std::string& message) noexcept;
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // Publishes 1 + the sequence number of the op this rank is in (shm peers read it).
  void set_op_seq(uint64_t op_seq_plus_one);
  // A shm peer's published value; nullopt for TCP peers.
  std::optional<uint64_t> peer_op_seq(int peer) const;
  bool peer_left(int peer) const { return left_[static_cast<size_t>(peer)]; }
  // Whether pair's peer closed its communicator and nothing more will come on
  // the pair. Shared memory: nothing unread (its sends completed before it
  // left). TCP: its "left" frame on the control connection can overtake the
  // end of its last message on the data connection, so a pair with nothing
  // to read counts as departed only kLeftGrace after the frame came.
  bool departed(Pair& pair);
  static constexpr std::chrono::milliseconds kLeftGrace{500};
  // Whether peer's control connection has closed or failed (the process is
  // gone); a non-blocking look. Call from the thread running ops.
  bool peer_gone(int peer) const;
  // Drops this rank's /dev/shm name once every peer has mapped the segment.
  void unlink_shm_name();

 private:
  // Reads one frame from peer p's control socket; throws for aborts and EOF.
  void read_control(int p);

  int rank_;
  int size_;
  std::optional<ShmSegment> own_segment_;
  std::vector<Peer> peers_;
  std::vector<char> left_;                  // peer sent "left"
  std::vector<Clock::time_point> left_at_;  // when that frame was read
  int local_ranks_ = 1;
  bool oversubscribed_ = false;
  std::mutex control_write_mu_;
  std::atomic<bool> aborted_{false};
  AbortKind abort_kind_ = AbortKind::kError;
  std::string abort_message_;
};

// Throws the exception a peer's abort frame of this kind stands for.
[[noreturn]] void throw_abort(AbortKind kind, const std::string& message);

}  // namespace cohort::transport
