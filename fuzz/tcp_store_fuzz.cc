// The TcpStore server (cohort/rendezvous/tcp_store_server.h) fed arbitrary
// bytes over a real connection: the first input byte chooses whether a valid
// handshake goes first (so request decoding is reached) and the rest is sent
// as is. The server must answer, refuse or drop the connection -- never
// crash, hang or allocate what a frame merely claims -- and keep serving.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/rendezvous/tcp_store_protocol.h"
#include "cohort/rendezvous/tcp_store_server.h"
#include "cohort/transport/socket.h"

namespace {

cohort::rendezvous::TcpStoreServer& server() {
  static auto* s = [] {
    cohort::rendezvous::TcpStoreServerOptions o;
    o.bind_host = "127.0.0.1";
    o.port = 0;
    o.token = "fuzz";
    return new cohort::rendezvous::TcpStoreServer(o);
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace std::chrono_literals;
  namespace net = cohort::transport;
  namespace proto = cohort::rendezvous::proto;
  if (size == 0) return 0;
  try {
    auto deadline = net::Clock::now() + 2s;
    cohort::UniqueFd fd = net::connect_tcp("127.0.0.1", server().port(), deadline, "fuzz connect");
    if (data[0] & 1) {
      proto::Encoder e;
      e.u32(proto::kMagic).u32(proto::kVersion).str("fuzz");
      const std::vector<uint8_t> hs = std::move(e).finish();
      net::write_all(fd.get(), hs.data(), hs.size(), deadline, "fuzz handshake");
    }
    net::write_all(fd.get(), data + 1, size - 1, deadline, "fuzz input");
    ::shutdown(fd.get(), SHUT_WR);
    // Read what the server says until it closes or 200 ms pass.
    uint8_t buf[4096];
    const auto until = net::Clock::now() + 200ms;
    while (net::Clock::now() < until) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) > 0 && ::read(fd.get(), buf, sizeof(buf)) <= 0) break;
    }
  } catch (const cohort::Error&) {
  }
  return 0;
}
