// Fuzz inputs for readers that take a path: the bytes in an anonymous
// in-memory file, named through /proc/self/fd (no disk, nothing left behind).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::fuzz {

class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(::memfd_create("cohort-fuzz", MFD_CLOEXEC)) {
    for (size_t off = 0; fd_ >= 0 && off < size;) {
      const ssize_t n = ::write(fd_, data + off, size - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace cohort::fuzz
