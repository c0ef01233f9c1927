#include "cohort/rpc/agent_core.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::rpc::detail {

namespace {

constexpr uint32_t kFrameMagic = 0x31435052;  // "RPC1"
// Sanity limits on a frame from the wire: a garbled stream is a lost peer,
// not a 1 TiB allocation.
constexpr uint32_t kMaxNameBytes = 1u << 24;
constexpr uint32_t kMaxBuffers = 1u << 20;
constexpr size_t kInBytes = 256 * 1024;
// Buffers at least this large are read straight into their destination.
constexpr size_t kDirectReadBytes = 32 * 1024;
constexpr int kMaxIov = 64;
constexpr auto kIdleSlice = std::chrono::milliseconds(100);

struct __attribute__((packed)) WireHeader {
  uint32_t magic;
  uint8_t kind;
  uint8_t error_class;
  uint16_t reserved;
  uint64_t id;
  uint64_t rref;
  uint64_t timeout_ns;
  uint32_t name_len;
  uint32_t header_len;
  uint32_t num_buffers;
  uint32_t reserved2;
};

// Error classes on the wire, so the caller rethrows the handler's kind.
enum ErrorClass : uint8_t {
  kErrGeneric = 0,
  kErrInvalid = 1,
  kErrTimeout = 2,
  kErrPeerLost = 3,
  kErrIo = 4,
  kErrNotSupported = 5,
};

std::pair<uint8_t, std::string> classify(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const InvalidArgument& x) {
    return {kErrInvalid, x.what()};
  } catch (const TimeoutError& x) {
    return {kErrTimeout, x.what()};
  } catch (const PeerLost& x) {
    return {kErrPeerLost, x.what()};
  } catch (const IoError& x) {
    return {kErrIo, x.what()};
  } catch (const NotSupported& x) {
    return {kErrNotSupported, x.what()};
  } catch (const std::exception& x) {
    return {kErrGeneric, x.what()};
  } catch (...) {
    return {kErrGeneric, "unknown exception (not derived from std::exception)"};
  }
}

std::exception_ptr make_error(uint8_t cls, const std::string& text) {
  switch (cls) {
    case kErrInvalid:
      return std::make_exception_ptr(InvalidArgument(text));
    case kErrTimeout:
      return std::make_exception_ptr(TimeoutError(text));
    case kErrPeerLost:
      return std::make_exception_ptr(PeerLost(text));
    case kErrIo:
      return std::make_exception_ptr(IoError(text));
    case kErrNotSupported:
      return std::make_exception_ptr(NotSupported(text));
    default:
      return std::make_exception_ptr(Error(text));
  }
}

int64_t ms(Duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// Set on handler threads: calls made while serving another worker stay
// allowed during graceful shutdown (the caller waits for them).
thread_local const AgentCore* t_handler_core = nullptr;

}  // namespace

AgentCore::AgentCore(std::string name, int rank, std::vector<std::string> names, RpcOptions opts,
                     std::vector<UniqueFd> fds)
    : name_(std::move(name)), rank_(rank), names_(std::move(names)), opts_(std::move(opts)) {
  for (size_t r = 0; r < names_.size(); ++r) ranks_[names_[r]] = static_cast<int>(r);
  peers_.resize(names_.size());
  for (size_t r = 0; r < names_.size(); ++r) {
    if (static_cast<int>(r) == rank_) continue;
    auto p = std::make_unique<Peer>();
    p->rank = static_cast<int>(r);
    p->name = names_[r];
    p->fd = std::move(fds[r]);
    p->in.resize(kInBytes);
    peers_[r] = std::move(p);
  }
  wake_fd_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) throw_errno("rpc: eventfd", errno);
}

AgentCore::~AgentCore() {
  // teardown() joined or deliberately left behind every thread; never terminate().
  if (io_thread_.joinable()) io_thread_.detach();
  for (auto& t : pool_) {
    if (t.joinable()) t.detach();
  }
}

void AgentCore::start(RpcAgent* agent) {
  agent_ = agent;
  auto self = shared_from_this();
  io_thread_ = std::thread([self] { self->io_loop(); });
  int n = std::max(1, opts_.num_handler_threads);
  for (int i = 0; i < n; ++i) pool_.emplace_back([self] { self->handler_loop(); });
}

