#include "cohort/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

#include "cohort/base/error.h"

namespace cohort::checkpoint {
namespace {

std::string parent_dir(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

void write_all(int fd, const void* data, size_t size, const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    // Large writes are split so one call never exceeds what Linux accepts.
    const size_t chunk = std::min<size_t>(size, size_t{1} << 30);
    ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(what, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void pread_all(int fd, void* data, size_t size, uint64_t offset, const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const size_t chunk = std::min<size_t>(size, size_t{1} << 30);
    ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(what, errno);
    }
    if (n == 0) throw IoError(fmt::format("{}: unexpected end of file", what));
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void fsync_directory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) throw_errno(fmt::format("fsync directory '{}': open", dir), errno);
  if (::fsync(fd.get()) != 0) throw_errno(fmt::format("fsync directory '{}'", dir), errno);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path p(path_);
  COHORT_CHECK(!p.filename().empty(), "AtomicFile: '{}' names no file", path_);
  // pid + counter: unique among concurrent writers of this host; O_EXCL
  // catches anything else.
  temp_path_ = (std::filesystem::path(parent_dir(path_)) /
                fmt::format("{}{}.{}.{}", kTempPrefix, p.filename().string(), ::getpid(),
                            counter.fetch_add(1)))
                   .string();
  fd_ = UniqueFd(::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd_.valid())
    throw_errno(fmt::format("write '{}': cannot create temporary file '{}'", path_, temp_path_),
                errno);
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    fd_.reset();
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t size) {
  COHORT_CHECK(!committed_, "AtomicFile: write to '{}' after commit", path_);
  write_all(fd_.get(), data, size, fmt::format("write '{}'", temp_path_));
}

void AtomicFile::commit() {
  COHORT_CHECK(!committed_, "AtomicFile: '{}' committed twice", path_);
  if (::fsync(fd_.get()) != 0) throw_errno(fmt::format("write '{}': fsync", temp_path_), errno);
  const int fd = fd_.release();
  if (::close(fd) != 0) throw_errno(fmt::format("write '{}': close", temp_path_), errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw_errno(fmt::format("write '{}': rename from '{}'", path_, temp_path_), errno);
  committed_ = true;
  fsync_directory(parent_dir(path_));
}

}  // namespace cohort::checkpoint
