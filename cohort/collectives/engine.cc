#include "cohort/collectives/engine.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/collectives/reduce_kernels.h"

namespace cohort::collectives {

namespace {

// Bytes moved per step of one stream before the others get a turn: small
// enough that a reduce-and-forward pipeline keeps its data in cache.
constexpr size_t kChunk = 64 * 1024;
// A waiter spins (with pause) for CollectiveTuning::spin before it sleeps in
// the kernel, unless more ranks than CPUs share the host: then it yields a
// few times and sleeps, leaving the CPUs to the ranks that can run. Spinning
// for up to 1 ms (the default) matched OpenMPI's latency on a loaded 2-core
// host while bounding what a waiter takes from other threads.
constexpr size_t kLongSpinMaxBytes = size_t{16} << 20;
constexpr std::chrono::microseconds kShortSpin{50};
// Polls of a stalled op before the spin starts pausing.
constexpr int kEagerPolls = 256;

thread_local bool t_background = false;

// The issuing thread's CPU is this one's when the process has only one.
bool background_on_shared_cpu() {
  static const bool one_cpu = usable_cpus() < 2;
  return t_background && one_cpu;
}

}  // namespace

void set_background_thread(bool on) { t_background = on; }

Engine::Engine(Communicator& comm, OpDesc desc, Duration timeout)
    : comm_(comm),
      ctx_(comm.context()),
      desc_(desc),
      elem_(element_size(desc.dtype)),
      timeout_(comm.resolve(timeout)),
      st_(comm.engine_state()) {
  const std::chrono::microseconds spin = comm.options().tuning.spin;
  // Long ops gain nothing from saving a wake-up, and spinning through their
  // stalls only spends the CPU share they need (measured at 64 MiB).
  spin_ = desc_.count * elem_ <= kLongSpinMaxBytes ? spin : std::min(spin, kShortSpin);
  st_.used = 0;
  std::fill(st_.header_sent.begin(), st_.header_sent.end(), 0);
  std::fill(st_.header_received.begin(), st_.header_received.end(), 0);
  comm_.check_usable();
  if (op_info(desc_.kind).collective) {
    desc_.seq = comm_.next_sequence();
    ctx_.set_op_seq(desc_.seq + 1);
  }
  exceptions_at_start_ = std::uncaught_exceptions();
  flight_slot_ = comm_.recorder().start(desc_);
  // deadline_ is set at the op's first stall (drive), from the clock read the
  // spin takes anyway: an op that never waits reads no clock at all.
}

Engine::~Engine() {
  comm_.recorder().finish(flight_slot_, std::uncaught_exceptions() > exceptions_at_start_
                                            ? OpState::kFailed
                                            : OpState::kCompleted);
}

EngineState::EngineState(int size) {
  // Most streams one run uses: a send and a receive per peer.
  size_t max_streams = 2 * static_cast<size_t>(size) + 2;
  streams.resize(max_streams);
  for (Stream& s : streams) s.pieces.reserve(4);
  header_sent.assign(static_cast<size_t>(size), 0);
  header_received.assign(static_cast<size_t>(size), 0);
  wants.reserve(max_streams);
  held.assign(static_cast<size_t>(size), WireHeader{});
  held_bytes.assign(static_cast<size_t>(size), 0);
}

Piece* Stream::add(void* data, size_t len, const Piece* gate, bool reduce) {
  COHORT_ASSERT(pieces.size() < pieces.capacity(), "stream piece capacity {} exceeded",
                pieces.capacity());
  pieces.push_back(Piece{static_cast<std::byte*>(data), len, 0, gate, reduce});
  return &pieces.back();
}

void Stream::reset(transport::Pair* p, bool is_send) {
  pair = p;
  send = is_send;
  header_done = 0;
  pieces.clear();
  current = 0;
  pad = 0;
  pad_done = 0;
  finished = false;
  any = false;
  bounce_fill = 0;
}

Stream& Engine::next_stream(int peer, bool send) {
  COHORT_ASSERT(st_.used < st_.streams.size(), "more than {} streams in one run",
                st_.streams.size());
  Stream& s = st_.streams[st_.used++];
  s.reset(ctx_.pair(peer), send);
  s.header = to_wire(desc_);
  return s;
}

Stream& Engine::send(int peer) {
  Stream& s = next_stream(peer, true);
  if (st_.header_sent[static_cast<size_t>(peer)]) s.header_done = sizeof(WireHeader);
  st_.header_sent[static_cast<size_t>(peer)] = 1;
  return s;
}

Stream& Engine::recv(int peer) {
  Stream& s = next_stream(peer, false);
  if (st_.header_received[static_cast<size_t>(peer)]) {
    s.header_done = sizeof(WireHeader);
    s.got = s.header;
  }
  st_.header_received[static_cast<size_t>(peer)] = 1;
  return s;
}

size_t Engine::stream_bytes(const Stream& s) const {
  size_t n = 0;
  for (const Piece& p : s.pieces) n += p.len;
  return n;
}

void Engine::run() {
  try {
    for (Stream& s : active()) {
      s.pad = (8 - stream_bytes(s) % 8) % 8;
      if (!s.send && !s.pair->can_peek()) {
        for (const Piece& p : s.pieces) {
          if (p.reduce) {
            s.bounce.resize(kChunk + elem_);
            break;
          }
        }
      }
      if (!s.send && !s.finished && s.header_done == 0) take_held(s);
    }
    drive();
  } catch (...) {
    dump_state();
    st_.used = 0;
    comm_.fail(std::current_exception());
  }
  st_.used = 0;
}

int Engine::run_any(void* data, size_t len) {
  COHORT_ASSERT(st_.used == 0, "run_any: the run must have no other stream");
  any_ = true;
  any_data_ = static_cast<std::byte*>(data);
  any_len_ = len;
  any_source_ = -1;
  for (int i = 0; i < size(); ++i) {
    const int p = (st_.any_first + i) % size();
    if (p == rank()) continue;
    Stream& s = recv(p);
    s.any = true;
    // Each candidate expects its own pair's next message number; only the
    // chosen pair's is taken (choose).
    s.header.seq = comm_.recv_number(p);
  }
  run();
  any_ = false;
  return any_source_;
}

void Engine::take_held(Stream& s) {
  const auto peer = static_cast<size_t>(s.pair->peer());
  const size_t n = st_.held_bytes[peer];
  if (n == 0) return;
  std::memcpy(&s.got, &st_.held[peer], n);
  s.header_done = n;
  st_.held_bytes[peer] = 0;
  if (n == sizeof(WireHeader)) header_arrived(s);
}

void Engine::header_arrived(Stream& s) {
  if (!s.any) {
    check_header(s);
    return;
  }
  const WireHeader& h = s.got;
  if (h.magic != kWireMagic) check_header(s);  // corrupt: throws
  if (h.kind == s.header.kind && h.tag == s.header.tag) {
    choose(s);
  } else {
    drop(s);
  }
}

void Engine::choose(Stream& s) {
  const int peer = s.pair->peer();
  check_header(s);  // count, dtype and message number as for recv
  comm_.next_recv_number(peer);
  s.any = false;
  s.add(any_data_, any_len_);
  s.pad = (8 - any_len_ % 8) % 8;
  any_source_ = peer;
  st_.any_first = (peer + 1) % size();
  for (Stream& o : active()) {
    if (&o != &s && o.any && !o.finished) drop(o);
  }
}

void Engine::drop(Stream& s) {
  const auto peer = static_cast<size_t>(s.pair->peer());
  if (s.header_done > 0) {
    std::memcpy(&st_.held[peer], &s.got, s.header_done);
    st_.held_bytes[peer] = static_cast<uint8_t>(s.header_done);
  }
  s.finished = true;
}

bool Engine::drop_departed() {
  bool dropped = false;
  for (Stream& s : active()) {
    if (s.any && !s.finished && ctx_.departed(*s.pair)) {
      drop(s);
      dropped = true;
    }
  }
  return dropped;
}

bool Engine::left_cleanly(int peer) {
  // A peer that closed its communicator sent "left" on its control
  // connection before closing the data one; the frame may still be in flight.
  auto until = transport::Clock::now() + std::chrono::milliseconds(300);
  while (true) {
    ctx_.check_peers();  // throws for a crash or an abort: the better explanation
    if (ctx_.peer_left(peer)) return true;
    if (transport::Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Engine::throw_no_source() const {
  std::string next;
  bool any_held = false;
  for (const Stream& s : active()) {
    const int peer = s.pair->peer();
    const auto p = static_cast<size_t>(peer);
    next += next.empty() ? "" : "; ";
    if (st_.held_bytes[p] == sizeof(WireHeader)) {
      any_held = true;
      next += fmt::format("rank {}'s next message is {}", peer, describe(st_.held[p]));
    } else {
      next += fmt::format("rank {} closed its communicator", peer);
    }
  }
  std::string msg = fmt::format(
      "{} in group '{}' on rank {}: no peer can send it (a peer is chosen only when its next "
      "message is a send with tag {}): {}",
      describe(desc_), comm_.name(), rank(), desc_.tag, next);
  if (any_held) throw InvalidArgument(msg);
  throw PeerLost(msg);
}

void Engine::fail(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost&) {
    error = explain_loss(error);
  } catch (...) {
  }
  comm_.fail(error);
}

std::exception_ptr Engine::explain_loss(std::exception_ptr lost) {
  // A data connection that broke may belong to a peer that failed first and
  // sent its reason (naming the rank that really died) on the control
  // connection just before exiting: prefer that explanation.
  auto until = transport::Clock::now() + std::chrono::milliseconds(300);
  do {
    try {
      ctx_.check_peers();
    } catch (...) {
      return std::current_exception();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (transport::Clock::now() < until);
  return lost;
}

void Engine::drive() {
  int idle = 0;
  transport::Clock::time_point idle_since;
  const bool yield = ctx_.oversubscribed() || background_on_shared_cpu();
  while (true) {
    bool progress = false;
    bool all_done = true;
    for (Stream& s : active()) {
      if (s.finished) continue;
      try {
        progress |= s.send ? step_send(s) : step_recv(s);
      } catch (const PeerLost&) {
        // An any-source candidate whose peer left (TCP: its socket closed)
        // is passed over; any other loss fails the op.
        if (!s.any || !left_cleanly(s.pair->peer())) {
          std::rethrow_exception(explain_loss(std::current_exception()));
        }
        drop(s);
        progress = true;
      }
      all_done &= s.finished;
    }
    if (all_done) {
      if (any_ && any_source_ < 0) throw_no_source();
      return;
    }
    if (progress) {
      idle = 0;
      continue;
    }
    if (idle++ == 0) {
      idle_since = transport::Clock::now();
      if (!deadline_set_) {
        deadline_ = idle_since + timeout_;
        deadline_set_ = true;
        comm_.recorder().waiting(flight_slot_, idle_since);
      }
    }
    if (!yield) {
      // Spin (with pause) before sleeping: a peer that answers within the
      // spin costs no wake-up, and two ranks doing back-to-back ops stay on
      // their CPUs even when the host is busy (sleeping there turned 0.25 us
      // all_reduces into 45-65 us ones, as every op then waited for a wake-up).
      if ((idle & 63) != 0) {
        // The first polls go without pause: the peer's bytes usually land
        // within a few hundred ns, and a pause would delay seeing them.
        if (idle > kEagerPolls) cpu_relax();
        continue;
      }
      if (transport::Clock::now() - idle_since < spin_) continue;
    } else if (idle < 4) {
      ::sched_yield();
      continue;
    }
    auto now = transport::Clock::now();
    if (now >= deadline_) throw_timeout();
    if (any_ && drop_departed()) continue;
    st_.wants.clear();
    for (const Stream& s : active()) {
      // A send held back by its gate waits on a receive, not on ring space.
      if (!s.finished && (!s.send || can_send_now(s))) {
        st_.wants.push_back({s.pair, s.send, s.any});
      }
    }
    if (st_.wants.empty()) continue;
    ctx_.wait(st_.wants, deadline_);
    if (ctx_.aborted()) ctx_.check_peers();
    // After a sleep without progress, go straight back to sleep.
    idle = yield ? 0 : 1;
    if (!yield) idle_since = transport::Clock::now() - spin_;
  }
}

bool Engine::can_send_now(const Stream& s) const {
  if (s.header_done < sizeof(WireHeader)) return true;
  if (s.current == s.pieces.size()) return s.pad_done < s.pad;
  const Piece& p = s.pieces[s.current];
  size_t limit = p.gate != nullptr ? std::min(p.len, p.gate->done) : p.len;
  return p.done < limit;
}

bool Engine::step_send(Stream& s) {
  // Everything that may go now, as one gather write: the rest of the header,
  // the pieces from the current one up to the first gate that holds (at most
  // kChunk payload bytes per step), and the padding once all pieces are out.
  static const std::byte zeros[8] = {};
  constexpr size_t kMaxSlices = 8;
  transport::Pair::Slice slices[kMaxSlices];
  size_t* counters[kMaxSlices];
  size_t n = 0;
  if (s.header_done < sizeof(WireHeader)) {
    slices[n] = {reinterpret_cast<const std::byte*>(&s.header) + s.header_done,
                 sizeof(WireHeader) - s.header_done};
    counters[n++] = &s.header_done;
  }
  size_t budget = kChunk;
  bool all_pieces_out = true;
  for (size_t i = s.current; i < s.pieces.size(); ++i) {
    Piece& p = s.pieces[i];
    size_t limit = p.gate != nullptr ? std::min(p.len, p.gate->done) : p.len;
    size_t avail = p.done < limit ? limit - p.done : 0;
    if (avail > 0) {
      if (n == kMaxSlices - 1 || budget == 0) {
        all_pieces_out = false;
        break;
      }
      size_t k = std::min(avail, budget);
      slices[n] = {p.data + p.done, k};
      counters[n++] = &p.done;
      budget -= k;
      if (k < avail) {
        all_pieces_out = false;
        break;
      }
    }
    if (limit < p.len) {  // gated: the rest has not arrived yet
      all_pieces_out = false;
      break;
    }
  }
  if (all_pieces_out && s.pad_done < s.pad) {
    slices[n] = {zeros, s.pad - s.pad_done};
    counters[n++] = &s.pad_done;
  }
  size_t wrote = n > 0 ? s.pair->write_gather({slices, n}) : 0;
  size_t left = wrote;
  for (size_t i = 0; i < n && left > 0; ++i) {
    size_t take = std::min(left, slices[i].size);
    *counters[i] += take;
    left -= take;
  }
  size_t before = s.current;
  while (s.current < s.pieces.size() && s.pieces[s.current].done == s.pieces[s.current].len) {
    ++s.current;
  }
  if (s.header_done == sizeof(WireHeader) && s.current == s.pieces.size() && s.pad_done == s.pad) {
    s.finished = true;
    return true;
  }
  return wrote > 0 || s.current != before;
}

void Engine::check_header(const Stream& s) const {
  const WireHeader& a = s.header;
  const WireHeader& b = s.got;
  int peer = s.pair->peer();
  if (b.magic != kWireMagic) {
    throw IoError(fmt::format(
        "{} in group '{}': rank {} received a corrupt header from rank {} (magic {:#x})",
        describe(desc_), comm_.name(), rank(), peer, b.magic));
  }
  if (std::memcmp(&a, &b, sizeof(WireHeader)) != 0) {
    // all_to_all_v's headers carry the pair's two counts (wire.h): the same
    // op with other counts is a disagreement of the two ranks' count arrays.
    WireHeader same_counts = b;
    same_counts.count = a.count;
    same_counts.root = a.root;
    same_counts.tag = a.tag;
    if (a.kind == static_cast<uint8_t>(OpKind::kAllToAllV) &&
        std::memcmp(&a, &same_counts, sizeof(WireHeader)) == 0) {
      // This rank expects a.count from the peer and sends it other_way(a);
      // the peer sends b.count here and expects other_way(b).
      const bool to_me = a.count != b.count;
      const int from = to_me ? peer : rank(), to = to_me ? rank() : peer;
      const uint64_t sent = to_me ? b.count : other_way_count(a);
      const uint64_t expected = to_me ? a.count : other_way_count(b);
      throw InvalidArgument(fmt::format(
          "collective mismatch in group '{}' between rank {} and rank {}: {} #{}: rank {} sends "
          "{} elements to rank {} (its send_counts[{}]), but rank {} expects {} from rank {} (its "
          "recv_counts[{}])",
          comm_.name(), rank(), peer, op_kind_name(OpKind::kAllToAllV), a.seq, from, sent, to, to,
          to, expected, from, from));
    }
    // This rank's side by its own op's name (a recv's header is a send's).
    WireHeader mine = a;
    mine.kind = static_cast<uint8_t>(desc_.kind);
    throw InvalidArgument(fmt::format(
        "collective mismatch in group '{}' between rank {} and rank {}: rank {} called {}, rank "
        "{} called {}",
        comm_.name(), rank(), peer, rank(), describe(mine), peer, describe(b)));
  }
}

bool Engine::recv_piece(Stream& s, Piece& p) {
  size_t want = std::min(p.len - p.done, kChunk);
  if (!p.reduce) {
    size_t r = s.pair->read_some(p.data + p.done, want);
    p.done += r;
    return r > 0;
  }
  if (s.pair->can_peek()) {
    std::span<const std::byte> v = s.pair->peek();
    size_t k = std::min(v.size(), want);
    k -= k % elem_;
    if (k == 0) return false;
    reduce_into(p.data + p.done, v.data(), k / elem_, desc_.dtype, desc_.op);
    s.pair->consume(k);
    p.done += k;
    return true;
  }
  size_t space = std::min(s.bounce.size() - s.bounce_fill, p.len - p.done - s.bounce_fill);
  size_t r = s.pair->read_some(s.bounce.data() + s.bounce_fill, space);
  s.bounce_fill += r;
  size_t k = s.bounce_fill - s.bounce_fill % elem_;
  if (k > 0) {
    reduce_into(p.data + p.done, s.bounce.data(), k / elem_, desc_.dtype, desc_.op);
    std::memmove(s.bounce.data(), s.bounce.data() + k, s.bounce_fill - k);
    s.bounce_fill -= k;
    p.done += k;
  }
  return r > 0;
}

bool Engine::recv_header_in_place(Stream& s) {
  // Header and the start of a copied first piece straight out of the ring,
  // released with one consume: a small op then costs the producer's ring one
  // tail update (and its fence) instead of two. (An any-source candidate that
  // is dropped has no pieces: only its header is taken.)
  std::span<const std::byte> v = s.pair->peek();
  size_t k = std::min(v.size(), sizeof(WireHeader) - s.header_done);
  if (k == 0) return false;
  std::memcpy(reinterpret_cast<std::byte*>(&s.got) + s.header_done, v.data(), k);
  s.header_done += k;
  if (s.header_done == sizeof(WireHeader)) {
    header_arrived(s);  // may choose or drop an any-source candidate
    if (s.current < s.pieces.size() && !s.pieces[s.current].reduce) {
      Piece& p = s.pieces[s.current];
      size_t m = std::min({v.size() - k, p.len - p.done, kChunk});
      if (m > 0) std::memcpy(p.data + p.done, v.data() + k, m);
      p.done += m;
      k += m;
    }
  }
  s.pair->consume(k);
  return true;
}

bool Engine::step_recv(Stream& s) {
  bool progress = false;
  if (s.header_done < sizeof(WireHeader) && s.pair->can_peek()) {
    progress = recv_header_in_place(s);
    if (s.header_done < sizeof(WireHeader)) return progress;
    if (s.finished) return true;  // dropped any-source candidate
  }
  if (s.header_done < sizeof(WireHeader)) {
    size_t r = s.pair->read_some(reinterpret_cast<std::byte*>(&s.got) + s.header_done,
                                 sizeof(WireHeader) - s.header_done);
    s.header_done += r;
    if (s.header_done < sizeof(WireHeader)) return r > 0;
    header_arrived(s);
    if (s.finished) return true;  // dropped any-source candidate
    progress = true;
  }
  while (s.current < s.pieces.size()) {
    Piece& p = s.pieces[s.current];
    if (p.done < p.len) {
      bool moved = recv_piece(s, p);
      if (p.done < p.len) return progress || moved;
      progress = true;
    }
    ++s.current;
  }
  if (s.pad_done < s.pad) {
    std::byte sink[8];
    size_t r = s.pair->read_some(sink, s.pad - s.pad_done);
    s.pad_done += r;
    progress |= r > 0;
    if (s.pad_done < s.pad) return progress;
  }
  s.finished = true;
  return true;
}

void Engine::dump_state() {
  // COHORT_LOG_LEVEL=debug: where every stream stood when the op failed.
  if (log_level() >= LogLevel::kDebug) {
    for (const Stream& s : active()) {
      std::string st = fmt::format("rank {} {} peer {} hdr {} cur {}/{} pad {}/{} fin {}:", rank(),
                                   s.send ? "send" : "recv", s.pair->peer(), s.header_done,
                                   s.current, s.pieces.size(), s.pad_done, s.pad, s.finished);
      for (const Piece& p : s.pieces) {
        st += fmt::format(" [{}/{} gate {}]", p.done, p.len, p.gate ? (long)p.gate->done : -1L);
      }
      if (!s.send) st += fmt::format(" readable={}", s.pair->readable());
      COHORT_DEBUG("{}", st);
    }
  }
}

void Engine::throw_timeout() const {
  std::vector<int> waiting;
  std::vector<int> absent;
  bool all_known = true;
  for (const Stream& s : active()) {
    if (s.finished) continue;
    int p = s.pair->peer();
    if (std::find(waiting.begin(), waiting.end(), p) == waiting.end()) waiting.push_back(p);
  }
  if (op_info(desc_.kind).collective) {
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      auto seq = ctx_.peer_op_seq(p);
      if (!seq.has_value()) {
        all_known = false;
      } else if (*seq < desc_.seq + 1) {
        absent.push_back(p);
      }
    }
  } else {
    all_known = false;
  }
  std::sort(waiting.begin(), waiting.end());
  std::string msg = fmt::format(
      "{} in group '{}' timed out after {} ms on rank {} of {}; ranks that did not arrive: {}; "
      "still waiting on ranks [{}]",
      describe(desc_), comm_.name(), timeout_.count(), rank(), size(),
      all_known || !absent.empty() ? fmt::format("[{}]", fmt::join(absent, ", "))
                                   : std::string("unknown (TCP peers)"),
      fmt::join(waiting, ", "));
  throw TimeoutError(msg);
}

}  // namespace cohort::collectives