const std::string& AgentCore::worker_name(int rank) const {
  COHORT_CHECK(rank >= 0 && rank < world_size(),
               "rpc: worker '{}': no worker has rank {} (world size {})", name_, rank,
               world_size());
  return names_[static_cast<size_t>(rank)];
}

int AgentCore::rank_of(const std::string& name) const {
  auto it = ranks_.find(name);
  COHORT_CHECK(it != ranks_.end(), "rpc: worker '{}': no worker is named '{}'", name_, name);
  return it->second;
}

void AgentCore::register_function(const std::string& fn, Handler h) {
  COHORT_CHECK(!fn.empty() && h, "rpc: worker '{}': register_function needs a name and a handler",
               name_);
  std::vector<Parked> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handlers_[fn] = h;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->frame.name == fn) {
        ready.push_back(std::move(*it));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Parked& p : ready) {
    post([self = shared_from_this(), from = p.from, f = std::move(p.frame), h]() mutable {
      self->run_handler(from, std::move(f), h);
    });
  }
}

bool AgentCore::has_function(const std::string& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  return handlers_.count(fn) > 0;
}

// ---------------------------------------------------------------- sending

void AgentCore::wake() {
  uint64_t one = 1;
  ssize_t r = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)r;  // EAGAIN: the counter is already non-zero, the thread will wake
}

bool AgentCore::send(int to, Frame f) {
  if (to == rank_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_.load()) return false;
      local_.push_back(std::move(f));
    }
    wake();
    return true;
  }
  Peer& p = *peers_[static_cast<size_t>(to)];
  WireHeader h{};
  h.magic = kFrameMagic;
  h.kind = static_cast<uint8_t>(f.kind);
  h.error_class = f.error_class;
  h.id = f.id;
  h.rref = f.rref;
  h.timeout_ns = f.timeout_ns;
  h.name_len = static_cast<uint32_t>(f.name.size());
  h.header_len = static_cast<uint32_t>(f.message.header().size());
  h.num_buffers = static_cast<uint32_t>(f.message.num_buffers());
  Peer::Out out;
  out.prefix.reserve(sizeof(h) + f.name.size() + f.message.header().size() +
                     8 * f.message.num_buffers());
  out.prefix.append(reinterpret_cast<const char*>(&h), sizeof(h));
  out.prefix += f.name;
  out.prefix += f.message.header();
  for (const Message::Buffer& b : f.message.buffers()) {
    uint64_t n = b.size;
    out.prefix.append(reinterpret_cast<const char*>(&n), sizeof(n));
  }
  out.message = std::move(f.message);
  bool pending;
  {
    std::lock_guard<std::mutex> lock(p.send_mu);
    if (p.lost.load() || !p.fd.valid()) return false;
    p.out.push_back(std::move(out));
    // Write from this thread when the queue was empty: no hand-off to the
    // I/O thread for the common small call. The rest goes on POLLOUT.
    if (p.out.size() == 1) flush_locked(p);
    pending = !p.out.empty() || p.broken.load();
  }
  if (pending) wake();
  return true;
}

