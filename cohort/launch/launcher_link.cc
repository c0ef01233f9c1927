#include "cohort/launch/launcher_link.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "cohort/base/error.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/socket.h"

namespace cohort::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Hello (node k -> node 0): the version line, then token, node, pid, host,
// address, one per line. Reply: "ok" and node 0's pid, host, address, or
// "refused: <why>".
constexpr const char* kVersion = "cohort-launcher-link 1";
constexpr size_t kHelloLines = 6;
constexpr size_t kReplyLines = 4;
constexpr size_t kMaxHandshake = 4096;
constexpr auto kHandshakeLimit = std::chrono::seconds(5);
constexpr char kBeat = '.';
constexpr char kGoodbye = 'b';

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::string describe(int node, const std::string& pid, const std::string& host,
                     const std::string& address) {
  return fmt::format("node {}'s launcher (pid {} on host {}, address {})", node, pid, host,
                     address);
}

// Best effort and never blocking: a full buffer means a stalled peer, which
// the silence limit catches.
void send_byte(int fd, char c) { (void)::send(fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT); }

}  // namespace

LauncherLink::LauncherLink(LauncherLinkOptions options, const std::string& bind_host)
    : o_(std::move(options)) {
  listener_ = transport::listen_tcp(bind_host, 0, &port_);
  transport::set_nonblocking(listener_.get());
  start();
}

LauncherLink::LauncherLink(LauncherLinkOptions options, const std::string& host, uint16_t port,
                           Clock::time_point deadline)
    : o_(std::move(options)), port_(port) {
  const std::string where = fmt::format("node 0's launcher at {}:{}", host, port);
  auto fail = [&](const std::string& why) {
    return IoError(fmt::format("node {} could not link to {}: {}", o_.node_rank, where, why));
  };
  UniqueFd fd;
  std::string reply;
  try {
    transport::ConnectOptions co;
    co.what = fmt::format("node {}", o_.node_rank);
    co.peer = "node 0's launcher";
    co.retry_unreachable = true;  // as the store's clients: node 0's host answered those
    fd = transport::connect_tcp(host, port, deadline, co);
    const std::string hello = fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n", kVersion, o_.token,
                                          o_.node_rank, o_.pid, o_.host, o_.address);
    transport::write_all(fd.get(), hello.data(), hello.size(), deadline, "link hello");
    while (split_lines(reply).size() < kReplyLines && reply.rfind("refused", 0) != 0) {
      char c = 0;
      transport::read_all(fd.get(), &c, 1, deadline, "link reply");
      reply.push_back(c);
      if (reply.size() > kMaxHandshake) throw IoError("its reply is too long");
    }
  } catch (const TimeoutError& e) {
    throw TimeoutError(
        fmt::format("node {} could not link to {}: {}", o_.node_rank, where, e.what()));
  } catch (const Error& e) {
    throw fail(e.what());
  }
  if (reply.rfind("refused", 0) == 0) {
    // Read the rest of the reason (node 0 then closes the connection).
    char buf[256];
    pollfd pfd{fd.get(), POLLIN, 0};
    while (reply.size() < kMaxHandshake &&
           transport::poll_until(&pfd, 1, deadline, "link reply") > 0) {
      const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
    while (!reply.empty() && reply.back() == '\n') reply.pop_back();
    throw fail("it " + reply);
  }
  const std::vector<std::string> lines = split_lines(reply);
  if (lines[0] != "ok") throw fail("unexpected reply '" + lines[0] + "'");
  transport::set_nonblocking(fd.get());
  Peer p;
  p.node = 0;
  p.who = describe(0, lines[1], lines[2], lines[3]);
  p.fd = std::move(fd);
  p.last_heard = Clock::now();
  peers_.push_back(std::move(p));
  linked_nodes_.push_back(0);
  start();
}

LauncherLink::~LauncherLink() { stop_thread(); }

void LauncherLink::stop_thread() {
  stop_.store(true);
  if (wake_write_.valid()) {
    const char c = 'x';
    [[maybe_unused]] ssize_t w = ::write(wake_write_.get(), &c, 1);
  }
  if (thread_.joinable()) thread_.join();
}

void LauncherLink::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("launcher link: pipe", errno);
  wake_read_.reset(fds[0]);
  wake_write_.reset(fds[1]);
  lost_event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!lost_event_.valid()) throw_errno("launcher link: eventfd", errno);
  thread_ = std::thread([this] { run(); });
}

bool LauncherLink::linked(int node) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(linked_nodes_.begin(), linked_nodes_.end(), node) != linked_nodes_.end();
}

std::optional<std::string> LauncherLink::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

bool LauncherLink::is_lost(int node) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(lost_nodes_.begin(), lost_nodes_.end(), node) != lost_nodes_.end();
}

