#include "cohort/rpc/rpc_agent.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/rendezvous/store.h"
#include "cohort/rpc/agent_core.h"
#include "cohort/transport/network.h"
#include "cohort/transport/socket.h"

namespace cohort::rpc {

// ---------------------------------------------------------------- RpcAgent

RpcAgent::RpcAgent(std::shared_ptr<detail::AgentCore> core) : core_(std::move(core)) {}

RpcAgent::~RpcAgent() {
  try {
    core_->shutdown(false, Duration::zero());
  } catch (...) {
  }
}

const std::string& RpcAgent::name() const { return core_->name(); }
int RpcAgent::rank() const { return core_->rank(); }
int RpcAgent::world_size() const { return core_->world_size(); }
const std::string& RpcAgent::worker_name(int rank) const { return core_->worker_name(rank); }
int RpcAgent::rank_of(const std::string& name) const { return core_->rank_of(name); }
const RpcOptions& RpcAgent::options() const { return core_->options(); }

void RpcAgent::register_function(const std::string& fn, Handler handler) {
  core_->register_function(fn, std::move(handler));
}
bool RpcAgent::has_function(const std::string& fn) const { return core_->has_function(fn); }

Future RpcAgent::rpc_async(const std::string& to, const std::string& fn, Message args,
                           CallOptions opts) {
  return core_->call(core_->rank_of(to), detail::FrameKind::kRequest, fn, 0, std::move(args),
                     opts.timeout);
}

Message RpcAgent::rpc_sync(const std::string& to, const std::string& fn, Message args,
                           CallOptions opts) {
  return rpc_async(to, fn, std::move(args), opts).wait();
}

RRef RpcAgent::remote(const std::string& to, const std::string& fn, Message args,
                      CallOptions opts) {
  return core_->remote(core_->rank_of(to), fn, std::move(args), opts.timeout);
}

Message RpcAgent::local_value(RRefId id, Duration timeout) const {
  return core_->local_value(id, timeout);
}
size_t RpcAgent::owned_rref_count() const { return core_->owned_rref_count(); }

void RpcAgent::shutdown(bool graceful, Duration timeout) { core_->shutdown(graceful, timeout); }
bool RpcAgent::is_shut_down() const { return core_->is_shut_down(); }

// ---------------------------------------------------------------- init

namespace {

constexpr uint32_t kHelloMagic = 0x4F4C4548;  // "HELO"

struct __attribute__((packed)) Hello {
  uint32_t magic;
  int32_t rank;
  uint64_t token;
};

struct Address {
  std::string name, host, boot, ip, uds;
  uint16_t port = 0;
  uint64_t token = 0;
};

std::string encode(const Address& a) {
  return fmt::format("{}\n{}\n{}\n{}\n{}\n{}\n{}", a.name, a.host, a.boot, a.ip, a.port, a.uds,
                     a.token);
}

Address decode(const std::string& s, int rank) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string line;
  while (std::getline(in, line)) parts.push_back(line);
  if (s.ends_with('\n')) parts.push_back("");
  if (parts.size() != 7) {
    throw IoError(fmt::format("rpc: init: malformed address of rank {}: '{}'", rank, s));
  }
  Address a;
  a.name = parts[0];
  a.host = parts[1];
  a.boot = parts[2];
  a.ip = parts[3];
  a.port = static_cast<uint16_t>(std::stoul(parts[4]));
  a.uds = parts[5];
  a.token = std::stoull(parts[6]);
  return a;
}

sockaddr_un uds_address(const std::string& name, socklen_t* len) {
  // Abstract namespace: nothing to unlink, gone with the last descriptor.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';
  std::memcpy(addr.sun_path + 1, name.data(), std::min(name.size(), sizeof(addr.sun_path) - 2));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

UniqueFd listen_uds(const std::string& name) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno("rpc: unix socket", errno);
  socklen_t len;
  sockaddr_un addr = uds_address(name, &len);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    throw_errno("rpc: bind unix socket", errno);
  }
  if (::listen(fd.get(), 512) != 0) throw_errno("rpc: listen unix socket", errno);
  return fd;
}

UniqueFd connect_uds(const std::string& name, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) throw_errno("rpc: unix socket", errno);
    socklen_t len;
    sockaddr_un addr = uds_address(name, &len);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return fd;
    int err = errno;
    if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN && err != EINTR) {
      throw_errno(what, err);
    }
    if (Clock::now() >= deadline) throw TimeoutError(fmt::format("{}: timed out connecting", what));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void set_buffers(int fd) {
  // Larger socket buffers: fewer wake-ups per megabyte of payload (best effort).
  int bytes = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

std::string join_ranks(const std::vector<int>& ranks, const std::vector<std::string>& names) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ", ";
    s += names.empty() || names[static_cast<size_t>(r)].empty()
             ? fmt::format("rank {}", r)
             : fmt::format("'{}' (rank {})", names[static_cast<size_t>(r)], r);
  }
  return s;
}

}  // namespace