void AgentCore::flush_locked(Peer& p) {
  while (!p.out.empty() && p.fd.valid()) {
    iovec iov[kMaxIov];
    int n = 0;
    for (auto it = p.out.begin(); it != p.out.end() && n < kMaxIov; ++it) {
      size_t nb = it->message.num_buffers();
      for (size_t s = it->slice; s <= nb && n < kMaxIov; ++s) {
        const char* base;
        size_t size;
        if (s == 0) {
          base = it->prefix.data();
          size = it->prefix.size();
        } else {
          const Message::Buffer& b = it->message.buffers()[s - 1];
          base = reinterpret_cast<const char*>(b.data);
          size = b.size;
        }
        size_t off = (it == p.out.begin() && s == it->slice) ? it->offset : 0;
        if (size > off) iov[n++] = {const_cast<char*>(base) + off, size - off};
      }
    }
    ssize_t w = 0;
    if (n > 0) {
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(n);
      w = ::sendmsg(p.fd.get(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        p.broken.store(true);  // EPIPE/ECONNRESET: the reader will see the close too
        return;
      }
    }
    // Advance over what was written (and over empty slices).
    size_t left = static_cast<size_t>(w);
    while (!p.out.empty()) {
      Peer::Out& o = p.out.front();
      size_t nb = o.message.num_buffers();
      while (o.slice <= nb) {
        size_t size = o.slice == 0 ? o.prefix.size() : o.message.buffers()[o.slice - 1].size;
        size_t rem = size - o.offset;
        if (rem > left) {
          o.offset += left;
          left = 0;
          break;
        }
        left -= rem;
        ++o.slice;
        o.offset = 0;
      }
      if (o.slice <= nb) break;
      p.out.pop_front();  // fully written: its keep-alives may go
    }
    if (n == 0) break;
  }
}

void AgentCore::reply_error(int to, uint64_t id, std::exception_ptr e) {
  auto [cls, text] = classify(e);
  reply_error(to, id, cls, text);
}

void AgentCore::reply_error(int to, uint64_t id, uint8_t cls, const std::string& text) {
  Frame f;
  f.kind = FrameKind::kError;
  f.error_class = cls;
  f.id = id;
  f.name = text;
  send(to, std::move(f));
}

// ---------------------------------------------------------------- calls

Future AgentCore::call(int to, FrameKind kind, const std::string& fn, uint64_t rref, Message args,
                       Duration timeout) {
  COHORT_CHECK(to >= 0 && to < world_size(), "rpc: worker '{}': no worker has rank {}", name_, to);
  Duration t = resolve(timeout);
  auto deadline = Clock::now() + t;
  Future future = Future::make();
  uint64_t id;
  bool lost = false;
  bool need_wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) {
      throw Error(fmt::format("rpc: worker '{}' is shut down; cannot call '{}' on worker '{}'",
                              name_, fn, names_[static_cast<size_t>(to)]));
    }
    if (closing_ && t_handler_core != this) {
      throw Error(fmt::format(
          "rpc: worker '{}' is shutting down; cannot start a new call of '{}' on worker '{}'",
          name_, fn, names_[static_cast<size_t>(to)]));
    }
    id = next_id_++;
    lost = to != rank_ && peers_[static_cast<size_t>(to)]->lost.load();
    if (!lost) {
      pending_.emplace(id, Pending{future, to, fn, deadline, t});
      if (deadline < earliest_) {
        earliest_ = deadline;
        need_wake = true;
      }
    }
  }
  auto lost_error = [&] {
    return std::make_exception_ptr(PeerLost(fmt::format(
        "rpc: worker '{}' (rank {}) is lost (its connection closed); worker '{}' cannot call '{}'",
        names_[static_cast<size_t>(to)], to, name_, fn)));
  };
  if (lost) {
    future.set_error(lost_error());
    return future;
  }
  Frame f;
  f.kind = kind;
  f.id = id;
  f.rref = rref;
  f.timeout_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
  f.name = fn;
  f.message = std::move(args);
  if (!send(to, std::move(f))) {
    complete_pending(id, nullptr, lost_error());
  } else if (need_wake) {
    wake();
  }
  return future;
}

RRefId AgentCore::next_rref_id() {
  std::lock_guard<std::mutex> lock(mu_);
  return (static_cast<uint64_t>(rank_) << 48) | next_rref_++;
}

RRef AgentCore::remote(int to, const std::string& fn, Message args, Duration timeout) {
  RRefId id = next_rref_id();
  Future created = call(to, FrameKind::kRemote, fn, id, std::move(args), timeout);
  auto state = std::make_shared<RRefState>();
  state->core = shared_from_this();
  state->id = id;
  state->owner = to;
  state->created = created;
  return RRef(std::move(state));
}

