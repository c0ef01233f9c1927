// TcpTraffic: the bytes this process has sent and received over TCP so far,
// summed over its open TCP sockets (Linux TCP_INFO: tcpi_bytes_acked and
// tcpi_bytes_received). What the parameter-server benchmark compares: it
// counts what really crossed the wire, whatever library moved it (the RPC
// layer, the collectives), without hooks in either. Sockets closed before a
// reading are not counted, so read before and after a stretch of steps.
#pragma once

#include <cstdint>

namespace cohort::bench {

struct TcpTraffic {
  uint64_t sent = 0;
  uint64_t received = 0;
};

TcpTraffic tcp_traffic();

}  // namespace cohort::bench