std::shared_ptr<RpcAgent> init_rpc(std::string name, int rank, int world_size,
                                   std::shared_ptr<rendezvous::Store> store, RpcOptions opts) {
  COHORT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
               "rpc: init_rpc('{}'): rank {} outside world size {}", name, rank, world_size);
  COHORT_CHECK(!name.empty() && name.find('\n') == std::string::npos,
               "rpc: init_rpc (rank {}): worker name '{}' must be non-empty, one line", rank, name);
  COHORT_CHECK(store != nullptr, "rpc: init_rpc('{}'): no store", name);
  auto deadline = Clock::now() + opts.init_timeout;
  auto left_ms = [&] {
    return std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };

  std::random_device rd;
  Address me;
  me.name = name;
  me.host = transport::host_name();
  // Unix sockets live in the network namespace: "local" needs the same one.
  me.boot = transport::boot_id() + "/" + transport::network_namespace();
  me.ip = transport::advertised_addresses(opts.network).front();
  me.token = (uint64_t{rd()} << 32) | rd();
  UniqueFd tcp_listener = transport::listen_tcp(&me.port);
  UniqueFd uds_listener;
  if (!opts.force_tcp) {
    me.uds = fmt::format("cohort-rpc-{}-{:016x}", ::getpid(), me.token);
    uds_listener = listen_uds(me.uds);
  }
  auto key = [&](int r) { return fmt::format("{}/addr/{}", opts.store_prefix, r); };
  store->set(key(rank), encode(me));

  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(key(r));
  try {
    store->wait(keys, rendezvous::Duration(left_ms()));
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (int r = 0; r < world_size; ++r) {
      if (!store->check({key(r)})) missing.push_back(r);
    }
    throw TimeoutError(fmt::format(
        "rpc: init_rpc: worker '{}' (rank {}) waited {} ms for workers [{}] to join (world size "
        "{})",
        name, rank,
        std::chrono::duration_cast<std::chrono::milliseconds>(opts.init_timeout).count(),
        join_ranks(missing, {}), world_size));
  }
  std::vector<Address> addrs;
  std::vector<std::string> names;
  for (int r = 0; r < world_size; ++r) {
    addrs.push_back(r == rank ? me : decode(store->get_string(key(r)), r));
    names.push_back(addrs.back().name);
  }
  for (int a = 0; a < world_size; ++a) {
    for (int b = a + 1; b < world_size; ++b) {
      COHORT_CHECK(names[static_cast<size_t>(a)] != names[static_cast<size_t>(b)],
                   "rpc: init_rpc: ranks {} and {} both call themselves '{}'; worker names must "
                   "be unique",
                   a, b, names[static_cast<size_t>(a)]);
    }
  }

  // Full mesh: connect to every lower rank, accept every higher one.
  std::vector<UniqueFd> fds(static_cast<size_t>(world_size));
  std::vector<bool> is_tcp(static_cast<size_t>(world_size), false);
  for (int r = 0; r < rank; ++r) {
    const Address& a = addrs[static_cast<size_t>(r)];
    std::string what = fmt::format(
        "rpc: init_rpc: worker '{}' (rank {}) connecting to '{}' (rank {})", name, rank, a.name, r);
    bool local = !opts.force_tcp && !a.uds.empty() && a.host == me.host && a.boot == me.boot;
    UniqueFd fd = local ? connect_uds(a.uds, deadline, what)
                        : transport::connect_tcp(a.ip, a.port, deadline, what);
    Hello h{kHelloMagic, rank, a.token};
    transport::write_all(fd.get(), &h, sizeof(h), deadline, what);
    is_tcp[static_cast<size_t>(r)] = !local;
    fds[static_cast<size_t>(r)] = std::move(fd);
  }
  int expected = world_size - 1 - rank;
  while (expected > 0) {
    pollfd pf[2] = {{tcp_listener.get(), POLLIN, 0}, {uds_listener.get(), POLLIN, 0}};
    int n = uds_listener.valid() ? 2 : 1;
    int pr = ::poll(pf, static_cast<nfds_t>(n), transport::poll_timeout_ms(deadline, 100));
    if (pr < 0 && errno != EINTR) throw_errno("rpc: init_rpc: poll", errno);
    for (int i = 0; i < n && pr > 0; ++i) {
      if (pf[i].revents == 0) continue;
      UniqueFd fd(::accept4(pf[i].fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      Hello h{};
      try {
        transport::read_all(fd.get(), &h, sizeof(h),
                            std::min(deadline, Clock::now() + std::chrono::seconds(5)),
                            "rpc: init_rpc: hello");
      } catch (const Error&) {
        continue;  // a stray connection; the real peer retries nothing, it is still coming
      }
      if (h.magic != kHelloMagic || h.token != me.token || h.rank <= rank || h.rank >= world_size ||
          fds[static_cast<size_t>(h.rank)].valid()) {
        continue;
      }
      is_tcp[static_cast<size_t>(h.rank)] = i == 0;
      fds[static_cast<size_t>(h.rank)] = std::move(fd);
      --expected;
    }
    if (expected > 0 && Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = rank + 1; r < world_size; ++r) {
        if (!fds[static_cast<size_t>(r)].valid()) missing.push_back(r);
      }
      throw TimeoutError(fmt::format(
          "rpc: init_rpc: worker '{}' (rank {}) timed out waiting for workers [{}] to connect",
          name, rank, join_ranks(missing, names)));
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    int fd = fds[static_cast<size_t>(r)].get();
    transport::set_nonblocking(fd);
    if (is_tcp[static_cast<size_t>(r)]) transport::set_nodelay(fd);
    set_buffers(fd);
  }
  auto core = std::make_shared<detail::AgentCore>(name, rank, std::move(names), std::move(opts),
                                                  std::move(fds));
  auto agent = std::make_shared<RpcAgent>(core);
  core->start(agent.get());
  return agent;
}

std::shared_ptr<RpcAgent> init_rpc(std::string name, RpcOptions opts) {
  rendezvous::BootstrapResult b = rendezvous::bootstrap("env://");
  // env:// knows the master and the address settings: use them unless the
  // caller chose an address or interface itself.
  if (opts.network.address.empty() && opts.network.interface.empty() &&
      opts.network.master_addr.empty()) {
    opts.network = b.network;
  }
  return init_rpc(std::move(name), b.rank, b.world_size, b.store, std::move(opts));
}

}  // namespace cohort::rpc