Message AgentCore::local_value(RRefId id, Duration timeout) const {
  auto deadline = Clock::now() + resolve(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  auto find = [&] { return owned_.find(id); };
  cv_.wait_until(lock, deadline, [&] {
    auto it = find();
    return it == owned_.end() || it->second.ready || closed_.load();
  });
  auto it = find();
  COHORT_CHECK(it != owned_.end(),
               "rpc: worker '{}' holds no value for rref {:#x} (released, or not owned here)",
               name_, id);
  if (!it->second.ready) {
    throw TimeoutError(
        fmt::format("rpc: worker '{}': the value of rref {:#x} was not ready within {} ms", name_,
                    id, ms(resolve(timeout))));
  }
  if (it->second.error) std::rethrow_exception(it->second.error);
  return it->second.value;
}

size_t AgentCore::owned_rref_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return owned_.size();
}

void AgentCore::release(int owner, RRefId id) noexcept {
  if (closed_.load()) return;
  try {
    Frame f;
    f.kind = FrameKind::kRefDec;
    f.rref = id;
    send(owner, std::move(f));
  } catch (...) {
  }
}

std::exception_ptr AgentCore::call_error(uint8_t cls, const std::string& fn, int peer,
                                         const std::string& text) const {
  return make_error(cls, fmt::format("rpc: '{}' failed on worker '{}' (rank {}), called by worker "
                                     "'{}': {}",
                                     fn, names_[static_cast<size_t>(peer)], peer, name_, text));
}

void AgentCore::complete_pending(uint64_t id, Message* value, std::exception_ptr error) {
  Future f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // timed out or failed already
    f = it->second.future;
    pending_.erase(it);
  }
  if (error) {
    f.set_error(error);
  } else {
    f.set_value(std::move(*value));
  }
}

// ---------------------------------------------------------------- I/O thread

