#include "cohort/transport/endpoint.h"

#include <unistd.h>

#include <random>
#include <set>
#include <thread>

#include <fmt/ranges.h>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/transport/peer_address.h"
#include "cohort/transport/shm_pair.h"
#include "cohort/transport/tcp_pair.h"

namespace cohort::transport {

namespace {

// Peers read this through process_vm_readv at bootstrap to learn whether
// they may copy straight out of this process's memory (same pid namespace,
// ptrace permission, no seccomp filter in the way).
const volatile uint64_t kMemoryProbe = 0x45424f5250414d43ull;

std::string rank_list(const std::set<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// Says every `interval` what a rank still waits for.
class WaitReporter {
 public:
  WaitReporter(int rank, std::chrono::milliseconds interval)
      : rank_(rank), interval_(interval), start_(Clock::now()), next_(start_ + interval) {}
  void maybe_report(const std::string& waiting_for) {
    const auto now = Clock::now();
    if (now < next_) return;
    next_ = now + interval_;
    log(LogLevel::kWarn, "transport: rank {} still waiting after {} s: {}", rank_,
        std::chrono::duration_cast<std::chrono::seconds>(now - start_).count(), waiting_for);
  }

 private:
  int rank_;
  std::chrono::milliseconds interval_;
  Clock::time_point start_, next_;
};

// Tries the peer's addresses in turn (each for a short slice) until one
// accepts or the deadline passes; the error names them all with their last
// errors.
UniqueFd connect_to_peer(int self, int peer, const std::vector<std::string>& ips, uint16_t port,
                         Clock::time_point deadline, WaitReporter& reporter, std::string* used) {
  std::vector<std::string> last(ips.size());
  for (;;) {
    for (size_t i = 0; i < ips.size(); ++i) {
      const auto slice = std::min(deadline, Clock::now() + std::chrono::seconds(2));
      try {
        UniqueFd fd =
            connect_tcp(ips[i], port, slice,
                        fmt::format("transport: rank {} connecting to rank {}", self, peer));
        *used = ips[i];
        return fd;
      } catch (const TimeoutError& e) {
        last[i] = e.what();
      } catch (const IoError& e) {
        last[i] = e.what();
        // An unreachable network fails at once: do not spin on it.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      std::string tried;
      for (size_t k = 0; k < ips.size(); ++k)
        if (!last[k].empty()) tried += fmt::format("; {}", last[k]);
      reporter.maybe_report(fmt::format("connecting to rank {} at port {} of {}{}", peer, port,
                                        fmt::join(ips, " or "), tried));
      if (Clock::now() >= deadline) {
        throw TimeoutError(fmt::format(
            "transport: rank {} could not connect to rank {} at {} port {} (connect time-out; "
            "is the peer's address reachable from here? set --interface/COHORT_SOCKET_IFNAME "
            "or COHORT_ADDR on the peer){}",
            self, peer, fmt::join(ips, " or "), port, tried));
      }
    }
  }
}

}  // namespace

Endpoint::Endpoint(int rank, int size, EndpointOptions options)
    : rank_(rank), size_(size), options_(std::move(options)) {
  COHORT_CHECK(size >= 1 && rank >= 0 && rank < size,
               "transport: rank must be in [0, size), got rank {} of size {}", rank, size);
  uint16_t port = 0;
  listener_ = listen_tcp(&port);
  std::random_device rd;
  token_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (!options_.force_tcp && size > 1) {
    segment_ = ShmSegment::create(rank, size, options_.network.shm_ring_bytes);
  }
  PeerAddress me;
  me.rank = rank;
  me.host = host_name();
  me.boot = boot_id();
  me.netns = network_namespace();
  me.ips = advertised_addresses(options_.network);
  me.port = port;
  me.token = token_;
  me.force_tcp = options_.force_tcp;
  me.shm = segment_ ? segment_->name() : std::string("-");
  me.pid = ::getpid();
  me.probe = reinterpret_cast<uintptr_t>(&kMemoryProbe);
  address_ = format_peer_address(me);
}

std::unique_ptr<Context> Endpoint::connect(const std::vector<std::string>& addresses,
                                           Clock::time_point deadline) {
  COHORT_CHECK(static_cast<int>(addresses.size()) == size_,
               "transport: expected {} addresses, got {}", size_, addresses.size());
  deadline = std::min(deadline, Clock::now() + options_.network.connect_timeout);
  std::vector<PeerAddress> addr;
  for (int r = 0; r < size_; ++r)
    addr.push_back(parse_peer_address(addresses[static_cast<size_t>(r)], r));
  const PeerAddress& me = addr[static_cast<size_t>(rank_)];
  const auto n = static_cast<size_t>(size_);
  std::vector<Context::Peer> peers(n);
  std::vector<UniqueFd> data(n);
  std::vector<char> use_shm(n, 0);
  // Opens peer p's segment when shared memory is possible; false when it
  // does not open (another /dev/shm, permissions): that pair then uses TCP.
  auto open_segment = [&](int p) {
    const PeerAddress& a = addr[static_cast<size_t>(p)];
    if (!shm_candidate(me, a)) return false;
    try {
      peers[static_cast<size_t>(p)].segment = ShmSegment::open(a.shm, p, size_);
      return true;
    } catch (const Error& e) {
      log(LogLevel::kWarn, "transport: rank {} cannot open rank {}'s shared memory ({}); using TCP",
          rank_, p, e.what());
      return false;
    }
  };
  for (int p = 0; p < size_; ++p)
    peers[static_cast<size_t>(p)].same_host =
        p != rank_ && same_host(me, addr[static_cast<size_t>(p)]);
  WaitReporter reporter(rank_, options_.network.report_interval);

  // Connect to lower ranks: a control connection (whose hello and answer
  // settle the pair's transport), then a data one for TCP pairs.
  for (int p = 0; p < rank_; ++p) {
    const PeerAddress& a = addr[static_cast<size_t>(p)];
    const std::vector<std::string> ips =
        peers[static_cast<size_t>(p)].same_host ? std::vector<std::string>{"127.0.0.1"} : a.ips;
    const std::string what = fmt::format("transport: rank {} connecting to rank {}", rank_, p);
    std::string ip;
    UniqueFd control = connect_to_peer(rank_, p, ips, a.port, deadline, reporter, &ip);
    const bool opened = open_segment(p);
    Hello h{kHelloMagic, static_cast<uint32_t>(rank_), kControlChannel,
            opened ? kOpenedYourSegment : 0u, a.token};
    write_all(control.get(), &h, sizeof(h), deadline, what);
    HelloAck ack{};
    read_all(control.get(), &ack, sizeof(ack), deadline, what + " (waiting for its answer)");
    if (ack.magic != kAckMagic) {
      throw IoError(
          fmt::format("{} at {}:{}: the answer is not a cohort hello answer", what, ip, a.port));
    }
    use_shm[static_cast<size_t>(p)] = opened && (ack.flags & kOpenedYourSegment) != 0;
    peers[static_cast<size_t>(p)].control = std::move(control);
    if (!use_shm[static_cast<size_t>(p)]) {
      peers[static_cast<size_t>(p)].segment.reset();
      UniqueFd d = connect_tcp(ip, a.port, deadline, what);
      Hello dh{kHelloMagic, static_cast<uint32_t>(rank_), kDataChannel, 0, a.token};
      write_all(d.get(), &dh, sizeof(dh), deadline, what);
      data[static_cast<size_t>(p)] = std::move(d);
    }
  }
  // Accept from higher ranks; drop connections without our token.
  std::set<int> missing_control, missing_data;
  for (int p = rank_ + 1; p < size_; ++p) missing_control.insert(p);
  const std::string what = fmt::format("transport: rank {} accepting peers", rank_);
  while (!missing_control.empty() || !missing_data.empty()) {
    UniqueFd fd;
    try {
      fd = accept_tcp(listener_.get(),
                      std::min(deadline, Clock::now() + options_.network.report_interval), what);
    } catch (const TimeoutError&) {
      const std::string waiting =
          fmt::format("ranks {} have not connected to port {} of {}",
                      rank_list(missing_control.empty() ? missing_data : missing_control), me.port,
                      fmt::join(me.ips, " or "));
      if (Clock::now() >= deadline) {
        throw TimeoutError(fmt::format(
            "transport: rank {} timed out (connect time-out): {} (are they running, and can they "
            "reach this address? set --interface/COHORT_SOCKET_IFNAME or COHORT_ADDR here)",
            rank_, waiting));
      }
      reporter.maybe_report(waiting);
      continue;
    }
    Hello h{};
    try {
      read_all(fd.get(), &h, sizeof(h), std::min(deadline, Clock::now() + std::chrono::seconds(5)),
               what);
    } catch (const Error&) {
      continue;
    }
    std::string why;
    if (!hello_valid(h, rank_, size_, token_, &why)) {
      log(LogLevel::kWarn, "transport: rank {} dropped a connection: {}", rank_, why);
      continue;
    }
    const int p = static_cast<int>(h.rank);
    if (h.channel == kControlChannel) {
      if (!missing_control.count(p)) continue;  // duplicate
      const bool opened = open_segment(p);
      HelloAck ack{kAckMagic, opened ? kOpenedYourSegment : 0u};
      write_all(fd.get(), &ack, sizeof(ack), deadline, what);
      use_shm[static_cast<size_t>(p)] = opened && (h.flags & kOpenedYourSegment) != 0;
      if (!use_shm[static_cast<size_t>(p)]) {
        peers[static_cast<size_t>(p)].segment.reset();
        if (!data[static_cast<size_t>(p)].valid()) missing_data.insert(p);
      }
      peers[static_cast<size_t>(p)].control = std::move(fd);
      missing_control.erase(p);
    } else {
      if (data[static_cast<size_t>(p)].valid()) continue;  // duplicate
      data[static_cast<size_t>(p)] = std::move(fd);
      missing_data.erase(p);
    }
  }
  listener_.reset();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto& peer = peers[static_cast<size_t>(p)];
    if (use_shm[static_cast<size_t>(p)]) {
      const PeerAddress& a = addr[static_cast<size_t>(p)];
      auto pair = std::make_unique<ShmPair>(rank_, p, *segment_, *peer.segment);
      if (options_.network.shm_single_copy)
        pair->enable_memory_reads(static_cast<pid_t>(a.pid), a.probe, kMemoryProbe);
      peer.pair = std::move(pair);
    } else {
      peer.pair = std::make_unique<TcpPair>(rank_, p, std::move(data[static_cast<size_t>(p)]));
    }
  }
  return std::make_unique<Context>(rank_, size_, std::move(segment_), std::move(peers));
}

}  // namespace cohort::transport
