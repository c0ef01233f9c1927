#include "cohort/transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::transport {

int poll_timeout_ms(Clock::time_point deadline, int cap_ms) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, cap_ms));
}

UniqueFd listen_tcp(uint16_t* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno("transport: socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw_errno("transport: bind", errno);
  }
  if (::listen(fd.get(), 512) != 0) throw_errno("transport: listen", errno);
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw_errno("transport: getsockname", errno);
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw_errno("transport: fcntl(O_NONBLOCK)", errno);
  }
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  set_liveness(fd);
}

void set_liveness(int fd) {
  // A peer whose host died or whose link was cut sends no FIN or RST: without
  // these a quiet connection (a control channel, a wait for a slow peer)
  // would look alive until the op time-out. Probes after 5 s of silence, 3
  // unanswered 2 s apart end it; unacknowledged data ends it after 15 s.
  int on = 1, idle = 5, interval = 2, count = 3;
  unsigned user_timeout_ms = 15000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

UniqueFd connect_tcp(const std::string& ip, uint16_t port, Clock::time_point deadline,
                     const std::string& what) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    throw InvalidArgument(fmt::format("{}: bad IPv4 address '{}'", what, ip));
  }
  int delay_ms = 1;
  int last_err = 0;
  while (true) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) throw_errno(what + ": socket", errno);
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&p, 1, poll_timeout_ms(deadline, 1000));
      } while ((pr < 0 && errno == EINTR) || (pr == 0 && Clock::now() < deadline));
      if (pr == 0) break;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      int flags = ::fcntl(fd.get(), F_GETFL, 0);
      ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
      set_nodelay(fd.get());
      return fd;
    }
    if (err != 0) last_err = err;
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EAGAIN) {
      throw IoError(errno_message(fmt::format("{}: connect to {}:{}", what, ip, port), err));
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 100);
  }
  throw TimeoutError(fmt::format("{}: timed out connecting to {}:{}{}", what, ip, port,
                                 last_err != 0
                                     ? " (last error: " + std::string(std::strerror(last_err)) + ")"
                                     : std::string(" (no answer)")));
}

UniqueFd accept_tcp(int listen_fd, Clock::time_point deadline, const std::string& what) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    int pr = ::poll(&p, 1, poll_timeout_ms(deadline, 1000));
    if (pr < 0 && errno != EINTR) throw_errno(what + ": poll", errno);
    if (pr > 0) {
      int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        set_nodelay(fd);
        return UniqueFd(fd);
      }
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        throw_errno(what + ": accept", errno);
      }
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError(fmt::format("{}: timed out waiting for connections", what));
    }
  }
}

void write_all(int fd, const void* data, size_t n, Clock::time_point deadline,
               const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      throw PeerLost(errno_message(what + ": send", errno));
    }
    pollfd pf{fd, POLLOUT, 0};
    int pr = ::poll(&pf, 1, poll_timeout_ms(deadline, 1000));
    if (pr == 0 && Clock::now() >= deadline) throw TimeoutError(what + ": timed out sending");
  }
}

void read_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw PeerLost(what + ": connection closed by peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw PeerLost(errno_message(what + ": recv", errno));
    }
    pollfd pf{fd, POLLIN, 0};
    int pr = ::poll(&pf, 1, poll_timeout_ms(deadline, 1000));
    if (pr == 0 && Clock::now() >= deadline) throw TimeoutError(what + ": timed out receiving");
  }
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id.empty() ? "unknown" : id;
}

}  // namespace cohort::transport
