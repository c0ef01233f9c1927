#include "cohort/rendezvous/tcp_store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/rendezvous/quorum.h"
#include "cohort/rendezvous/store_util.h"
#include "cohort/rendezvous/tcp_store_protocol.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/socket.h"

namespace cohort::rendezvous {

using proto::Op;
using proto::Status;
using Clock = transport::Clock;

namespace {

struct Conn {
  UniqueFd fd;
  bool authed = false;
  bool closing = false;  // close once the output is flushed
  Clock::time_point accepted;
  std::vector<uint8_t> in;
  std::vector<uint8_t> out;
  size_t out_pos = 0;
  bool want_write = false;
  // A get/wait parked until its keys exist or its deadline passes.
  bool parked = false;
  Op parked_op = Op::kWait;
  std::vector<std::string> parked_keys;
  Clock::time_point parked_deadline;
  std::string replica;  // the quorum service's replica this connection belongs to
};

Clock::time_point deadline_after_ms(uint64_t ms) {
  constexpr uint64_t kMaxMs = 1000ull * 3600 * 24 * 365;  // keeps time_point arithmetic finite
  return Clock::now() + std::chrono::milliseconds(std::min(ms, kMaxMs));
}

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(UniqueFd listener, TcpStoreServerOptions options, std::atomic<int>* clients,
       std::atomic<int>* refused)
      : listener_(std::move(listener)),
        options_(std::move(options)),
        token_(resolve_token(options_.token)),
        clients_(clients),
        refused_(refused) {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) throw_errno("TcpStore server: epoll_create1", errno);
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_.valid()) throw_errno("TcpStore server: eventfd", errno);
    add_fd(listener_.get(), EPOLLIN);
    add_fd(wake_.get(), EPOLLIN);
  }

  void stop() {
    stop_.store(true);
    uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_.get(), &one, sizeof(one));
  }

  void run() {
    epoll_event events[64];
    while (!stop_.load()) {
      int n = ::epoll_wait(epoll_.get(), events, 64, next_timeout_ms());
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno("TcpStore server: epoll_wait", errno);
      }
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == listener_.get()) {
          accept_all();
        } else if (fd == wake_.get()) {
          uint64_t v;
          [[maybe_unused]] ssize_t r = ::read(wake_.get(), &v, sizeof(v));
        } else {
          auto it = conns_.find(fd);
          if (it == conns_.end()) continue;
          Conn& c = *it->second;
          if (events[i].events & EPOLLOUT) flush(c);
          if (conns_.count(fd) && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
            read_conn(c);
          }
        }
      }
      expire();
      resolve_parked();
      resolve_quorum();
    }
  }

 private:
  void add_fd(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      throw_errno("TcpStore server: epoll_ctl", errno);
    }
  }

  int next_timeout_ms() {
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (auto& [fd, c] : conns_) {
      if (!c->authed) next = std::min(next, c->accepted + options_.handshake_timeout);
      if (c->parked) next = std::min(next, c->parked_deadline);
    }
    if (auto q = quorum_.next_deadline(Clock::now())) next = std::min(next, *q);
    return transport::poll_timeout_ms(next);
  }

  void accept_all() {
    while (true) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          COHORT_WARN("TcpStore server: accept: {}", std::strerror(errno));
        }
        return;
      }
      int one = 1;  // replies are small; Nagle would hold them back
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->fd.reset(fd);
      c->accepted = Clock::now();
      add_fd(fd, EPOLLIN);
      conns_[fd] = std::move(c);
    }
  }

  void close_conn(Conn& c) {
    if (c.authed) clients_->fetch_sub(1);
    // A replica's process that died closes every connection it had.
    if (!c.replica.empty()) {
      quorum_.lost(c.replica);
      quorum_changed_ = true;
    }
    conns_.erase(c.fd.get());  // destroys c; epoll forgets the fd when it closes
  }

  void read_conn(Conn& c) {
    uint8_t buf[64 * 1024];
    while (true) {
      ssize_t r = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (r > 0) {
        c.in.insert(c.in.end(), buf, buf + r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c);  // EOF or reset: the client is gone, with any parked request
      return;
    }
    process(c);
  }

  // Handles every whole frame buffered on c, stopping at a parked request.
  void process(Conn& c) {
    size_t pos = 0;
    int fd = c.fd.get();
    while (!c.parked && !c.closing) {
      if (c.in.size() - pos < 4) break;
      uint32_t len = proto::read_u32_le(&c.in[pos]);
      uint32_t cap = c.authed ? proto::kMaxFrame : proto::kMaxHandshakeFrame;
      if (len > cap) {
        COHORT_WARN("TcpStore server: dropping a connection that sent a {} byte frame", len);
        close_conn(c);
        return;
      }
      if (c.in.size() - pos - 4 < len) break;
      const uint8_t* payload = &c.in[pos + 4];
      pos += 4 + len;
      try {
        proto::Decoder d(payload, len);
        if (c.authed) {
          handle_request(c, d);
        } else {
          handle_handshake(c, d);
        }
      } catch (const IoError& e) {
        COHORT_WARN("TcpStore server: dropping a connection: {}", e.what());
        close_conn(c);
        return;
      }
      if (!conns_.count(fd)) return;
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(pos));
  }

  void handle_handshake(Conn& c, proto::Decoder& d) {
    uint32_t magic = d.u32();
    uint32_t version = d.u32();
    if (magic != proto::kMagic) throw IoError("not a cohort store client (bad magic)");
    std::string token = d.str();
    if (version != proto::kVersion) {
      reply(c, std::move(proto::Encoder()
                             .u8(static_cast<uint8_t>(Status::kRefused))
                             .str(fmt::format("protocol version {} (server speaks {})", version,
                                              proto::kVersion)))
                   .finish());
      c.closing = true;
    } else if (!tokens_equal(token, token_)) {
      refused_->fetch_add(1);
      reply(c, std::move(proto::Encoder()
                             .u8(static_cast<uint8_t>(Status::kRefused))
                             .str(token.empty() ? "no job token presented (set COHORT_TOKEN)"
                                                : "wrong job token"))
                   .finish());
      c.closing = true;
    } else {
      c.authed = true;
      clients_->fetch_add(1);
      reply(c, std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk))).finish());
    }
    if (c.closing && c.out_pos == c.out.size()) close_conn(c);
  }

  static std::vector<uint8_t> ok() {
    return std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk))).finish();
  }

  void handle_request(Conn& c, proto::Decoder& d) {
    Op op = static_cast<Op>(d.u8());
    switch (op) {
      case Op::kSet: {
        std::string key = d.str();
        data_[key] = d.bytes();
        mutated_ = true;
        reply(c, ok());
        break;
      }
      case Op::kGet: {
        std::string key = d.str();
        uint64_t ms = d.u64();
        park(c, op, {key}, ms);
        break;
      }
      case Op::kAdd: {
        std::string key = d.str();
        int64_t delta = d.i64();
        auto it = data_.find(key);
        try {
          int64_t v = (it == data_.end() ? 0 : detail::parse_counter(key, it->second)) + delta;
          data_[key] = detail::format_counter(v);
          mutated_ = true;
          reply(c,
                std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk)).i64(v)).finish());
        } catch (const InvalidArgument& e) {
          reply(c,
                std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kError)).str(e.what()))
                    .finish());
        }
        break;
      }
      case Op::kCompareSet: {
        std::string key = d.str();
        Bytes expected = d.bytes();
        Bytes desired = d.bytes();
        auto it = data_.find(key);
        const Bytes* result = &desired;
        if (it == data_.end()) {
          if (expected.empty()) {
            data_[key] = desired;
            mutated_ = true;
          } else {
            result = &expected;
          }
        } else if (it->second == expected) {
          it->second = desired;
          mutated_ = true;
        } else {
          result = &it->second;
        }
        reply(c, std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk)).bytes(*result))
                     .finish());
        break;
      }
      case Op::kCheck: {
        std::vector<std::string> keys = d.keys();
        bool all = missing(keys).empty();
        reply(c, std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk)).u8(all ? 1 : 0))
                     .finish());
        break;
      }
      case Op::kDelete: {
        bool existed = data_.erase(d.str()) > 0;
        reply(c,
              std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk)).u8(existed ? 1 : 0))
                  .finish());
        break;
      }
      case Op::kWait: {
        std::vector<std::string> keys = d.keys();
        uint64_t ms = d.u64();
        park(c, op, std::move(keys), ms);
        break;
      }
      case Op::kHeartbeat: {
        c.replica = d.str();
        quorum_.heard(c.replica, Clock::now());
        quorum_changed_ = true;
        reply(c, ok());
        break;
      }
      case Op::kQuorum: {
        QuorumRequest r;
        r.id = d.str();
        r.step = d.i64();
        r.last_step_failed = d.u8() != 0;
        r.min_replicas = static_cast<int>(d.u32());
        r.join_timeout = std::chrono::milliseconds(d.u64());
        r.heartbeat_timeout = std::chrono::milliseconds(d.u64());
        const uint64_t ms = d.u64();
        c.replica = r.id;
        quorum_.request(r, Clock::now());
        quorum_changed_ = true;
        c.parked = true;
        c.parked_op = op;
        c.parked_keys.clear();
        c.parked_deadline = deadline_after_ms(ms);
        break;
      }
      case Op::kNumKeys:
        reply(c, std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kOk)).u64(data_.size()))
                     .finish());
        break;
      default:
        throw IoError(fmt::format("unknown request op {}", static_cast<int>(op)));
    }
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) {
      if (!data_.count(k)) out.push_back(k);
    }
    return out;
  }

  void park(Conn& c, Op op, std::vector<std::string> keys, uint64_t ms) {
    c.parked = true;
    c.parked_op = op;
    c.parked_keys = std::move(keys);
    c.parked_deadline = deadline_after_ms(ms);
    try_unpark(c, false);
  }

  // Replies to c's parked request when its keys exist (or, when expired, with
  // the missing ones). Returns whether the request was answered.
  bool try_unpark(Conn& c, bool expired) {
    if (c.parked_op == Op::kQuorum) {
      // Answered by resolve_quorum; here only its deadline.
      if (!expired) return false;
      c.parked = false;
      quorum_.withdraw(c.replica);
      std::vector<std::string> waited;
      for (const auto& [fd, other] : conns_)
        if (!other->replica.empty() && other->replica != c.replica &&
            quorum_.is_live(other->replica, Clock::now()) && !quorum_.has_request(other->replica))
          waited.push_back("a quorum request of live replica " + other->replica);
      if (waited.empty()) waited.push_back("min_replicas replicas asking for a quorum");
      std::sort(waited.begin(), waited.end());
      waited.erase(std::unique(waited.begin(), waited.end()), waited.end());
      reply(c, std::move(proto::Encoder().u8(static_cast<uint8_t>(Status::kTimeout)).keys(waited))
                   .finish());
      return true;
    }
    std::vector<std::string> miss = missing(c.parked_keys);
    if (!miss.empty() && !expired) return false;
    c.parked = false;
    proto::Encoder e;
    if (!miss.empty()) {
      e.u8(static_cast<uint8_t>(Status::kTimeout)).keys(miss);
    } else {
      e.u8(static_cast<uint8_t>(Status::kOk));
      if (c.parked_op == Op::kGet) e.bytes(data_.at(c.parked_keys[0]));
    }
    c.parked_keys.clear();
    reply(c, std::move(e).finish());
    return true;
  }

  void expire() {
    auto now = Clock::now();
    std::vector<int> fds;
    for (auto& [fd, c] : conns_) fds.push_back(fd);
    for (int fd : fds) {
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      if (!c.authed && now >= c.accepted + options_.handshake_timeout) {
        close_conn(c);
      } else if (c.parked && now >= c.parked_deadline) {
        try_unpark(c, true);
        if (conns_.count(fd)) process(c);
      }
    }
  }

  void resolve_parked() {
    while (mutated_) {
      mutated_ = false;
      std::vector<int> fds;
      for (auto& [fd, c] : conns_) {
        if (c->parked) fds.push_back(fd);
      }
      for (int fd : fds) {
        auto it = conns_.find(fd);
        if (it == conns_.end() || !it->second->parked) continue;
        if (try_unpark(*it->second, false) && conns_.count(fd)) process(*conns_.at(fd));
      }
    }
  }

  // Answers every request of a quorum that formed.
  void resolve_quorum() {
    if (!quorum_changed_ && !quorum_.next_deadline(Clock::now())) return;
    quorum_changed_ = false;
    std::optional<Quorum> q = quorum_.try_form(Clock::now());
    if (!q) return;
    proto::Encoder e;
    e.u8(static_cast<uint8_t>(Status::kOk)).u64(q->id).u64(q->group_epoch);
    e.u32(static_cast<uint32_t>(q->members.size()));
    for (const QuorumMember& m : q->members) e.str(m.id).i64(m.step);
    const std::vector<uint8_t> frame = std::move(e).finish();
    std::vector<int> fds;
    for (auto& [fd, c] : conns_)
      if (c->parked && c->parked_op == Op::kQuorum) fds.push_back(fd);
    for (int fd : fds) {
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      bool member = false;
      for (const QuorumMember& m : q->members) member = member || m.id == c.replica;
      if (!member) continue;
      c.parked = false;
      reply(c, frame);
      if (conns_.count(fd)) process(c);
    }
  }

  void reply(Conn& c, std::vector<uint8_t> frame) {
    if (c.out_pos == c.out.size()) {
      c.out = std::move(frame);
      c.out_pos = 0;
    } else {
      c.out.insert(c.out.end(), frame.begin(), frame.end());
    }
    flush(c);
  }

  void flush(Conn& c) {
    while (c.out_pos < c.out.size()) {
      ssize_t w = ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        c.out_pos += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_want_write(c, true);
        return;
      }
      close_conn(c);
      return;
    }
    c.out.clear();
    c.out_pos = 0;
    set_want_write(c, false);
    if (c.closing) close_conn(c);
  }

  void set_want_write(Conn& c, bool want) {
    if (c.want_write == want) return;
    c.want_write = want;
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
    ev.data.fd = c.fd.get();
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  }

  UniqueFd listener_;
  TcpStoreServerOptions options_;
  std::string token_;
  std::atomic<int>* clients_;
  std::atomic<int>* refused_;
  UniqueFd epoll_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::map<std::string, Bytes> data_;
  bool mutated_ = false;
  QuorumState quorum_;
  bool quorum_changed_ = false;
};

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options)
    : TcpStoreServer(transport::listen_tcp(options.bind_host, options.port, nullptr), options) {}

TcpStoreServer::TcpStoreServer(UniqueFd listener, TcpStoreServerOptions options) {
  uint16_t bound = 0;
  {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw_errno("TcpStore server: getsockname", errno);
    }
    bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  port_ = bound;
  int flags = ::fcntl(listener.get(), F_GETFL);
  ::fcntl(listener.get(), F_SETFL, flags | O_NONBLOCK);
  loop_ =
      std::make_unique<Loop>(std::move(listener), std::move(options), &num_clients_, &num_refused_);
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() {
  loop_->stop();
  if (thread_.joinable()) thread_.join();
}

void TcpStoreServer::run() noexcept {
  // Signals belong to the threads that handle them (the launcher uses signalfd).
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  try {
    loop_->run();
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mu_);
    error_ = std::current_exception();
  }
}

void TcpStoreServer::check() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace cohort::rendezvous
