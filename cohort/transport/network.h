// Which address a rank advertises to its peers, and the options that decide
// it. The default is the local address of this host's route to the master
// (MASTER_ADDR): the address the kernel would use to reach it, hence one the
// peers on that network can reach back. Reading the host name's address
// instead (gloo's habit) gives 127.0.1.1 on Debian and containers, or an
// address on another network, and the job hangs. A multi-host job never
// advertises a loopback address.
//
// Alternatives to the route are kept as candidates (every other non-loopback
// IPv4 address of the host), so a connecting peer can try them in turn.
// Overrides: an interface name (advertise that interface's address, like
// GLOO_SOCKET_IFNAME) or an explicit address. The environment variables
// COHORT_SOCKET_IFNAME, COHORT_ADDR, COHORT_CONNECT_TIMEOUT and the shared-
// memory knobs below are read at the edge (env:// bootstrap), never here.
//
// "Same host" for the transport means the same kernel (boot id), host name
// and network namespace: containers and namespaces on one machine share the
// first two, and 127.0.0.1 in one namespace is not the other's.
//
// Errors: InvalidArgument naming an unknown interface (and listing the ones
// there are) or a malformed address; IoError naming the master when no route
// to it exists.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cohort::transport {

struct NetworkOptions {
  std::string address;      // advertise exactly this IPv4 address ("" = decide)
  std::string interface;    // advertise this interface's IPv4 address ("" = decide)
  std::string master_addr;  // the job's master (MASTER_ADDR); "" = unknown
  uint16_t master_port = 0;
  // How long connecting to and accepting from peers may take in all, and how
  // often a rank that still waits says so.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(120);
  std::chrono::milliseconds report_interval = std::chrono::seconds(5);
  // Same-host peers (endpoint.h): the bytes of each shared-memory ring (a
  // power of two >= 4096), and whether a rank may copy straight out of a
  // peer's memory (process_vm_readv), which the single-copy collectives need.
  // The edge sets them from COHORT_SHM_RING_BYTES and COHORT_SHM_SINGLE_COPY.
  size_t shm_ring_bytes = size_t{1} << 20;
  bool shm_single_copy = true;
};

// The addresses to advertise, best first (see the header comment).
std::vector<std::string> advertised_addresses(const NetworkOptions& options);

// The local address of this host's route to host:port (UDP connect, no packet sent).
std::string route_address(const std::string& host, uint16_t port);
// The IPv4 address of interface `name`.
std::string interface_address(const std::string& name);
// Every IPv4 address of every interface that is up, as "name=address".
std::vector<std::string> interface_list();
bool is_loopback_ip(const std::string& ip);
// Resolves a host name or dotted quad to a dotted quad; "" when it does not resolve.
std::string resolve_ipv4(const std::string& host);
// Identifies this process's network namespace ("net:[4026531992]").
std::string network_namespace();

}  // namespace cohort::transport