void AgentCore::io_loop() {
  std::vector<pollfd> fds;
  std::vector<Peer*> who;
  while (!stop_io_.load()) {
    fds.clear();
    who.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    who.push_back(nullptr);
    for (auto& up : peers_) {
      if (!up || up->lost.load()) continue;
      short ev = POLLIN;
      {
        std::lock_guard<std::mutex> lock(up->send_mu);
        if (!up->fd.valid()) continue;
        if (!up->out.empty()) ev |= POLLOUT;
      }
      fds.push_back({up->fd.get(), ev, 0});
      who.push_back(up.get());
    }
    Clock::time_point until;
    {
      std::lock_guard<std::mutex> lock(mu_);
      until = std::min(earliest_, Clock::now() + kIdleSlice);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    int timeout_ms = static_cast<int>(std::max<int64_t>(0, wait.count() + 1));
    int pr = ::poll(fds.data(), fds.size(), timeout_ms);
    if (pr < 0 && errno != EINTR) {
      COHORT_WARN("rpc: worker '{}': poll failed: {}", name_, errno_message("poll", errno));
    }
    if (pr > 0 && fds[0].revents != 0) {
      uint64_t v;
      while (::read(wake_fd_.get(), &v, sizeof(v)) > 0) {
      }
    }
    for (size_t i = 1; pr > 0 && i < fds.size(); ++i) {
      Peer& p = *who[i];
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_peer(p);
      if ((fds[i].revents & POLLOUT) && !p.lost.load()) {
        std::lock_guard<std::mutex> lock(p.send_mu);
        flush_locked(p);
      }
    }
    for (auto& up : peers_) {
      if (up && up->broken.load() && !up->lost.load()) {
        peer_lost(*up, "writing to its connection failed (process died or was killed)");
      }
    }
    std::deque<Frame> local;
    {
      std::lock_guard<std::mutex> lock(mu_);
      local.swap(local_);
    }
    for (Frame& f : local) dispatch(rank_, std::move(f));
    sweep(Clock::now());
  }
}

void AgentCore::read_peer(Peer& p) {
  try {
    for (int round = 0; round < 64; ++round) {
      while (parse(p)) {
        Frame f = std::move(p.cur);
        p.cur = Frame{};
        dispatch(p.rank, std::move(f));
      }
      ssize_t n;
      if (p.stage == 2 && p.rpos == p.wpos && p.buf_index < p.sizes.size() &&
          p.sizes[p.buf_index] - p.buf_offset >= kDirectReadBytes) {
        // Straight into the destination buffer: no staging copy for payloads.
        size_t size = p.sizes[p.buf_index];
        if (!p.buf) p.buf = Message::allocate(size);
        n = ::recv(p.fd.get(), p.buf.get() + p.buf_offset, size - p.buf_offset, MSG_DONTWAIT);
        if (n > 0) {
          p.buf_offset += static_cast<size_t>(n);
          continue;
        }
      } else {
        if (p.rpos == p.wpos) {
          p.rpos = p.wpos = 0;
        } else if (p.rpos > 0 && p.in.size() - p.wpos < 4096) {
          std::memmove(p.in.data(), p.in.data() + p.rpos, p.wpos - p.rpos);
          p.wpos -= p.rpos;
          p.rpos = 0;
        }
        n = ::recv(p.fd.get(), p.in.data() + p.wpos, p.in.size() - p.wpos, MSG_DONTWAIT);
        if (n > 0) {
          p.wpos += static_cast<size_t>(n);
          continue;
        }
      }
      if (n == 0) {
        peer_lost(p, "connection closed (process died, was killed or shut down)");
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      peer_lost(p, errno_message("connection broke", errno));
      return;
    }
    while (parse(p)) {
      Frame f = std::move(p.cur);
      p.cur = Frame{};
      dispatch(p.rank, std::move(f));
    }
  } catch (const std::exception& e) {
    peer_lost(p, e.what());
  }
}

bool AgentCore::parse(Peer& p) {
  for (;;) {
    size_t avail = p.wpos - p.rpos;
    if (p.stage == 0) {
      if (avail < sizeof(WireHeader)) return false;
      WireHeader h;
      std::memcpy(&h, p.in.data() + p.rpos, sizeof(h));
      p.rpos += sizeof(h);
      if (h.magic != kFrameMagic || h.name_len > kMaxNameBytes || h.num_buffers > kMaxBuffers ||
          h.kind < 1 || h.kind > 8) {
        throw IoError("garbled frame (bad magic or sizes)");
      }
      p.cur = Frame{};
      p.cur.kind = static_cast<FrameKind>(h.kind);
      p.cur.error_class = h.error_class;
      p.cur.id = h.id;
      p.cur.rref = h.rref;
      p.cur.timeout_ns = h.timeout_ns;
      p.meta_need = size_t{h.name_len} + h.header_len + 8 * size_t{h.num_buffers};
      p.meta.clear();
      p.sizes.assign(h.num_buffers, 0);
      // Stash the split of meta in the sizes' neighbours: name and header lengths.
      p.cur.name.resize(h.name_len);
      p.cur.message.header().resize(h.header_len);
      p.stage = 1;
      continue;
    }
    if (p.stage == 1) {
      size_t take = std::min(avail, p.meta_need - p.meta.size());
      p.meta.append(p.in.data() + p.rpos, take);
      p.rpos += take;
      if (p.meta.size() < p.meta_need) return false;
      size_t nl = p.cur.name.size(), hl = p.cur.message.header().size();
      // Empty fields have no storage: memcpy with a null pointer is undefined
      // even for 0 bytes (UBSan found it on calls without buffers).
      if (nl > 0) std::memcpy(p.cur.name.data(), p.meta.data(), nl);
      if (hl > 0) std::memcpy(p.cur.message.header().data(), p.meta.data() + nl, hl);
      if (!p.sizes.empty())
        std::memcpy(p.sizes.data(), p.meta.data() + nl + hl, 8 * p.sizes.size());
      p.buf_index = 0;
      p.buf_offset = 0;
      p.buf.reset();
      p.stage = 2;
      continue;
    }
    if (p.buf_index == p.sizes.size()) {
      p.stage = 0;
      return true;
    }
    size_t size = p.sizes[p.buf_index];
    if (size == 0) {
      p.cur.message.add_buffer(nullptr, 0, nullptr);
      ++p.buf_index;
      continue;
    }
    if (!p.buf) p.buf = Message::allocate(size);
    size_t take = std::min(avail, size - p.buf_offset);
    std::memcpy(p.buf.get() + p.buf_offset, p.in.data() + p.rpos, take);
    p.rpos += take;
    p.buf_offset += take;
    if (p.buf_offset < size) return false;
    std::byte* data = p.buf.get();
    p.cur.message.add_buffer(data, size, std::shared_ptr<const void>(std::move(p.buf)));
    p.buf.reset();
    ++p.buf_index;
    p.buf_offset = 0;
  }
}

void AgentCore::dispatch(int from, Frame f) {
  switch (f.kind) {
    case FrameKind::kRemote: {
      std::lock_guard<std::mutex> lock(mu_);
      owned_.emplace(f.rref, Owned{});  // the creator's reference
    }
      [[fallthrough]];
    case FrameKind::kRequest:
      on_request(from, std::move(f));
      return;
    case FrameKind::kReply:
      complete_pending(f.id, &f.message, nullptr);
      return;
    case FrameKind::kError: {
      int peer;
      std::string fn;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = pending_.find(f.id);
        if (it == pending_.end()) return;
        peer = it->second.peer;
        fn = it->second.fn;
      }
      complete_pending(f.id, nullptr, call_error(f.error_class, fn, peer, f.name));
      return;
    }
    case FrameKind::kFetch:
    case FrameKind::kRefInc: {
      Frame reply;
      reply.kind = FrameKind::kReply;
      reply.id = f.id;
      bool answer = true;
      std::string missing;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = owned_.find(f.rref);
        if (it == owned_.end()) {
          missing = fmt::format(
              "worker '{}' holds no value for rref {:#x} (released, or not "
              "owned here)",
              name_, f.rref);
        } else if (f.kind == FrameKind::kRefInc) {
          ++it->second.refs;
        } else if (!it->second.ready) {
          it->second.waiters.emplace_back(from, f.id);
          answer = false;
        } else if (it->second.error) {
          reply.kind = FrameKind::kError;
          reply.error_class = it->second.error_class;
          reply.name = it->second.error_text;
        } else {
          reply.message = it->second.value;  // shares the bytes: no copy
        }
      }
      if (!missing.empty()) {
        reply_error(from, f.id, kErrInvalid, missing);
      } else if (answer) {
        send(from, std::move(reply));
      }
      return;
    }
    case FrameKind::kRefDec: {
      std::optional<Owned> gone;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = owned_.find(f.rref);
        if (it != owned_.end() && --it->second.refs <= 0) {
          gone = std::move(it->second);
          owned_.erase(it);
        }
      }
      cv_.notify_all();
      return;  // `gone` frees the value here, outside the lock
    }
    case FrameKind::kShutdown: {
      std::lock_guard<std::mutex> lock(mu_);
      if (from != rank_) peers_[static_cast<size_t>(from)]->said_shutdown = true;
      return;
    }
  }
}

