#include "cohort/rpc/message.h"

#include <cstring>
#include <new>

#include "cohort/base/error.h"

namespace cohort::rpc {

namespace {

constexpr std::align_val_t kAlign{64};

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete(p, kAlign); }
};

}  // namespace

std::shared_ptr<std::byte> Message::allocate(size_t size) {
  // 64-byte alignment: tensors built over received buffers get vector-friendly data.
  auto* p = static_cast<std::byte*>(::operator new(size == 0 ? 1 : size, kAlign));
  return std::shared_ptr<std::byte>(p, AlignedDelete{});
}

void Message::add_buffer(const void* data, size_t size, std::shared_ptr<const void> keepalive) {
  COHORT_CHECK(data != nullptr || size == 0, "rpc: Message::add_buffer got null data of {} bytes",
               size);
  buffers_.push_back({static_cast<const std::byte*>(data), size, std::move(keepalive)});
}

void Message::add_buffer(std::vector<std::byte> bytes) {
  auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  buffers_.push_back({owner->data(), owner->size(), owner});
}

void Message::add_copy(const void* data, size_t size) {
  std::byte* dst = add_uninitialized(size);
  if (size > 0) std::memcpy(dst, data, size);
}

std::byte* Message::add_uninitialized(size_t size) {
  std::shared_ptr<std::byte> owner = allocate(size);
  std::byte* p = owner.get();
  buffers_.push_back({p, size, std::move(owner)});
  return p;
}

std::span<const std::byte> Message::buffer(size_t i) const {
  COHORT_CHECK(i < buffers_.size(), "rpc: Message::buffer({}) but the message has {} buffers", i,
               buffers_.size());
  return {buffers_[i].data, buffers_[i].size};
}

const std::shared_ptr<const void>& Message::buffer_owner(size_t i) const {
  COHORT_CHECK(i < buffers_.size(), "rpc: Message::buffer_owner({}) but the message has {} buffers",
               i, buffers_.size());
  return buffers_[i].owner;
}

size_t Message::total_bytes() const {
  size_t n = header_.size();
  for (const Buffer& b : buffers_) n += b.size;
  return n;
}

}  // namespace cohort::rpc
