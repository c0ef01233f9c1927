#include "cohort/transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::transport {
namespace {

// getaddrinfo's answer, freed on every path.
struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port for a stream socket; on failure returns null and sets *gai_error.
AddrInfoList resolve(const char* host, uint16_t port, int flags, int* gai_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  *gai_error = ::getaddrinfo(host, port_str.c_str(), &hints, &res);
  if (*gai_error != 0) return nullptr;
  return AddrInfoList(res);
}

std::string gai_message(int gai_error) {
  return gai_error == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(gai_error);
}

// "[::1]:80" or "10.0.0.1:80": how messages name an address.
std::string host_port(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

// Binds and listens on one address; returns errno (0 on success).
int try_listen(int family, const sockaddr* addr, socklen_t len, bool dual_stack, UniqueFd* out) {
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (family == AF_INET6) {
    // "::" serves IPv4 clients too (as mapped addresses) whatever the host's
    // bindv6only default; a literal IPv6 address serves only its own family.
    int v6only = dual_stack ? 0 : 1;
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
  }
  if (::bind(fd.get(), addr, len) != 0) return errno;
  if (::listen(fd.get(), 1024) != 0) return errno;
  *out = std::move(fd);
  return 0;
}

uint16_t bound_port_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    throw_errno("listen_tcp: getsockname", errno);
  }
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

// Errors after which another attempt may succeed: nobody listens yet, the
// listener's backlog is full, or the SYN went unanswered.
bool worth_retrying(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EAGAIN || err == ECONNRESET ||
         err == ECONNABORTED || err == EINTR;
}
bool unreachable(int err) {
  return err == ENETUNREACH || err == EHOSTUNREACH || err == ENETDOWN || err == EHOSTDOWN ||
         err == EADDRNOTAVAIL;
}

// One non-blocking connect attempt, waiting up to deadline; returns errno (0 on success).
int try_connect(const addrinfo* ai, Clock::time_point deadline, const std::string& what,
                UniqueFd* out) {
  UniqueFd fd(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!fd.valid()) return errno;
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{fd.get(), POLLOUT, 0};
    if (poll_until(&p, 1, deadline, what) == 0) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  int flags = ::fcntl(fd.get(), F_GETFL, 0);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  set_nodelay(fd.get());  // and liveness probes: a dead peer must show
  *out = std::move(fd);
  return 0;
}

}  // namespace

int poll_timeout_ms(Clock::time_point deadline, int cap_ms) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left, cap_ms));
}

int poll_until(pollfd* fds, size_t n, Clock::time_point deadline, const std::string& what) {
  while (true) {
    const int rc = ::poll(fds, static_cast<nfds_t>(n), poll_timeout_ms(deadline));
    if (rc >= 0) return rc;
    if (errno != EINTR) throw_errno(what + ": poll", errno);
  }
}

UniqueFd listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port) {
  const std::string where = host_port(host.empty() ? "*" : host, port);
  UniqueFd fd;
  int err = 0;
  if (host.empty() || host == "*" || host == "::") {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(port);
    err = try_listen(AF_INET6, reinterpret_cast<sockaddr*>(&any6), sizeof(any6), true, &fd);
    if (err == EAFNOSUPPORT || err == EPROTONOSUPPORT || err == EADDRNOTAVAIL) {
      // A host without IPv6: every IPv4 interface.
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(port);
      err = try_listen(AF_INET, reinterpret_cast<sockaddr*>(&any4), sizeof(any4), false, &fd);
    }
  } else {
    int gai = 0;
    AddrInfoList list = resolve(host.c_str(), port, AI_PASSIVE, &gai);
    if (!list) {
      throw InvalidArgument(fmt::format(
          "listen_tcp: cannot resolve the address to listen on '{}': {}", host, gai_message(gai)));
    }
    err = EADDRNOTAVAIL;
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      err = try_listen(ai->ai_family, ai->ai_addr, ai->ai_addrlen, false, &fd);
      if (err == 0) break;
    }
  }
  if (err != 0) throw_errno(fmt::format("listen_tcp: listen on {}", where), err);
  if (bound_port) *bound_port = bound_port_of(fd.get());
  return fd;
}

UniqueFd listen_tcp(uint16_t* port) { return listen_tcp("", 0, port); }

UniqueFd connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline,
                     const ConnectOptions& o) {
  const std::string target =
      (o.peer.empty() ? std::string() : o.peer + " at ") + host_port(host, port);
  std::string last_error = "no attempt made";
  auto pause = std::chrono::milliseconds(1);
  const auto start = Clock::now();
  auto next_report = start + std::chrono::seconds(5);
  auto seconds_since_start = [&](Clock::time_point now) {
    return std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
  };
  while (true) {
    int gai = 0;
    AddrInfoList list = resolve(host.c_str(), port, 0, &gai);
    if (!list) {
      last_error = gai_message(gai);
      // A name that does not resolve (yet) is as good as an unreachable host.
      if (!o.retry_unreachable && gai != EAI_AGAIN) {
        throw IoError(fmt::format("{}: cannot resolve {}: {}", o.what, target, last_error));
      }
    }
    // One address that may yet answer (of a name's IPv6 and IPv4 ones, say)
    // is reason to try again; when none may, the error is final.
    int final_error = 0;
    bool may_answer = !list;
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd fd;
      const int err = try_connect(ai, deadline, o.what, &fd);
      if (err == 0) return fd;
      last_error = std::strerror(err);
      if (worth_retrying(err) || (o.retry_unreachable && unreachable(err))) {
        may_answer = true;
      } else {
        final_error = err;
      }
    }
    if (!may_answer) {
      throw IoError(errno_message(fmt::format("{}: connect to {}", o.what, target), final_error));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      throw TimeoutError(fmt::format("{}: could not connect to {} in {} s (last error: {})", o.what,
                                     target, seconds_since_start(now), last_error));
    }
    if (now >= next_report) {
      // Someone is waiting for this process: say what it is trying.
      log(LogLevel::kWarn, "{}: still trying to reach {} after {} s ({})", o.what, target,
          seconds_since_start(now), last_error);
      next_report = now + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

UniqueFd connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline,
                     const std::string& what) {
  ConnectOptions o;
  o.what = what;
  return connect_tcp(host, port, deadline, o);
}

UniqueFd accept_tcp(int listen_fd, Clock::time_point deadline, const std::string& what) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    if (poll_until(&p, 1, deadline, what) == 0) {
      throw TimeoutError(fmt::format("{}: timed out waiting for connections", what));
    }
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_nodelay(fd);
      return UniqueFd(fd);
    }
    // The connection went away before it was taken, or another thread took it.
    if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) {
      throw_errno(what + ": accept", errno);
    }
  }
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

void write_all(int fd, const void* data, size_t n, Clock::time_point deadline,
               const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw PeerLost(errno_message(what + ": lost the connection (send)", errno));
    }
    pollfd pf{fd, POLLOUT, 0};
    if (poll_until(&pf, 1, deadline, what) == 0) throw TimeoutError(what + ": timed out sending");
  }
}

void read_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw PeerLost(what + ": the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw PeerLost(errno_message(what + ": lost the connection (recv)", errno));
    }
    pollfd pf{fd, POLLIN, 0};
    if (poll_until(&pf, 1, deadline, what) == 0) {
      throw TimeoutError(what + ": timed out receiving");
    }
  }
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string bind_host_for(const std::string& host) {
  if (!is_loopback(host)) return "";
  return host == "::1" ? "::1" : "127.0.0.1";
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
