#include "cohort/transport/shm_pair.h"

#include <algorithm>
#include <cstring>

namespace cohort::transport {

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

size_t ShmPair::write_some(const void* data, size_t n) {
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
  out_->head.store(out_head_, std::memory_order_release);
  ring_doorbell(peer_header_);
  return n;
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

bool ShmPair::readable() {
  in_head_seen_ = in_->head.load(std::memory_order_acquire);
  return in_head_seen_ != in_tail_;
}

bool ShmPair::writable() {
  out_tail_seen_ = out_->tail.load(std::memory_order_acquire);
  return out_head_ - out_tail_seen_ < cap_;
}

}  // namespace cohort::transport
