// Small socket helpers for the TCP transport and the bootstrap: listening,
// connecting with a deadline, and whole-buffer reads/writes with a deadline.
// EINTR is handled here once. Every blocking call takes a deadline and throws
// cohort::TimeoutError after it; a closed or reset connection throws
// cohort::PeerLost with `what` in the message.
//
// Thread safety: free functions over descriptors the caller owns.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cohort/base/unique_fd.h"

namespace cohort::transport {

using Clock = std::chrono::steady_clock;

// A TCP listening socket on all interfaces, port chosen by the kernel.
UniqueFd listen_tcp(uint16_t* port);
// Connects to ip:port, retrying refused connections until deadline; the
// TimeoutError names the address and the last connect error.
UniqueFd connect_tcp(const std::string& ip, uint16_t port, Clock::time_point deadline,
                     const std::string& what);
// Accepts one connection, waiting until deadline.
UniqueFd accept_tcp(int listen_fd, Clock::time_point deadline, const std::string& what);

void set_nonblocking(int fd);
// TCP_NODELAY, and set_liveness.
void set_nodelay(int fd);
// Keepalive probes and TCP_USER_TIMEOUT, so a dead host or a cut link ends
// the connection within about 15 s even when it is quiet.
void set_liveness(int fd);

// Writes/reads exactly n bytes (the fd may be blocking or not).
void write_all(int fd, const void* data, size_t n, Clock::time_point deadline,
               const std::string& what);
void read_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);

// Which address to advertise to peers: network.h.
std::string host_name();
// /proc/sys/kernel/random/boot_id: equal on two processes iff same kernel instance.
std::string boot_id();

// Milliseconds left until deadline (>= 0), capped at cap_ms.
int poll_timeout_ms(Clock::time_point deadline, int cap_ms);

}  // namespace cohort::transport
