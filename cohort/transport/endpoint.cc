#include "cohort/transport/endpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <random>
#include <sstream>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/transport/shm_pair.h"
#include "cohort/transport/tcp_pair.h"

namespace cohort::transport {

namespace {

// Peers read this through process_vm_readv at bootstrap to learn whether
// they may copy straight out of this process's memory (same pid namespace,
// ptrace permission, no seccomp filter in the way).
const volatile uint64_t kMemoryProbe = 0x45424f5250414d43ull;

constexpr uint32_t kHelloMagic = 0x4F4C4548;  // "HELO"
constexpr uint32_t kControlChannel = 0;
constexpr uint32_t kDataChannel = 1;

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t channel;
  uint32_t pad;
  uint64_t token;
};

struct Address {
  int rank = -1;
  std::string host, boot, ip, shm;
  uint16_t port = 0;
  uint64_t token = 0;
  int64_t pid = 0;
  uint64_t probe = 0;  // address of kMemoryProbe in that process
  bool force_tcp = true;
};

Address parse_address(const std::string& text, int expected_rank) {
  std::istringstream in(text);
  Address a;
  std::string version;
  int force = 1;
  in >> version >> a.rank >> a.host >> a.boot >> a.ip >> a.port >> a.token >> force >> a.shm >>
      a.pid >> a.probe;
  COHORT_CHECK(!in.fail() && version == "cohort1" && a.rank == expected_rank,
               "transport: bad address for rank {}: '{}'", expected_rank, text);
  a.force_tcp = force != 0;
  return a;
}

size_t default_ring_bytes() {
  size_t bytes = size_t{1} << 20;
  if (const char* env = std::getenv("COHORT_SHM_RING_BYTES"); env != nullptr && *env != '\0') {
    bytes = std::strtoull(env, nullptr, 10);
  }
  return bytes;
}

}  // namespace

Endpoint::Endpoint(int rank, int size, EndpointOptions options)
    : rank_(rank), size_(size), options_(options) {
  COHORT_CHECK(size >= 1 && rank >= 0 && rank < size,
               "transport: rank must be in [0, size), got rank {} of size {}", rank, size);
  uint16_t port = 0;
  listener_ = listen_tcp(&port);
  std::random_device rd;
  token_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (!options_.force_tcp && size > 1) {
    size_t ring = options_.ring_bytes != 0 ? options_.ring_bytes : default_ring_bytes();
    segment_ = ShmSegment::create(rank, size, ring);
  }
  address_ = fmt::format("cohort1 {} {} {} {} {} {} {} {} {} {}", rank, host_name(), boot_id(),
                         local_address(), port, token_, options_.force_tcp ? 1 : 0,
                         segment_ ? segment_->name() : std::string("-"), ::getpid(),
                         reinterpret_cast<uintptr_t>(&kMemoryProbe));
}

std::unique_ptr<Context> Endpoint::connect(const std::vector<std::string>& addresses,
                                           Clock::time_point deadline) {
  COHORT_CHECK(static_cast<int>(addresses.size()) == size_,
               "transport: expected {} addresses, got {}", size_, addresses.size());
  std::vector<Address> addr;
  for (int r = 0; r < size_; ++r)
    addr.push_back(parse_address(addresses[static_cast<size_t>(r)], r));
  const Address& me = addr[static_cast<size_t>(rank_)];
  std::vector<char> shm(static_cast<size_t>(size_), 0);
  for (int p = 0; p < size_; ++p) {
    const Address& a = addr[static_cast<size_t>(p)];
    shm[static_cast<size_t>(p)] = p != rank_ && !me.force_tcp && !a.force_tcp && a.shm != "-" &&
                                  me.shm != "-" && a.host == me.host && a.boot == me.boot;
  }
  std::vector<Context::Peer> peers(static_cast<size_t>(size_));
  std::vector<UniqueFd> data(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) {
    const Address& a = addr[static_cast<size_t>(p)];
    peers[static_cast<size_t>(p)].same_host = p != rank_ && a.host == me.host && a.boot == me.boot;
    if (shm[static_cast<size_t>(p)]) {
      peers[static_cast<size_t>(p)].segment =
          ShmSegment::open(addr[static_cast<size_t>(p)].shm, p, size_);
    }
  }
  // Connect to lower ranks: a control connection, and a data one for TCP peers.
  for (int p = 0; p < rank_; ++p) {
    const Address& a = addr[static_cast<size_t>(p)];
    std::string ip = (a.host == me.host && a.boot == me.boot) ? "127.0.0.1" : a.ip;
    std::string what = fmt::format("transport: rank {} connecting to rank {}", rank_, p);
    for (uint32_t ch : {kControlChannel, kDataChannel}) {
      if (ch == kDataChannel && shm[static_cast<size_t>(p)]) continue;
      UniqueFd fd = connect_tcp(ip, a.port, deadline, what);
      Hello h{kHelloMagic, static_cast<uint32_t>(rank_), ch, 0, a.token};
      write_all(fd.get(), &h, sizeof(h), deadline, what);
      (ch == kControlChannel ? peers[static_cast<size_t>(p)].control
                             : data[static_cast<size_t>(p)]) = std::move(fd);
    }
  }
  // Accept from higher ranks; drop connections without our token.
  int expected = 0;
  for (int p = rank_ + 1; p < size_; ++p) expected += shm[static_cast<size_t>(p)] ? 1 : 2;
  std::string what = fmt::format("transport: rank {} accepting peers", rank_);
  while (expected > 0) {
    UniqueFd fd = accept_tcp(listener_.get(), deadline, what);
    Hello h{};
    try {
      read_all(fd.get(), &h, sizeof(h), std::min(deadline, Clock::now() + std::chrono::seconds(5)),
               what);
    } catch (const Error&) {
      continue;
    }
    int p = static_cast<int>(h.rank);
    if (h.magic != kHelloMagic || h.token != token_ || p <= rank_ || p >= size_ ||
        h.channel > kDataChannel || (h.channel == kDataChannel && shm[static_cast<size_t>(p)])) {
      COHORT_WARN("transport: rank {} dropped a connection that did not present this job's token",
                  rank_);
      continue;
    }
    UniqueFd& slot = h.channel == kControlChannel ? peers[static_cast<size_t>(p)].control
                                                  : data[static_cast<size_t>(p)];
    if (slot.valid()) continue;  // duplicate
    slot = std::move(fd);
    --expected;
  }
  listener_.reset();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto& peer = peers[static_cast<size_t>(p)];
    if (shm[static_cast<size_t>(p)]) {
      const Address& a = addr[static_cast<size_t>(p)];
      auto pair = std::make_unique<ShmPair>(rank_, p, *segment_, *peer.segment);
      pair->enable_memory_reads(static_cast<pid_t>(a.pid), a.probe, kMemoryProbe);
      peer.pair = std::move(pair);
    } else {
      peer.pair = std::make_unique<TcpPair>(rank_, p, std::move(data[static_cast<size_t>(p)]));
    }
  }
  return std::make_unique<Context>(rank_, size_, std::move(segment_), std::move(peers));
}

}  // namespace cohort::transport
