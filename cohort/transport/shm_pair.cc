#include "cohort/transport/shm_pair.h"

#include <signal.h>
#include <sys/uio.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cohort/base/error.h"

namespace cohort::transport {

namespace {

// Whether process pid is gone or exiting (zombie). An exiting process drops
// its memory before it becomes a zombie, so process_vm_readv fails with
// EFAULT in between: wait a little for the state to settle.
bool process_ended(pid_t pid) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  do {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(f, stat)) return true;
    size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size()) {
      char state = stat[close + 2];
      if (state == 'Z' || state == 'X' || state == 'x') return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

}  // namespace

ShmPair::ShmPair(int rank, int peer, const ShmSegment& own, const ShmSegment& peer_seg)
    : Pair(rank, peer),
      out_(peer_seg.ring_control(rank)),
      out_data_(peer_seg.ring_data(rank)),
      out_head_(out_->head.load(std::memory_order_relaxed)),
      out_tail_seen_(out_->tail.load(std::memory_order_acquire)),
      peer_header_(peer_seg.header()),
      in_(own.ring_control(peer)),
      in_data_(own.ring_data(peer)),
      in_tail_(in_->tail.load(std::memory_order_relaxed)),
      in_head_seen_(in_->head.load(std::memory_order_acquire)),
      cap_(own.ring_bytes()),
      mask_(own.ring_bytes() - 1) {}

size_t ShmPair::copy_in(const void* data, size_t n) {
  if (n == 0) return 0;
  size_t free_bytes = cap_ - static_cast<size_t>(out_head_ - out_tail_seen_);
  if (free_bytes < n) {
    out_tail_seen_ = out_->tail.load(std::memory_order_acquire);
    free_bytes = cap_ - static_cast<size_t>(out_head_ - out_tail_seen_);
    if (free_bytes == 0) return 0;
  }
  n = std::min(n, free_bytes);
  size_t off = static_cast<size_t>(out_head_) & mask_;
  size_t first = std::min(n, cap_ - off);
  std::memcpy(out_data_ + off, data, first);
  if (first < n) std::memcpy(out_data_, static_cast<const std::byte*>(data) + first, n - first);
  out_head_ += n;
  return n;
}

void ShmPair::publish() {
  out_->head.store(out_head_, std::memory_order_release);
  ring_doorbell(peer_header_);
}

size_t ShmPair::write_some(const void* data, size_t n) {
  size_t w = copy_in(data, n);
  if (w > 0) publish();
  return w;
}

size_t ShmPair::write_gather(std::span<const Slice> slices) {
  size_t total = 0;
  for (const Slice& s : slices) {
    size_t w = copy_in(s.data, s.size);
    total += w;
    if (w < s.size) break;
  }
  if (total > 0) publish();
  return total;
}

std::span<const std::byte> ShmPair::peek() {
  // Always reload head: a cached value may end inside an element the
  // producer was still writing, and a reducer waiting for the rest of that
  // element would otherwise never see it.
  in_head_seen_ = in_->head.load(std::memory_order_acquire);
  size_t avail = static_cast<size_t>(in_head_seen_ - in_tail_);
  if (avail == 0) return {};
  size_t off = static_cast<size_t>(in_tail_) & mask_;
  return {in_data_ + off, std::min(avail, cap_ - off)};
}

void ShmPair::consume(size_t n) {
  if (n == 0) return;
  in_tail_ += n;
  in_->tail.store(in_tail_, std::memory_order_release);
  ring_doorbell(peer_header_);
}

size_t ShmPair::read_some(void* data, size_t n) {
  size_t total = 0;
  auto* out = static_cast<std::byte*>(data);
  while (total < n) {
    std::span<const std::byte> s = peek();
    if (s.empty()) break;
    size_t k = std::min(s.size(), n - total);
    std::memcpy(out + total, s.data(), k);
    in_tail_ += k;
    total += k;
  }
  if (total > 0) {
    in_->tail.store(in_tail_, std::memory_order_release);
    ring_doorbell(peer_header_);
  }
  return total;
}

void ShmPair::enable_memory_reads(pid_t pid, uint64_t probe_address, uint64_t expected) {
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(probe_address), sizeof(got)};
  if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(got) && got == expected) {
    peer_pid_ = pid;
  }
}

void ShmPair::read_peer_memory(void* dst, uint64_t remote, size_t n) {
  auto* out = static_cast<std::byte*>(dst);
  while (n > 0) {
    iovec l{out, n};
    iovec r{reinterpret_cast<void*>(remote), n};
    ssize_t got = ::process_vm_readv(peer_pid_, &l, 1, &r, 1, 0);
    if (got > 0) {
      out += got;
      remote += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
      continue;
    }
    int err = got < 0 ? errno : EIO;
    if (err == EINTR) continue;
    if (err == ESRCH || (err == EFAULT && process_ended(peer_pid_))) {
      throw PeerLost(fmt::format("rank {} lost: its process is gone (rank {} reading its memory)",
                                 peer(), rank()));
    }
    throw IoError(errno_message(
        fmt::format("rank {}: process_vm_readv of {} bytes from rank {}", rank(), n, peer()), err));
  }
}

bool ShmPair::readable() {
  in_head_seen_ = in_->head.load(std::memory_order_acquire);
  return in_head_seen_ != in_tail_;
}

bool ShmPair::writable() {
  out_tail_seen_ = out_->tail.load(std::memory_order_acquire);
  return out_head_ - out_tail_seen_ < cap_;
}

}  // namespace cohort::transport
