#include "cohort/transport/tcp_pair.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "cohort/base/error.h"
#include "cohort/transport/socket.h"

namespace cohort::transport {

TcpPair::TcpPair(int rank, int peer, UniqueFd fd) : Pair(rank, peer), fd_(std::move(fd)) {
  set_nonblocking(fd_.get());
  set_nodelay(fd_.get());
}

void TcpPair::lost(const char* what, int err) {
  std::string msg =
      err == 0
          ? fmt::format("rank {}: connection to rank {} closed by the peer ({})", rank(), peer(),
                        what)
          : errno_message(
                fmt::format("rank {}: connection to rank {} lost ({})", rank(), peer(), what), err);
  throw PeerLost(msg);
}

size_t TcpPair::write_some(const void* data, size_t n) {
  if (n == 0) return 0;
  while (true) {
    ssize_t w = ::send(fd_.get(), data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return static_cast<size_t>(w);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    lost("send", errno);
  }
}

size_t TcpPair::write_gather(std::span<const Slice> slices) {
  iovec iov[16];
  size_t n = 0;
  for (const Slice& s : slices) {
    if (n == 16) break;
    if (s.size > 0) iov[n++] = {const_cast<void*>(s.data), s.size};
  }
  if (n == 0) return 0;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n;
  while (true) {
    ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return static_cast<size_t>(w);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    lost("sendmsg", errno);
  }
}

size_t TcpPair::read_some(void* data, size_t n) {
  if (n == 0) return 0;
  while (true) {
    ssize_t r = ::recv(fd_.get(), data, n, MSG_DONTWAIT);
    if (r > 0) return static_cast<size_t>(r);
    if (r == 0) lost("recv", 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    lost("recv", errno);
  }
}

bool TcpPair::readable() {
  pollfd p{fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool TcpPair::writable() {
  pollfd p{fd_.get(), POLLOUT, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace cohort::transport
