// Engine: runs one op's transfers. An algorithm describes, per peer and
// direction, a Stream: the pieces of its buffers to send or receive, in
// order. A received piece is either copied or reduced into place (from the
// shared-memory ring directly, without a staging copy); a sent piece may be
// gated on a received one (send only the bytes of it that have arrived),
// which is what pipelines rings and chains. The Engine puts the op header
// ahead of the first stream to each peer, checks the peers' headers, makes
// progress on all streams at once (so no send can block a receive), spins
// briefly when nothing moves, then blocks in the transport (futex or poll).
// An any-source receive (run_any) is one more shape of the same loop: a
// header-only stream from every peer, and the first peer whose next message
// is a send with the op's tag gets the payload buffer; a header read from a
// peer that was not chosen is kept (EngineState::held) for the op it belongs
// to, which starts from it as if it had just arrived.
//
// Internal to the collectives layer. One Engine per op; not thread safe.
// Failure: every error goes through Communicator::fail (the communicator is
// broken and the peers are told), then propagates.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <span>
#include <vector>

#include "cohort/collectives/communicator.h"
#include "cohort/collectives/wire.h"
#include "cohort/transport/context.h"

namespace cohort::collectives {

struct Piece {
  std::byte* data;
  size_t len;
  size_t done = 0;
  const Piece* gate = nullptr;  // send: only gate->done bytes may go
  bool reduce = false;          // recv: reduce into data instead of copying
};

struct Stream {
  transport::Pair* pair = nullptr;
  bool send = false;
  WireHeader header{};  // to send, or the one expected
  WireHeader got{};     // received
  size_t header_done = 0;
  std::vector<Piece> pieces;  // capacity reserved up front: gates point into it
  size_t current = 0;
  size_t pad = 0;
  size_t pad_done = 0;
  bool finished = false;
  // run_any: a candidate (header only until chosen; dropped when its peer's
  // next message is not the op's, or its peer left).
  bool any = false;
  // TCP receive-and-reduce staging.
  std::vector<std::byte> bounce;
  size_t bounce_fill = 0;

  // Appends a piece; returns it so later send pieces can gate on it.
  Piece* add(void* data, size_t len, const Piece* gate = nullptr, bool reduce = false);
  void reset(transport::Pair* p, bool is_send);
  // Makes room for n pieces; call before add() when a stream takes more than 4.
  void reserve(size_t n) { pieces.reserve(n); }
};

// The streams and bookkeeping of one communicator's ops, kept between ops so
// that starting an op allocates nothing.
struct EngineState {
  explicit EngineState(int size);
  std::vector<Stream> streams;  // [0, used) belong to the running op
  size_t used = 0;
  std::vector<char> header_sent;
  std::vector<char> header_received;
  std::vector<transport::Want> wants;
  // Per peer: the first held_bytes of its next message's header, read by an
  // any-source receive that did not choose that peer (kept across ops; the
  // next op that receives from the peer starts from them).
  std::vector<WireHeader> held;
  std::vector<uint8_t> held_bytes;
  // The peer an any-source receive looks at first: the one after its last
  // source, so that peers that keep sending are served in turn.
  int any_first = 0;
};

// Marks the calling thread as one that runs collectives beside the thread
// that issued them (a process group's work thread). Where the process may run
// on one CPU only (`cohort run` pins each rank to its share), such a thread's
// waits yield instead of polling: its polling would take the time of the
// training thread on that CPU.
void set_background_thread(bool on);

class Engine {
 public:
  // Starts an op: rethrows a broken communicator's error, takes the next
  // sequence number (collectives) and publishes it, sets the deadline.
  // desc.seq must already be set for send and recv.
  Engine(Communicator& comm, OpDesc desc, Duration timeout);
  // Records the op's end in the flight recorder: failed when an exception is
  // leaving the op, completed otherwise.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const OpDesc& desc() const { return desc_; }
  Communicator& comm() { return comm_; }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  size_t elem() const { return elem_; }

  // A stream to / from peer for the next run().
  Stream& send(int peer);
  Stream& recv(int peer);
  // Drives every stream added since the last run to completion. Two streams
  // in one direction on one pair must go in separate runs.
  void run();
  // The any-source receive (recv_any): listens to every peer (no other
  // stream in the run) and receives data[len] from the first one whose next
  // message is a send with desc().tag, checking its header as recv does
  // (count, dtype, per-pair number); returns that peer. A peer whose next
  // message is anything else (another tag, a collective) is passed over and
  // that message stays for the op it belongs to; so is a peer that left.
  // InvalidArgument when every peer was passed over (no message can come),
  // PeerLost when every peer left; the op's timeout, a lost peer and a
  // mismatch with the chosen sender fail as in run().
  int run_any(void* data, size_t len);
  // Fails the communicator with `error` (an error of work done outside run(),
  // such as single-copy reads); a PeerLost is first explained as in run().
  [[noreturn]] void fail(std::exception_ptr error);

 private:
  void drive();
  void dump_state();
  std::exception_ptr explain_loss(std::exception_ptr lost);
  bool step_send(Stream& s);
  bool can_send_now(const Stream& s) const;
  bool step_recv(Stream& s);
  bool recv_piece(Stream& s, Piece& p);
  bool recv_header_in_place(Stream& s);
  void check_header(const Stream& s) const;
  // A recv stream's header is complete: checked, or (run_any) the candidate
  // is chosen or passed over.
  void header_arrived(Stream& s);
  // run() starts a recv stream from the peer's held header bytes, if any.
  void take_held(Stream& s);
  // run_any: `s` gets the payload; every other candidate is dropped.
  void choose(Stream& s);
  // run_any: `s` is dropped (its header bytes held for a later op).
  void drop(Stream& s);
  // run_any: drops the candidates whose peer left with nothing more to
  // read; true when it dropped one.
  bool drop_departed();
  // run_any: whether peer's data connection ended because it left (a
  // "left" frame, not a crash); waits briefly for the frame.
  bool left_cleanly(int peer);
  [[noreturn]] void throw_no_source() const;
  [[noreturn]] void throw_timeout() const;
  size_t stream_bytes(const Stream& s) const;

  Communicator& comm_;
  transport::Context& ctx_;
  OpDesc desc_;
  size_t elem_;
  Duration timeout_;
  transport::Clock::time_point deadline_;  // from the op's first stall
  bool deadline_set_ = false;
  std::span<Stream> active() { return {st_.streams.data(), st_.used}; }
  std::span<const Stream> active() const { return {st_.streams.data(), st_.used}; }
  Stream& next_stream(int peer, bool send);

  EngineState& st_;
  std::chrono::nanoseconds spin_;
  size_t flight_slot_ = 0;
  int exceptions_at_start_ = 0;
  // run_any: the payload buffer and the chosen peer (-1 until chosen).
  bool any_ = false;
  std::byte* any_data_ = nullptr;
  size_t any_len_ = 0;
  int any_source_ = -1;
};

}  // namespace cohort::collectives