void AgentCore::on_request(int from, Frame f) {
  Handler h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = handlers_.find(f.name);
    if (it == handlers_.end()) {
      // Not registered (yet): a worker may register right after init while
      // others already call it. Parked until registration or the grace ends.
      auto now = Clock::now();
      auto expiry =
          std::min(now + opts_.unregistered_grace, now + std::chrono::nanoseconds(f.timeout_ns));
      if (expiry < earliest_) earliest_ = expiry;
      parked_.push_back({from, std::move(f), expiry});
      return;
    }
    h = it->second;
  }
  post([self = shared_from_this(), from, f = std::move(f), h = std::move(h)]() mutable {
    self->run_handler(from, std::move(f), h);
  });
}

void AgentCore::run_handler(int from, Frame f, Handler h) {
  CallContext ctx;
  ctx.caller_name = names_[static_cast<size_t>(from)];
  ctx.caller_rank = from;
  ctx.function = f.name;
  ctx.deadline = Clock::now() + std::chrono::nanoseconds(f.timeout_ns);
  ctx.agent = agent_;
  Message result;
  std::exception_ptr error;
  try {
    result = h(ctx, std::move(f.message));
  } catch (...) {
    error = std::current_exception();
  }
  if (f.kind == FrameKind::kRemote) {
    finish_owned(f.rref, error ? Message() : std::move(result), error);
    result = Message();  // the creator's reply only says "created"
  }
  if (error) {
    reply_error(from, f.id, error);
  } else {
    Frame reply;
    reply.kind = FrameKind::kReply;
    reply.id = f.id;
    reply.message = std::move(result);
    send(from, std::move(reply));
  }
}

