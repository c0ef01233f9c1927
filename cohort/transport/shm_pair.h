// ShmPair: a Pair between two processes (or threads) on one host. Bytes to
// the peer go into the ring in the peer's segment (one copy, by the sender);
// bytes from the peer are read in place from the ring in this rank's own
// segment, so a receiver can reduce straight out of shared memory (peek).
// After publishing, each side rings the other's doorbell only if the other
// may be asleep, so the fast path is two atomics and a memcpy.
//
// Ownership: borrows both segments from the Context that owns them.
// Thread safety: one writer thread and one reader thread at most.
#pragma once

#include <sys/types.h>

#include "cohort/transport/pair.h"
#include "cohort/transport/shm_segment.h"

namespace cohort::transport {

class ShmPair final : public Pair {
 public:
  // own: this rank's segment (incoming ring from peer); peer_seg: the peer's.
  ShmPair(int rank, int peer, const ShmSegment& own, const ShmSegment& peer_seg);

  std::string_view kind() const override { return "shm"; }
  size_t write_some(const void* data, size_t n) override;
  size_t write_gather(std::span<const Slice> slices) override;
  size_t read_some(void* data, size_t n) override;
  bool can_peek() const override { return true; }
  std::span<const std::byte> peek() override;
  void consume(size_t n) override;
  bool readable() override;
  bool can_read_peer_memory() const override { return peer_pid_ > 0; }
  void read_peer_memory(void* dst, uint64_t remote, size_t n) override;
  // Probes process_vm_readv on the peer (reading `probe_address`, which must
  // hold `expected`); enables read_peer_memory when it works.
  void enable_memory_reads(pid_t pid, uint64_t probe_address, uint64_t expected);
  bool writable() override;

 private:
  // Copies into the ring without publishing; returns bytes copied.
  size_t copy_in(const void* data, size_t n);
  void publish();

  // Outgoing: ring in the peer's segment.
  ShmRingControl* out_;
  std::byte* out_data_;
  uint64_t out_head_;       // our copy of out_->head (we are its only writer)
  uint64_t out_tail_seen_;  // last tail read from the consumer
  ShmSegmentHeader* peer_header_;
  // Incoming: ring in our segment.
  ShmRingControl* in_;
  std::byte* in_data_;
  uint64_t in_tail_;       // our copy of in_->tail
  uint64_t in_head_seen_;  // last head read from the producer
  size_t cap_;
  size_t mask_;
  pid_t peer_pid_ = 0;
};

}  // namespace cohort::transport
