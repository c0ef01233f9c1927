// Small TCP helpers for the store: listening, connecting with retries until a
// deadline, and whole-buffer send/receive with deadlines. EINTR is handled
// here once. Internal to cohort/rendezvous (the transport layer has its own).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "cohort/base/unique_fd.h"

namespace cohort::rendezvous::net {

using Clock = std::chrono::steady_clock;

// Binds an IPv4 listening socket on host:port (port 0: the kernel picks a free
// one) with SO_REUSEADDR; returns it and writes the bound port to *bound_port.
UniqueFd listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port);

// Connects to host:port, retrying refused/unreachable attempts until deadline
// (the server may not be up yet). Throws TimeoutError naming the address and
// the last error when the deadline passes. The socket is blocking, with
// TCP_NODELAY set.
UniqueFd connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline);

// Sends all n bytes; throws PeerLost if the peer is gone, TimeoutError at deadline.
void send_all(int fd, const void* data, size_t n, Clock::time_point deadline,
              const std::string& what);
// Receives exactly n bytes; throws PeerLost on EOF/reset, TimeoutError at deadline.
void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what);

// Milliseconds from now until deadline for poll(): >= 0, capped at INT_MAX.
int poll_timeout_ms(Clock::time_point deadline);

// True when host names the loopback interface ("localhost", "127.x.y.z", "::1").
bool is_loopback(const std::string& host);

}  // namespace cohort::rendezvous::net