void AgentCore::finish_owned(RRefId id, Message value, std::exception_ptr error) {
  std::vector<std::pair<int, uint64_t>> waiters;
  Frame reply;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = owned_.find(id);
    if (it == owned_.end()) return;  // every reference went away while it ran
    Owned& o = it->second;
    o.ready = true;
    o.value = std::move(value);
    o.error = error;
    if (error) {
      auto [cls, text] = classify(error);
      o.error_class = cls;
      o.error_text = text;
      reply.kind = FrameKind::kError;
      reply.error_class = cls;
      reply.name = text;
    } else {
      reply.kind = FrameKind::kReply;
      reply.message = o.value;
    }
    waiters.swap(o.waiters);
  }
  cv_.notify_all();
  for (auto [to, call_id] : waiters) {
    Frame r = reply;
    r.id = call_id;
    send(to, std::move(r));
  }
}

void AgentCore::peer_lost(Peer& p, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(p.send_mu);
    if (p.lost.exchange(true)) return;
    p.fd.reset();
    p.out.clear();
  }
  std::vector<Pending> failed;
  bool left;
  bool closing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left = p.said_shutdown;
    closing = closing_;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.peer == p.rank) {
        failed.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    std::erase_if(parked_, [&](const Parked& x) { return x.from == p.rank; });
  }
  cv_.notify_all();
  if (!left && !closing) {
    COHORT_WARN("rpc: worker '{}' lost worker '{}' (rank {}): {}", name_, p.name, p.rank, why);
  }
  for (Pending& x : failed) {
    x.future.set_error(std::make_exception_ptr(PeerLost(fmt::format(
        "rpc: worker '{}' (rank {}) lost while worker '{}' waited for its '{}' call: {}", p.name,
        p.rank, name_, x.fn, why))));
  }
}

void AgentCore::sweep(Clock::time_point now) {
  std::vector<Pending> expired;
  std::vector<Parked> unknown;
  std::string registered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now < earliest_) return;
    earliest_ = Clock::time_point::max();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        expired.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        earliest_ = std::min(earliest_, it->second.deadline);
        ++it;
      }
    }
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->expiry <= now) {
        unknown.push_back(std::move(*it));
        it = parked_.erase(it);
      } else {
        earliest_ = std::min(earliest_, it->expiry);
        ++it;
      }
    }
    if (!unknown.empty()) {
      for (const auto& [fn, h] : handlers_) registered += (registered.empty() ? "" : ", ") + fn;
    }
  }
  for (Pending& x : expired) {
    x.future.set_error(std::make_exception_ptr(TimeoutError(fmt::format(
        "rpc: call of '{}' on worker '{}' (rank {}) from worker '{}' timed out after {} ms", x.fn,
        names_[static_cast<size_t>(x.peer)], x.peer, name_, ms(x.timeout)))));
  }
  for (Parked& x : unknown) {
    reply_error(x.from, x.frame.id, kErrInvalid,
                fmt::format("unknown function '{}' on worker '{}' (rank {}): not registered "
                            "within {} ms (registered: {})",
                            x.frame.name, name_, rank_, ms(opts_.unregistered_grace),
                            registered.empty() ? "none" : registered));
  }
}

// ---------------------------------------------------------------- handler pool

void AgentCore::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (pool_stop_) return;
    tasks_.push_back(std::move(task));
  }
  pool_cv_.notify_one();
}

void AgentCore::handler_loop() {
  t_handler_core = this;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(pool_mu_);
      pool_cv_.wait(lock, [&] { return pool_stop_ || !tasks_.empty(); });
      if (pool_stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_handlers_;
    }
    task();  // run_handler catches everything the handler throws
    task = nullptr;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      --running_handlers_;
    }
  }
}

// ---------------------------------------------------------------- shutdown

