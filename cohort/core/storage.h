// Storage: one refcounted, 64-byte-aligned block of bytes that tensors view.
// Owned through std::shared_ptr<Storage>; tensors that are views of each other
// share one Storage. The bytes are uninitialised on creation.
// Thread safety: the object itself is immutable after construction; writes to
// the bytes are the caller's to synchronise.
#pragma once

#include <cstddef>
#include <memory>

namespace cohort {

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // Allocates nbytes (0 allowed). Throws std::bad_alloc when memory runs out.
  explicit Storage(size_t nbytes);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, AlignedFree> data_;
  size_t nbytes_;
};

}  // namespace cohort
