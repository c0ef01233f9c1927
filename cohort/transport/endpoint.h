// Endpoint: the bootstrap half of a Context. A rank makes an Endpoint (a
// listening socket, and a shared-memory segment unless TCP is forced),
// publishes address() to the other ranks (the collectives layer does it
// through the rendezvous store), then calls connect() with every rank's
// address to get its Context.
//
// Addresses: each rank advertises the addresses network.h chooses (by
// default the local end of its route to the master, never loopback in a
// multi-host job); a connecting rank tries them in turn.
//
// Transport choice per peer: shared memory when both ranks are on the same
// host (host name, boot id and network namespace), neither forces TCP, and
// both could open the other's segment (they tell each other in the hello and
// its answer, so both sides always agree); TCP otherwise. A shared-memory
// pair reads the peer's memory directly when network.shm_single_copy allows
// and a probe says it may. Connections: rank i
// connects to every lower rank and accepts from every higher one; each
// connection opens with a hello carrying the acceptor's random token from its
// address, so a stray connection to the port is dropped and cannot join.
//
// Waiting: while peers are missing, a line every report_interval names this
// rank, the ranks it still waits for and the address being tried (with the
// last connect error); after connect_timeout it throws TimeoutError with the
// same. Ownership: connect() moves the socket and segment into the Context.
// Thread safety: none needed (one thread bootstraps).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/unique_fd.h"
#include "cohort/transport/context.h"
#include "cohort/transport/network.h"
#include "cohort/transport/shm_segment.h"

namespace cohort::transport {

struct EndpointOptions {
  bool force_tcp = false;
  // What to advertise, connect time-out, report interval, and the shared-
  // memory rings' size and single-copy switch.
  NetworkOptions network;
};

class Endpoint {
 public:
  Endpoint(int rank, int size, EndpointOptions options);

  // One line describing how to reach this rank.
  const std::string& address() const { return address_; }
  // Connects to every peer; addresses[r] is rank r's address(). Throws
  // TimeoutError when peers do not show up before deadline or the network
  // options' connect_timeout, whichever is first.
  std::unique_ptr<Context> connect(const std::vector<std::string>& addresses,
                                   Clock::time_point deadline);

 private:
  int rank_;
  int size_;
  EndpointOptions options_;
  UniqueFd listener_;
  uint64_t token_ = 0;
  std::optional<ShmSegment> segment_;
  std::string address_;
};

}  // namespace cohort::transport
