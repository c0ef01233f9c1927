#include "cohort/transport/context.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::transport {

namespace {

constexpr uint32_t kControlMagic = 0x314C5443;  // "CTL1"
constexpr uint8_t kLeftFrame = 0;
constexpr int kSliceMs = 100;
constexpr size_t kMaxControlMessage = 1 << 16;

struct __attribute__((packed)) ControlFrame {
  uint32_t magic;
  uint8_t kind;
  uint32_t length;
};

void send_frame(int fd, uint8_t kind, const std::string& message) {
  std::string text = message.substr(0, kMaxControlMessage);
  ControlFrame f{kControlMagic, kind, static_cast<uint32_t>(text.size())};
  std::string buf(reinterpret_cast<const char*>(&f), sizeof(f));
  buf += text;
  // Best effort with a short deadline: the peer may be gone already.
  try {
    write_all(fd, buf.data(), buf.size(), Clock::now() + std::chrono::milliseconds(200),
              "transport: control frame");
  } catch (const Error&) {
  }
}

}  // namespace

[[noreturn]] void throw_abort(AbortKind kind, const std::string& message) {
  switch (kind) {
    case AbortKind::kPeerLost:
      throw PeerLost(message);
    case AbortKind::kMismatch:
      throw InvalidArgument(message);
    case AbortKind::kTimeout:
      throw TimeoutError(message);
    case AbortKind::kError:
      break;
  }
  throw Error(message);
}

Context::Context(int rank, int size, std::optional<ShmSegment> own_segment, std::vector<Peer> peers)
    : rank_(rank),
      size_(size),
      own_segment_(std::move(own_segment)),
      peers_(std::move(peers)),
      left_(static_cast<size_t>(size), 0),
      left_at_(static_cast<size_t>(size)) {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peers_[static_cast<size_t>(p)].same_host) ++local_ranks_;
  }
  unsigned cpus = std::thread::hardware_concurrency();
  oversubscribed_ = cpus == 0 || static_cast<unsigned>(local_ranks_) > cpus;
}

Context::~Context() {
  std::lock_guard<std::mutex> lock(control_write_mu_);
  if (aborted_.load()) return;
  for (int p = 0; p < size_; ++p) {
    auto& peer = peers_[static_cast<size_t>(p)];
    if (p != rank_ && peer.control.valid() && !left_[static_cast<size_t>(p)]) {
      send_frame(peer.control.get(), kLeftFrame, "");
    }
  }
}

void Context::abort(AbortKind kind, const std::string& message) noexcept {
  std::lock_guard<std::mutex> lock(control_write_mu_);
  if (aborted_.load()) return;
  abort_kind_ = kind;
  abort_message_ = message;
  aborted_.store(true, std::memory_order_release);
  for (int p = 0; p < size_; ++p) {
    auto& peer = peers_[static_cast<size_t>(p)];
    if (p != rank_ && peer.control.valid()) {
      send_frame(peer.control.get(), static_cast<uint8_t>(kind), message);
    }
  }
}

void Context::read_control(int p) {
  int fd = peers_[static_cast<size_t>(p)].control.get();
  ControlFrame f{};
  ssize_t r;
  do {
    r = ::recv(fd, &f, sizeof(f), MSG_DONTWAIT | MSG_PEEK);
  } while (r < 0 && errno == EINTR);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (r <= 0) {
    throw PeerLost(fmt::format(
        "rank {} lost: its connection to rank {} closed without a goodbye (process died or was "
        "killed)",
        p, rank_));
  }
  if (static_cast<size_t>(r) < sizeof(f)) return;  // rest of the frame still in flight
  auto deadline = Clock::now() + std::chrono::seconds(1);
  std::string what = fmt::format("rank {}: control frame from rank {}", rank_, p);
  read_all(fd, &f, sizeof(f), deadline, what);
  if (f.magic != kControlMagic || f.length > kMaxControlMessage) {
    throw PeerLost(fmt::format("rank {}: garbled control frame from rank {}", rank_, p));
  }
  std::string message(f.length, '\0');
  read_all(fd, message.data(), message.size(), deadline, what);
  if (f.kind == kLeftFrame) {
    left_[static_cast<size_t>(p)] = 1;
    left_at_[static_cast<size_t>(p)] = Clock::now();
    return;
  }
  throw_abort(static_cast<AbortKind>(f.kind), message);
}