namespace {

// Polls cond every few ms until it holds or deadline passes.
template <typename F>
bool wait_until(Clock::time_point deadline, F cond) {
  for (;;) {
    if (cond()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

void AgentCore::shutdown(bool graceful, Duration timeout) {
  Duration t = timeout > Duration::zero() ? timeout : opts_.shutdown_timeout;
  auto deadline = Clock::now() + t;
  if (closed_.load()) return;
  if (!graceful) {
    teardown("shut down", deadline);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) {
      // Another thread runs the shutdown; wait for it to close (bounded).
      cv_.wait_until(lock, deadline, [&] { return closed_.load(); });
      return;
    }
    closing_ = true;
  }
  bool ok = wait_until(deadline, [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.empty();
  });
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank_) continue;
    Frame f;
    f.kind = FrameKind::kShutdown;
    send(r, std::move(f));
  }
  std::vector<std::string> waited;
  std::vector<std::string> lost;
  ok = ok && wait_until(deadline, [&] {
         {
           std::lock_guard<std::mutex> lock(mu_);
           if (!pending_.empty() || !local_.empty()) return false;
           for (auto& up : peers_) {
             if (up && !up->said_shutdown && !up->lost.load()) return false;
           }
         }
         std::lock_guard<std::mutex> lock(pool_mu_);
         return tasks_.empty() && running_handlers_ == 0;
       });
  size_t own_calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    own_calls = pending_.size();
    for (auto& up : peers_) {
      if (!up) continue;
      std::string quoted = "'" + up->name + "'";
      if (!up->said_shutdown && !up->lost.load()) waited.push_back(quoted);
      if (!up->said_shutdown && up->lost.load()) lost.push_back(quoted);
    }
  }
  teardown("shut down", deadline);
  if (!lost.empty()) {
    COHORT_WARN("rpc: worker '{}' shut down without workers [{}] (lost before their shutdown)",
                name_, fmt::join(lost, ", "));
  }
  if (!ok) {
    throw TimeoutError(fmt::format(
        "rpc: worker '{}' shutdown timed out after {} ms: still waiting for workers [{}], {} "
        "outstanding calls of its own, or its running handlers; it closed anyway",
        name_, ms(t), fmt::join(waited, ", "), own_calls));
  }
}

void AgentCore::teardown(const std::string& why, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(teardown_mu_);
    if (torn_down_) return;
    torn_down_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_.store(true);
    closing_ = true;
  }
  cv_.notify_all();
  stop_io_.store(true);
  wake();
  if (io_thread_.joinable()) {
    if (io_thread_.get_id() == std::this_thread::get_id()) {
      io_thread_.detach();
    } else {
      io_thread_.join();
    }
  }
  std::unordered_map<uint64_t, Pending> pending;
  std::vector<Parked> parked;
  std::unordered_map<RRefId, Owned> owned;
  std::deque<Frame> local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    parked.swap(parked_);
    owned.swap(owned_);
    local.swap(local_);
  }
  cv_.notify_all();
  for (auto& [id, x] : pending) {
    x.future.set_error(std::make_exception_ptr(
        Error(fmt::format("rpc: worker '{}' {} while its call of '{}' on worker '{}' was pending",
                          name_, why, x.fn, names_[static_cast<size_t>(x.peer)]))));
  }
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    dropped.swap(tasks_);
  }
  // Handlers still running get failing calls now; give them until the
  // deadline, then leave the stuck ones behind (they hold the core alive).
  bool idle = wait_until(deadline, [&] {
    std::lock_guard<std::mutex> lock(pool_mu_);
    int self = t_handler_core == this ? 1 : 0;
    return running_handlers_ <= self;
  });
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool_stop_ = true;
  }
  pool_cv_.notify_all();
  for (auto& th : pool_) {
    if (!th.joinable()) continue;
    if (!idle || th.get_id() == std::this_thread::get_id()) {
      th.detach();
    } else {
      th.join();
    }
  }
  if (!idle) {
    COHORT_WARN("rpc: worker '{}': handlers still running at shutdown were left behind", name_);
  }
  for (auto& up : peers_) {
    if (!up) continue;
    std::lock_guard<std::mutex> lock(up->send_mu);
    up->lost.store(true);
    up->fd.reset();
    up->out.clear();
  }
}

RRefState::~RRefState() {
  if (core) core->release(owner, id);
}

}  // namespace cohort::rpc::detail
