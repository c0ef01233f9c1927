// The one socket module: TCP over IPv4 and IPv6 for the transport, the
// rendezvous store and the launchers. Listening, connecting with back-off
// until a deadline, accepting, and whole-buffer reads/writes.
//
// One meaning of a time-out: every blocking call takes a deadline (a point on
// the steady clock, never a duration) and waits in one poll() up to it, then
// throws cohort::TimeoutError naming `what`. A closed or reset connection
// throws cohort::PeerLost with `what` in the message. EINTR is handled here,
// once (poll_until), and nowhere else.
//
// Addresses are names or literals of either family ("10.0.0.1", "::1",
// "node7"); connect_tcp tries every address getaddrinfo gives. A listener on
// "" binds every interface of both families (IPv4 only where the host has no
// IPv6).
//
// Thread safety: free functions over descriptors the caller owns.
#pragma once

#include <poll.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cohort/base/unique_fd.h"

namespace cohort::transport {

using Clock = std::chrono::steady_clock;

// Milliseconds from now until deadline for poll(), rounded up: >= 0 and at
// most cap_ms (a caller that also watches something else wakes at the cap).
int poll_timeout_ms(Clock::time_point deadline, int cap_ms = INT_MAX);

// poll() until one of fds is ready or deadline passes, retrying after EINTR;
// returns how many are ready (0: the deadline passed). Throws IoError naming
// `what` when poll itself fails.
int poll_until(pollfd* fds, size_t n, Clock::time_point deadline, const std::string& what);

// A TCP listening socket on host:port with SO_REUSEADDR (port 0: the kernel
// picks one); writes the bound port to *bound_port when given. host "" or "*"
// binds every interface of both families, "0.0.0.0" every IPv4 one, "::"
// every interface of both, anything else the first address it resolves to.
UniqueFd listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port);
// Every interface, a port the kernel picks.
UniqueFd listen_tcp(uint16_t* port);

struct ConnectOptions {
  std::string what;  // the operation, first in every error ("TcpStore", "transport: rank 3 ...")
  std::string peer;  // who listens there ("the store"), or "" when the address says enough
  // What an unreachable network or host, or a name that does not resolve,
  // means: the peer's host may still be coming up, so try until the deadline
  // (the store's clients); or a wrong address, so throw IoError at once (a
  // caller that tries a peer's advertised addresses in turn).
  bool retry_unreachable = false;
};

// Connects to host:port, trying every address it resolves to, and retrying a
// refused or timed-out attempt with back-off (1 ms doubling to 100 ms) until
// deadline (the server may not be up yet). Every 5 s of trying it logs a
// warning with the last error; at the deadline it throws TimeoutError naming
// the address and the last error. The socket is blocking, with TCP_NODELAY
// and the liveness probes (set_liveness) set.
UniqueFd connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline,
                     const ConnectOptions& options);
UniqueFd connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline,
                     const std::string& what);
// Accepts one connection (blocking, TCP_NODELAY and liveness set), waiting until deadline.
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

// True when host names the loopback interface ("localhost", "127.x.y.z", "::1").
bool is_loopback(const std::string& host);
// What a server that clients reach at `host` binds: host's loopback address
// when it is one (so a one-host job opens no port to the network), else ""
// (every interface).
std::string bind_host_for(const std::string& host);

// Which address to advertise to peers: network.h.
std::string host_name();
// /proc/sys/kernel/random/boot_id: equal on two processes iff same kernel instance.
std::string boot_id();

}  // namespace cohort::transport