bool Context::peer_gone(int p) const {
  const auto& peer = peers_[static_cast<size_t>(p)];
  if (p == rank_ || !peer.control.valid()) return false;
  char c;
  ssize_t r;
  do {
    r = ::recv(peer.control.get(), &c, 1, MSG_DONTWAIT | MSG_PEEK);
  } while (r < 0 && errno == EINTR);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

void Context::check_peers() {
  if (aborted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(control_write_mu_);
    throw_abort(abort_kind_, abort_message_);
  }
  pollfd fds[256];
  int ranks[256];
  int n = 0;
  for (int p = 0; p < size_; ++p) {
    auto& peer = peers_[static_cast<size_t>(p)];
    if (p == rank_ || !peer.control.valid() || left_[static_cast<size_t>(p)]) continue;
    if (n == 256) break;  // groups beyond 257 ranks: the rest are seen through their pairs
    fds[n] = {peer.control.get(), POLLIN | POLLRDHUP, 0};
    ranks[n] = p;
    ++n;
  }
  if (n == 0) return;
  int pr = ::poll(fds, static_cast<nfds_t>(n), 0);
  if (pr <= 0) return;
  for (int i = 0; i < n; ++i) {
    if (fds[i].revents != 0) read_control(ranks[i]);
  }
}

bool Context::departed(Pair& pair) {
  const auto p = static_cast<size_t>(pair.peer());
  if (!left_[p] || pair.readable()) return false;
  return pair.fd() < 0 || Clock::now() - left_at_[p] >= kLeftGrace;
}

void Context::wait(std::span<const Want> wants, Clock::time_point deadline) {
  check_peers();
  bool any_tcp = false;
  bool any_shm = false;
  for (const Want& w : wants) {
    bool ready = w.write ? w.pair->writable() : w.pair->readable();
    if (ready) return;
    if (departed(*w.pair)) {
      if (w.optional) return;  // the caller drops it
      throw PeerLost(fmt::format("rank {} closed its communicator while rank {} still waits on it",
                                 w.pair->peer(), rank_));
    }
    (w.pair->fd() >= 0 ? any_tcp : any_shm) = true;
  }
  if (!any_tcp && own_segment_.has_value()) {
    ShmSegmentHeader* h = own_segment_->header();
    uint32_t seen = h->doorbell.load(std::memory_order_acquire);
    h->sleeping.fetch_add(1, std::memory_order_seq_cst);
    bool ready = false;
    for (const Want& w : wants) {
      if (w.write ? w.pair->writable() : w.pair->readable()) {
        ready = true;
        break;
      }
    }
    if (!ready) {
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now());
      int64_t ns = std::min<int64_t>(left.count(), int64_t{kSliceMs} * 1000000);
      futex_wait_shared(&h->doorbell, seen, ns);
    }
    h->sleeping.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  // TCP (or mixed): poll the data sockets and the control sockets together.
  std::vector<pollfd> fds;
  fds.reserve(wants.size() + static_cast<size_t>(size_));
  for (const Want& w : wants) {
    if (w.pair->fd() >= 0) {
      fds.push_back({w.pair->fd(), static_cast<short>(w.write ? POLLOUT : POLLIN), 0});
    }
  }
  for (int p = 0; p < size_; ++p) {
    auto& peer = peers_[static_cast<size_t>(p)];
    if (p != rank_ && peer.control.valid() && !left_[static_cast<size_t>(p)]) {
      fds.push_back({peer.control.get(), POLLIN | POLLRDHUP, 0});
    }
  }
  int cap = any_shm ? 1 : kSliceMs;
  int pr = ::poll(fds.data(), fds.size(), poll_timeout_ms(deadline, cap));
  if (pr < 0 && errno != EINTR) throw_errno("transport: poll", errno);
}

void Context::set_op_seq(uint64_t op_seq_plus_one) {
  if (own_segment_.has_value()) {
    own_segment_->header()->op_seq.store(op_seq_plus_one, std::memory_order_relaxed);
  }
}

std::optional<uint64_t> Context::peer_op_seq(int peer) const {
  const auto& seg = peers_[static_cast<size_t>(peer)].segment;
  if (!seg.has_value()) return std::nullopt;
  return seg->header()->op_seq.load(std::memory_order_relaxed);
}

void Context::unlink_shm_name() {
  if (own_segment_.has_value()) own_segment_->unlink_name();
}

}  // namespace cohort::transport
