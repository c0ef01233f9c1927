// ShmSegment: one rank's shared-memory segment holding its doorbell (a futex
// word its peers bump to wake it), its current op sequence number (read by
// peers to name who has not arrived at an op), and one single-producer
// single-consumer byte ring per peer for the bytes that peer sends to it.
//
// The owner creates the segment under a unique /dev/shm name, peers open it
// by that name, and the owner unlinks the name once all have mapped it, so a
// crash leaves nothing behind after bootstrap.
//
// Ownership: owns the mapping (and the name until unlink_name()).
// Thread safety: the atomics inside are shared with other processes; the
// object itself is immutable after construction.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::transport {

struct alignas(64) ShmRingControl {
  std::atomic<uint64_t> head{0};  // bytes ever written (producer)
  char pad0[56];
  std::atomic<uint64_t> tail{0};  // bytes ever consumed (consumer)
  char pad1[56];
};

struct alignas(64) ShmSegmentHeader {
  uint64_t magic;
  uint64_t ring_bytes;
  int32_t owner_rank;
  int32_t size;
  char pad0[40];
  std::atomic<uint32_t> doorbell{0};  // futex word: bumped to wake the owner
  std::atomic<uint32_t> sleeping{0};  // > 0 while the owner may sleep on doorbell
  char pad1[56];
  std::atomic<uint64_t> op_seq{0};  // 1 + sequence number of the op the owner is in
  char pad2[56];
};

class ShmSegment {
 public:
  // Creates a new segment for `size` ranks with rings of ring_bytes (a power of two).
  static ShmSegment create(int owner_rank, int size, size_t ring_bytes);
  // Maps an existing segment by name; checks its layout.
  static ShmSegment open(const std::string& name, int expected_owner, int expected_size);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  const std::string& name() const { return name_; }
  ShmSegmentHeader* header() const { return static_cast<ShmSegmentHeader*>(base_); }
  size_t ring_bytes() const { return header()->ring_bytes; }
  // The ring carrying bytes from `producer` to this segment's owner.
  ShmRingControl* ring_control(int producer) const;
  std::byte* ring_data(int producer) const;
  // Removes the /dev/shm name (idempotent); the mapping stays valid.
  void unlink_name();

 private:
  ShmSegment() = default;
  static size_t layout_bytes(int size, size_t ring_bytes);

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool owns_name_ = false;
};

// Futex helpers on a shared (not process-private) word.
// Sleeps while *word == expected, at most timeout_ns.
void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
void futex_wake_shared(std::atomic<uint32_t>* word);

// Wakes the segment owner if it may be sleeping (call after publishing bytes).
inline void ring_doorbell(ShmSegmentHeader* h) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->sleeping.load(std::memory_order_relaxed) != 0) {
    h->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_shared(&h->doorbell);
  }
}

// Unlinks the names of the segments `creator` made (/dev/shm/cohort-<pid>-*)
// and has not unlinked yet. For whoever outlives a process that ended (the
// launcher, for its workers): a rank killed during bootstrap leaves its
// segment's name behind otherwise; nobody else can still be opening it.
// Returns how many were removed.
int remove_segments_of(pid_t creator);

}  // namespace cohort::transport
