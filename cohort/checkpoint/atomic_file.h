// AtomicFile: writes a file so that readers (and a later run after a crash)
// see either the previous complete file or the new complete file, never a
// partial one. The data goes to a temporary file in the target's directory
// (same file system, so rename is atomic); commit() fsyncs it, renames it
// over the target and fsyncs the directory so the rename itself is durable.
// Destroying an AtomicFile that was not committed removes the temporary file;
// a process killed mid-write leaves it behind under a name starting with
// ".tmp." (never the target's name), which readers ignore.
//
// Errors: IoError naming the path and the system error. EINTR and short
// writes are handled here. Ownership: owns the temporary fd and file until
// commit(). Thread safety: one thread per AtomicFile.
#pragma once

#include <cstddef>
#include <string>

#include "cohort/base/unique_fd.h"

namespace cohort::checkpoint {

class AtomicFile {
 public:
  // Creates the temporary file next to `path`. The directory must exist.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes to the temporary file.
  void write(const void* data, size_t size);
  // Makes the written bytes the content of `path`, durably. Once only.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  UniqueFd fd_;
  bool committed_ = false;
};

// Prefix of the temporary files AtomicFile creates.
inline constexpr const char* kTempPrefix = ".tmp.";

// fsyncs a directory (after creating, renaming or removing entries in it).
void fsync_directory(const std::string& dir);

// Writes `size` bytes to fd at its current position, retrying on EINTR and
// short writes; throws IoError naming `what`.
void write_all(int fd, const void* data, size_t size, const std::string& what);

// Reads exactly `size` bytes at `offset`; throws IoError naming `what` when
// the file ends first.
void pread_all(int fd, void* data, size_t size, uint64_t offset, const std::string& what);

}  // namespace cohort::checkpoint