void LauncherLink::leave() {
  stop_thread();
  for (Peer& p : peers_) {
    if (p.node < 0 || !p.fd.valid()) continue;
    send_byte(p.fd.get(), kGoodbye);
    // FIN after the goodbye; the socket stays open (a close with unread
    // heartbeats would reset it) until this object goes.
    ::shutdown(p.fd.get(), SHUT_WR);
  }
}

void LauncherLink::mark_lost(Peer& p, const std::string& what) {
  p.fd.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_nodes_.push_back(p.node);
    if (!lost_) lost_ = what;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(lost_event_.get(), &one, sizeof(one));
}

void LauncherLink::accept_peers() {
  while (true) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a connection that went away before accept
    Peer p;
    p.fd.reset(fd);
    p.last_heard = Clock::now();
    peers_.push_back(std::move(p));
  }
}

void LauncherLink::handshake(Peer& p) {
  char buf[512];
  ssize_t n = ::recv(p.fd.get(), buf, sizeof(buf), 0);
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    p.fd.reset();  // went away before saying who it is: not a launcher of this job
    return;
  }
  p.inbox.append(buf, static_cast<size_t>(n));
  const std::vector<std::string> lines = split_lines(p.inbox);
  if (lines.size() < kHelloLines) {
    if (p.inbox.size() > kMaxHandshake) p.fd.reset();
    return;
  }
  auto refuse = [&](const std::string& why) {
    const std::string r = "refused: " + why + "\n";
    (void)::send(p.fd.get(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    p.fd.reset();
  };
  if (lines[0] != kVersion) return refuse("speaks '" + lines[0] + "', not '" + kVersion + "'");
  if (!rendezvous::tokens_equal(lines[1], o_.token))
    return refuse("holds another COHORT_TOKEN (start every node with the job's)");
  char* end = nullptr;
  const long node = std::strtol(lines[2].c_str(), &end, 10);
  if (end == lines[2].c_str() || *end != '\0' || node < 1 || node >= o_.nnodes)
    return refuse(fmt::format("names node '{}', not one of 1..{}", lines[2], o_.nnodes - 1));
  if (linked(static_cast<int>(node)) || is_lost(static_cast<int>(node)))
    return refuse(fmt::format("names node {}, which is already linked", node));
  // Linked before the reply: the node announces itself in the store only
  // once it has the reply, and node 0 then finds it linked.
  p.node = static_cast<int>(node);
  p.who = describe(p.node, lines[3], lines[4], lines[5]);
  p.inbox.clear();
  p.last_heard = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    linked_nodes_.push_back(p.node);
  }
  const std::string reply = fmt::format("ok\n{}\n{}\n{}\n", o_.pid, o_.host, o_.address);
  // A fresh socket's buffer takes the reply whole; a peer gone already is
  // seen as one that closed its link.
  (void)::send(p.fd.get(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void LauncherLink::read_from(Peer& p) {
  char buf[256];
  const ssize_t n = ::recv(p.fd.get(), buf, sizeof(buf), 0);
  if (n > 0) {
    p.last_heard = Clock::now();
    if (std::find(buf, buf + n, kGoodbye) != buf + n) p.goodbye = true;
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (p.goodbye) {
    p.fd.reset();  // it left on purpose
    return;
  }
  // EOF or a reset (a dead process's socket with unread heartbeats): the same.
  mark_lost(
      p, fmt::format("{} died: its link to node {} closed without a goodbye", p.who, o_.node_rank));
}

void LauncherLink::run() {
  auto next_beat = Clock::now();
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_beat) {
      for (Peer& p : peers_)
        if (p.node >= 0 && p.fd.valid() && !p.goodbye) send_byte(p.fd.get(), kBeat);
      next_beat = now + o_.heartbeat;
    }
    for (Peer& p : peers_) {
      if (!p.fd.valid() || p.goodbye) continue;
      if (p.node < 0) {
        if (now - p.last_heard > kHandshakeLimit) p.fd.reset();
      } else if (now - p.last_heard > o_.silence_limit) {
        mark_lost(p, fmt::format("lost {}: node {} heard nothing from it for {} ms (the link is "
                                 "cut, its host is down or the launcher is stopped)",
                                 p.who, o_.node_rank, o_.silence_limit.count()));
      }
    }
    std::erase_if(peers_, [](const Peer& p) { return !p.fd.valid(); });

    std::vector<pollfd> fds;
    fds.push_back({wake_read_.get(), POLLIN, 0});
    if (listener_.valid()) fds.push_back({listener_.get(), POLLIN, 0});
    const size_t first_peer = fds.size();
    for (Peer& p : peers_) fds.push_back({p.fd.get(), POLLIN, 0});
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next_beat - Clock::now()).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0)));
    if (rc <= 0) continue;
    if (listener_.valid() && fds[1].revents) accept_peers();
    // accept_peers() may grow peers_; only the ones polled are looked at.
    for (size_t i = first_peer; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Peer& p = peers_[i - first_peer];
      p.node < 0 ? handshake(p) : read_from(p);
    }
  }
}

}  // namespace cohort::launch
