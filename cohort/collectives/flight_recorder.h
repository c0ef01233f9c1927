// FlightRecorder: the last N collectives of one communicator, always on
// (PyTorch's NCCL flight recorder, for every op of the native backend):
// sequence number, op, element count, dtype, reduction, root, algorithm,
// state, and when the op first had to wait for a peer. When an op times out
// or a peer fails, the communicator compares the ranks' records through the
// store and the error says who is behind or disagrees (communicator.h); a
// record can be dumped as JSON at any time.
//
// Cost: the hot path reads no clock and takes no lock -- a handful of
// relaxed stores into a preallocated slot (bench/collectives/
// bench_flight_recorder measures it on the 8-byte all_reduce). Times come
// from the clock the op reads anyway when it first stalls: an op that never
// waited was over in microseconds and carries no time; the ops a failure is
// about always waited.
//
// Thread safety: start/finish/waiting from the thread running ops (one at a
// time); snapshot/to_json/summary from any thread (an entry being rewritten
// at that moment may read half old, half new: a diagnostic, never a crash).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/collectives/wire.h"

namespace cohort::collectives {

enum class OpState : uint8_t { kStarted = 0, kCompleted = 1, kFailed = 2 };
const char* op_state_name(OpState s);

struct FlightEntry {
  OpDesc desc;
  OpState state = OpState::kStarted;
  // When the op first waited for a peer; nullopt when it never did.
  std::optional<std::chrono::steady_clock::time_point> waiting_since;
};

class FlightRecorder {
 public:
  // capacity 0: records nothing; others are rounded up to a power of two
  // (a mask, not a division, picks the slot).
  explicit FlightRecorder(size_t capacity);

  // Returns the slot for finish()/waiting(); desc.seq must be set.
  size_t start(const OpDesc& desc) {
    if (capacity_ == 0) return 0;
    const uint64_t n = recorded_.load(std::memory_order_relaxed);
    const size_t slot = static_cast<size_t>(n & mask_);
    Slot& s = slots_[slot];
    s.seq.store(desc.seq, std::memory_order_relaxed);
    s.count.store(desc.count, std::memory_order_relaxed);
    s.kind.store(pack(desc, OpState::kStarted), std::memory_order_relaxed);
    s.root_tag.store((uint64_t{static_cast<uint32_t>(desc.root)} << 32) | desc.tag,
                     std::memory_order_relaxed);
    s.waiting_ns.store(0, std::memory_order_relaxed);
    recorded_.store(n + 1, std::memory_order_release);
    return slot;
  }
  void finish(size_t slot, OpState state) {
    if (capacity_ == 0) return;
    Slot& s = slots_[slot];
    s.kind.store(
        (s.kind.load(std::memory_order_relaxed) & ~uint64_t{0xff}) | static_cast<uint64_t>(state),
        std::memory_order_release);
  }
  // The op in `slot` started waiting for a peer at `when`.
  void waiting(size_t slot, std::chrono::steady_clock::time_point when) {
    if (capacity_ == 0) return;
    slots_[slot].waiting_ns.store(when.time_since_epoch().count(), std::memory_order_relaxed);
  }
  // Marks the newest entry failed if it is still running (the op failing now).
  void fail_newest();

  size_t capacity() const { return capacity_; }
  // Oldest first.
  std::vector<FlightEntry> snapshot() const;
  // {"rank":R,"group":G,"capacity":N,"entries":[{"seq":..,"op":..,"count":..,
  //  "dtype":..,"reduce":..,"root":..,"algo":..,"tag":..,"state":..,
  //  "waiting_since_unix_us":..}]} ("waiting_since..." only for ops that waited).
  std::string to_json(int rank, const std::string& group) const;
  // One line for the failure comparison: "is in all_reduce #57 (2000
  // float32), waiting 3.1 s", "last completed broadcast #56 (...)", or
  // "no collective yet".
  std::string summary() const;

 private:
  struct Slot {
    std::atomic<uint64_t> seq{0}, count{0}, kind{0}, root_tag{0};
    std::atomic<int64_t> waiting_ns{0};
  };
  // kind | dtype << 8 | op << 16 | algo << 24 in the high bytes, state low.
  static uint64_t pack(const OpDesc& d, OpState state) {
    return (uint64_t{static_cast<uint8_t>(d.kind)} << 8) |
           (uint64_t{static_cast<uint8_t>(d.dtype)} << 16) |
           (uint64_t{static_cast<uint8_t>(d.op)} << 24) |
           (uint64_t{static_cast<uint8_t>(d.algo)} << 32) | static_cast<uint64_t>(state);
  }

  size_t capacity_;
  uint64_t mask_ = 0;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> recorded_{0};  // entries ever started
};

}  // namespace cohort::collectives
