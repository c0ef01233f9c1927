// AgentCore's wire side (agent_core.h): sending frames, and the I/O thread
// that reads and parses every peer's frames, dispatches them, notices a
// lost peer and expires timed-out calls. docs/rpc.md describes the frames.
#include "cohort/rpc/agent_core.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/rpc/wire_error.h"

namespace cohort::rpc::detail {

namespace {

constexpr uint32_t kFrameMagic = 0x31435052;  // "RPC1"
// Sanity limits on a frame from the wire: a garbled stream is a lost peer,
// not a 1 TiB allocation.
constexpr uint32_t kMaxNameBytes = 1u << 24;
constexpr uint32_t kMaxBuffers = 1u << 20;
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

}  // namespace

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

}  // namespace cohort::rpc::detail
