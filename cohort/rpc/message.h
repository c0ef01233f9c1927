// Message: what an RPC carries, as bytes: a small header (any bytes the
// caller likes: a tag, a serialized struct, a tensor's dtype and shape) plus
// a list of payload buffers (tensor data, blobs). The rpc layer knows nothing
// of tensors; layers above write their serializer over this (a tensor is one
// header entry plus one buffer; see docs/rpc.md).
//
// Zero copy: add_buffer(ptr, size, keepalive) borrows caller memory; the
// message keeps `keepalive` (e.g. a tensor's storage) alive until the bytes
// are on the wire (or, for a call to this worker itself, until the handler's
// copy of the message is gone). The transport gather-writes header and
// buffers from where they are. Received buffers are owned, 64-byte aligned
// allocations that were read straight off the socket; buffer_owner(i) hands
// out their keep-alive so a tensor can alias them without copying.
//
// Ownership: copying a Message copies the header and shares the buffers (no
// byte copy). Thread safety: a Message is a value; do not mutate one from two
// threads. Buffers shared between copies are read-only by contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cohort::rpc {

class Message {
 public:
  struct Buffer {
    const std::byte* data = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> owner;  // keeps data alive; may be null for size 0
  };

  Message() = default;
  explicit Message(std::string header) : header_(std::move(header)) {}

  // The small header (sent inline with the frame; keep it well under 64 KiB
  // for speed, it is limited to 4 GiB).
  const std::string& header() const { return header_; }
  std::string& header() { return header_; }
  void set_header(std::string header) { header_ = std::move(header); }

  // Borrows [data, data + size): the bytes must stay valid and unchanged
  // while `keepalive` (or anything the caller guarantees) lives.
  void add_buffer(const void* data, size_t size, std::shared_ptr<const void> keepalive);
  // Takes ownership of bytes (moved, not copied).
  void add_buffer(std::vector<std::byte> bytes);
  // Copies size bytes from data into a new owned buffer.
  void add_copy(const void* data, size_t size);
  // A new owned, 64-byte aligned, uninitialized buffer of size bytes that the
  // caller fills before sending; returns where to write.
  std::byte* add_uninitialized(size_t size);

  size_t num_buffers() const { return buffers_.size(); }
  // Throws InvalidArgument when i is out of range.
  std::span<const std::byte> buffer(size_t i) const;
  const std::shared_ptr<const void>& buffer_owner(size_t i) const;
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // Header plus every buffer, in bytes.
  size_t total_bytes() const;

  // Owned, 64-byte aligned, uninitialized storage (what received buffers use).
  static std::shared_ptr<std::byte> allocate(size_t size);

 private:
  std::string header_;
  std::vector<Buffer> buffers_;
};

}  // namespace cohort::rpc
