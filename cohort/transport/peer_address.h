// The one line a rank publishes so that its peers can reach it ("cohort2 ..."),
// and the hello frames that open each connection. Parsing takes text from
// the rendezvous store and bytes from the network, so it accepts any input:
// a malformed line throws cohort::InvalidArgument naming the rank and the
// text, never reads out of bounds.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::transport {

struct PeerAddress {
  int rank = -1;
  std::string host;              // host name
  std::string boot;              // kernel boot id
  std::string netns;             // network namespace (network.h)
  std::vector<std::string> ips;  // IPv4 addresses to try, best first
  uint16_t port = 0;
  uint64_t token = 0;  // presented in every hello to this rank
  bool force_tcp = true;
  std::string shm = "-";  // shared-memory segment name, "-" for none
  int64_t pid = 0;
  uint64_t probe = 0;  // address of the memory probe in that process
};

std::string format_peer_address(const PeerAddress& a);
PeerAddress parse_peer_address(const std::string& text, int expected_rank);

// Same kernel, host name and network namespace: 127.0.0.1 reaches the peer
// and shared memory may (the segment still has to open).
bool same_host(const PeerAddress& a, const PeerAddress& b);
// Both offer shared memory and run on the same host.
bool shm_candidate(const PeerAddress& me, const PeerAddress& peer);

inline constexpr uint32_t kHelloMagic = 0x4F4C4548;  // "HELO"
inline constexpr uint32_t kAckMagic = 0x4B434148;    // "HACK"
inline constexpr uint32_t kControlChannel = 0;
inline constexpr uint32_t kDataChannel = 1;
// Hello flag: the sender opened the receiver's shared-memory segment.
inline constexpr uint32_t kOpenedYourSegment = 1;

// First frame of every connection, connector -> acceptor.
struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t channel;
  uint32_t flags;
  uint64_t token;
};
static_assert(sizeof(Hello) == 24);

// The acceptor's answer to a control hello: whether it opened the
// connector's segment. Shared memory is used only when both did, so the two
// sides always agree on the transport of their pair.
struct HelloAck {
  uint32_t magic;
  uint32_t flags;
};
static_assert(sizeof(HelloAck) == 8);

// Whether h is a hello a rank `self` of `size` with token `token` accepts
// (a peer above it, a known channel, the job's token). `why` says what is wrong.
bool hello_valid(const Hello& h, int self, int size, uint64_t token, std::string* why);

}  // namespace cohort::transport
