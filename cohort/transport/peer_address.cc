#include "cohort/transport/peer_address.h"

#include <fmt/format.h>

#include <sstream>

#include "cohort/base/error.h"

namespace cohort::transport {

std::string format_peer_address(const PeerAddress& a) {
  std::string ips;
  for (const std::string& ip : a.ips) ips += (ips.empty() ? "" : ",") + ip;
  return fmt::format("cohort2 {} {} {} {} {} {} {} {} {} {} {}", a.rank, a.host, a.boot, a.netns,
                     ips, a.port, a.token, a.force_tcp ? 1 : 0, a.shm, a.pid, a.probe);
}

PeerAddress parse_peer_address(const std::string& text, int expected_rank) {
  std::istringstream in(text);
  PeerAddress a;
  std::string version, ips;
  int force = 1;
  unsigned port = 0;
  in >> version >> a.rank >> a.host >> a.boot >> a.netns >> ips >> port >> a.token >> force >>
      a.shm >> a.pid >> a.probe;
  std::string rest;
  const bool ok = !in.fail() && !(in >> rest) && version == "cohort2" && a.rank == expected_rank &&
                  port > 0 && port <= 65535 && !ips.empty();
  if (!ok) {
    throw InvalidArgument(fmt::format(
        "transport: bad address published for rank {}: '{}' (expected 'cohort2 <rank> <host> "
        "<boot id> <netns> <ip,...> <port> <token> <force tcp> <shm> <pid> <probe>'; a peer "
        "running another cohort version?)",
        expected_rank, text.substr(0, 200)));
  }
  a.port = static_cast<uint16_t>(port);
  a.force_tcp = force != 0;
  for (size_t start = 0; start <= ips.size();) {
    size_t comma = ips.find(',', start);
    if (comma == std::string::npos) comma = ips.size();
    if (comma > start) a.ips.push_back(ips.substr(start, comma - start));
    start = comma + 1;
  }
  if (a.ips.empty()) {
    throw InvalidArgument(
        fmt::format("transport: address of rank {} lists no IP: '{}'", expected_rank, text));
  }
  return a;
}

bool same_host(const PeerAddress& a, const PeerAddress& b) {
  return a.host == b.host && a.boot == b.boot && a.netns == b.netns;
}

bool shm_candidate(const PeerAddress& me, const PeerAddress& peer) {
  return me.rank != peer.rank && same_host(me, peer) && !me.force_tcp && !peer.force_tcp &&
         me.shm != "-" && peer.shm != "-";
}

bool hello_valid(const Hello& h, int self, int size, uint64_t token, std::string* why) {
  const int p = static_cast<int>(h.rank);
  if (h.magic != kHelloMagic) {
    *why = "not a cohort hello";
  } else if (h.token != token) {
    *why = fmt::format("rank {} presented another job's token (COHORT_TOKEN differs)", h.rank);
  } else if (h.rank >= static_cast<uint32_t>(size) || p <= self) {
    *why = fmt::format("rank {} is not a rank above {} in a job of {}", h.rank, self, size);
  } else if (h.channel > kDataChannel) {
    *why = fmt::format("unknown channel {}", h.channel);
  } else {
    return true;
  }
  return false;
}

}  // namespace cohort::transport
