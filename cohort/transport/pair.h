// Pair: this process's end of a reliable, ordered byte stream in both
// directions with one peer rank (gloo's "pair"). Algorithms see pairs and
// buffers, never sockets or rings: every transport (shared memory, TCP)
// implements the same non-blocking calls, and the Context (context.h) blocks
// for them.
//
// Ownership: a Pair is owned by its Context. Thread safety: one thread at a
// time per direction (the collectives run one op at a time).
// Failure: a broken connection throws cohort::PeerLost naming the peer rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace cohort::transport {

class Pair {
 public:
  Pair(int rank, int peer) : rank_(rank), peer_(peer) {}
  virtual ~Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  int rank() const { return rank_; }
  int peer() const { return peer_; }
  // "shm" or "tcp".
  virtual std::string_view kind() const = 0;

  // Non-blocking: copies up to n bytes into the outgoing stream and returns
  // how many were taken (0 when the stream is full for now).
  virtual size_t write_some(const void* data, size_t n) = 0;
  // Non-blocking gather write: the buffers in order, as one publication (one
  // ring update, one sendmsg), so a small op's header and payload travel
  // together. Returns the bytes taken (a prefix of the concatenation).
  struct Slice {
    const void* data;
    size_t size;
  };
  virtual size_t write_gather(std::span<const Slice> slices) {
    size_t total = 0;
    for (const Slice& s : slices) {
      size_t w = write_some(s.data, s.size);
      total += w;
      if (w < s.size) break;
    }
    return total;
  }
  // Non-blocking: copies up to n bytes out of the incoming stream and returns
  // how many (0 when none has arrived yet).
  virtual size_t read_some(void* data, size_t n) = 0;

  // Zero-copy reads (shared memory): peek() shows incoming bytes in place (one
  // contiguous run, possibly fewer than have arrived); consume(n) releases the
  // first n of them. Transports without it return an empty span from peek().
  virtual bool can_peek() const { return false; }
  virtual std::span<const std::byte> peek() { return {}; }
  virtual void consume(size_t n) {}

  // Single-copy reads of the peer's memory (shared memory pairs whose peer
  // process this one may read with process_vm_readv): copies n bytes at the
  // peer's virtual address `remote` into dst. Throws cohort::PeerLost when
  // the peer is gone.
  virtual bool can_read_peer_memory() const { return false; }
  virtual void read_peer_memory(void* dst, uint64_t remote, size_t n) {}

  // Readiness without moving data, for the waiter's last check before it sleeps.
  virtual bool readable() = 0;
  virtual bool writable() = 0;
  // A file descriptor poll(2) can wait on for this pair, or -1 (shared memory
  // wakes through the Context's doorbell instead).
  virtual int fd() const { return -1; }

 private:
  int rank_;
  int peer_;
};

}  // namespace cohort::transport
