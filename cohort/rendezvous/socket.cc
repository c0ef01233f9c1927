#include "cohort/rendezvous/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/transport/socket.h"

namespace cohort::rendezvous::net {

int poll_timeout_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

UniqueFd listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno("TcpStore server: socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  std::string h = host.empty() || host == "*" ? "0.0.0.0" : host;
  if (h == "localhost") h = "127.0.0.1";
  if (::inet_pton(AF_INET, h.c_str(), &addr.sin_addr) != 1) {
    // A host name: resolve to its first IPv4 address.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(h.c_str(), nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
      throw InvalidArgument(fmt::format("TcpStore server: cannot resolve bind address '{}': {}",
                                        host, ::gai_strerror(rc)));
    }
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw_errno(fmt::format("TcpStore server: bind {}:{}", h, port), errno);
  }
  if (::listen(fd.get(), 1024) != 0) throw_errno("TcpStore server: listen", errno);
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw_errno("TcpStore server: getsockname", errno);
  }
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  return fd;
}

namespace {

// One non-blocking connect attempt bounded by deadline; returns errno (0 on success).
int try_connect(const addrinfo* ai, Clock::time_point deadline, UniqueFd* out) {
  UniqueFd fd(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{fd.get(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return ETIMEDOUT;
    if (rc < 0) return errno;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  transport::set_nodelay(fd.get());  // and liveness probes: a dead master must show
  *out = std::move(fd);
  return 0;
}

}  // namespace

UniqueFd connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline) {
  std::string last_error = "no attempt made";
  auto pause = std::chrono::milliseconds(10);
  const auto start = Clock::now();
  auto next_report = start + std::chrono::seconds(5);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port_str = std::to_string(port);
    int rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
    if (rc == 0) {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        UniqueFd fd;
        int err = try_connect(ai, deadline, &fd);
        if (err == 0) {
          ::freeaddrinfo(res);
          return fd;
        }
        last_error = std::strerror(err);
      }
      ::freeaddrinfo(res);
    } else {
      last_error = ::gai_strerror(rc);
    }
    auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError(fmt::format(
          "TcpStore: could not connect to the store at {}:{} in {} s (last error: {}; is the "
          "master (node 0's `cohort run`, or rank 0) running, and is MASTER_ADDR reachable from "
          "this host?)",
          host, port, std::chrono::duration_cast<std::chrono::seconds>(now - start).count(),
          last_error));
    }
    if (now >= next_report) {
      // Someone is waiting for this process: say what it is trying.
      log(LogLevel::kWarn, "TcpStore: still trying to reach the store at {}:{} after {} s ({})",
          host, port, std::chrono::duration_cast<std::chrono::seconds>(now - start).count(),
          last_error);
      next_report = now + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline,
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
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int rc = ::poll(&pf, 1, poll_timeout_ms(deadline));
      if (rc == 0) throw TimeoutError(what + ": timed out sending to the store server");
      if (rc < 0 && errno != EINTR) throw_errno(what + ": poll", errno);
      continue;
    }
    throw PeerLost(errno_message(what + ": lost connection to the store server", errno));
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    int rc = ::poll(&pf, 1, poll_timeout_ms(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw_errno(what + ": poll", errno);
    }
    if (rc == 0) throw TimeoutError(what + ": timed out waiting for the store server's reply");
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw PeerLost(what + ": the store server closed the connection");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    throw PeerLost(errno_message(what + ": lost connection to the store server", errno));
  }
}

}  // namespace cohort::rendezvous::net
