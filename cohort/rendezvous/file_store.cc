#include "cohort/rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/rendezvous/store_util.h"

namespace cohort::rendezvous {
namespace {

// Record layout: u8 kind | u32 key length | key | u64 value length | value.
constexpr uint8_t kRecordSet = 1;
constexpr uint8_t kRecordDelete = 2;
constexpr size_t kHeaderKey = 1 + 4;
constexpr size_t kHeaderValue = 8;

void pwrite_all(int fd, const uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("FileStore: write " + path, errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

uint64_t file_size(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno("FileStore: stat " + path, errno);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

// Holds flock on the store file for a scope. A holder that is stopped or hung
// must not block us forever: the lock is retried until the store's timeout.
class FileStore::FileLock {
 public:
  FileLock(int fd, int mode, const std::string& path, Duration timeout) : fd_(fd) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(100);
    while (::flock(fd_, mode | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) throw_errno("FileStore: flock " + path, errno);
      if (std::chrono::steady_clock::now() >= deadline) {
        throw TimeoutError(
            fmt::format("FileStore: could not lock {} within {} ms", path, timeout.count()));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

FileStore::FileStore(std::string path, Duration timeout) : path_(std::move(path)) {
  timeout_ = timeout;
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw_errno("FileStore: open " + path_, errno);
  fd_.reset(fd);
}

void FileStore::refresh_locked() {
  uint64_t size = file_size(fd_.get(), path_);
  if (size <= offset_) return;
  std::vector<uint8_t> buf(size - offset_);
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t r =
        ::pread(fd_.get(), buf.data() + got, buf.size() - got, static_cast<off_t>(offset_ + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("FileStore: read " + path_, errno);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  size_t pos = 0;
  // Parses whole records only; a torn tail stays unparsed (and is cut by the next writer).
  while (pos + kHeaderKey <= got) {
    uint8_t kind = buf[pos];
    uint32_t key_len;
    std::memcpy(&key_len, &buf[pos + 1], 4);
    size_t p = pos + kHeaderKey;
    if (kind != kRecordSet && kind != kRecordDelete) {
      throw IoError(fmt::format("FileStore {}: corrupt record at offset {}", path_, offset_ + pos));
    }
    if (p + key_len > got) break;
    std::string key(reinterpret_cast<const char*>(&buf[p]), key_len);
    p += key_len;
    if (kind == kRecordDelete) {
      cache_.erase(key);
      pos = p;
      continue;
    }
    if (p + kHeaderValue > got) break;
    uint64_t value_len;
    std::memcpy(&value_len, &buf[p], 8);
    p += kHeaderValue;
    if (value_len > got - p) break;
    cache_[key] = Bytes(buf.begin() + static_cast<ptrdiff_t>(p),
                        buf.begin() + static_cast<ptrdiff_t>(p + value_len));
    pos = p + value_len;
  }
  offset_ += pos;
}

void FileStore::append_locked(const std::string& key, const Bytes* value) {
  refresh_locked();
  // Anything past the last whole record was torn by a writer that died.
  if (file_size(fd_.get(), path_) != offset_) {
    if (::ftruncate(fd_.get(), static_cast<off_t>(offset_)) != 0) {
      throw_errno("FileStore: truncate torn record in " + path_, errno);
    }
  }
  std::vector<uint8_t> rec;
  rec.reserve(kHeaderKey + key.size() + kHeaderValue + (value ? value->size() : 0));
  rec.push_back(value ? kRecordSet : kRecordDelete);
  uint32_t key_len = static_cast<uint32_t>(key.size());
  rec.insert(rec.end(), reinterpret_cast<uint8_t*>(&key_len),
             reinterpret_cast<uint8_t*>(&key_len) + 4);
  rec.insert(rec.end(), key.begin(), key.end());
  if (value) {
    uint64_t value_len = value->size();
    rec.insert(rec.end(), reinterpret_cast<uint8_t*>(&value_len),
               reinterpret_cast<uint8_t*>(&value_len) + 8);
    rec.insert(rec.end(), value->begin(), value->end());
  }
  pwrite_all(fd_.get(), rec.data(), rec.size(), offset_, path_);
  offset_ += rec.size();
  if (value) {
    cache_[key] = *value;
  } else {
    cache_.erase(key);
  }
}

void FileStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> guard(mu_);
  FileLock lock(fd_.get(), LOCK_EX, path_, timeout_);
  append_locked(key, &value);
}

Bytes FileStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> guard(mu_);
  // A delete between the wait and here makes the key vanish; report it as missing.
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    throw TimeoutError(detail::timeout_message("FileStore get", timeout_, {key}, "file " + path_));
  }
  return it->second;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> guard(mu_);
  FileLock lock(fd_.get(), LOCK_EX, path_, timeout_);
  refresh_locked();
  auto it = cache_.find(key);
  int64_t value = (it == cache_.end() ? 0 : detail::parse_counter(key, it->second)) + delta;
  Bytes encoded = detail::format_counter(value);
  append_locked(key, &encoded);
  return value;
}

Bytes FileStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard<std::mutex> guard(mu_);
  FileLock lock(fd_.get(), LOCK_EX, path_, timeout_);
  refresh_locked();
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    if (!expected.empty()) return expected;
  } else if (it->second != expected) {
    return it->second;
  }
  append_locked(key, &desired);
  return desired;
}

bool FileStore::check_fresh(const std::vector<std::string>& keys,
                            std::vector<std::string>* missing) {
  std::lock_guard<std::mutex> guard(mu_);
  FileLock lock(fd_.get(), LOCK_SH, path_, timeout_);
  refresh_locked();
  bool all = true;
  for (const auto& k : keys) {
    if (!cache_.count(k)) {
      all = false;
      if (missing) missing->push_back(k);
    }
  }
  return all;
}

bool FileStore::check(const std::vector<std::string>& keys) { return check_fresh(keys, nullptr); }

bool FileStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> guard(mu_);
  FileLock lock(fd_.get(), LOCK_EX, path_, timeout_);
  refresh_locked();
  if (!cache_.count(key)) return false;
  append_locked(key, nullptr);
  return true;
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    std::vector<std::string> missing;
    if (check_fresh(keys, &missing)) return;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw TimeoutError(
          detail::timeout_message("FileStore wait", timeout, missing, "file " + path_));
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace cohort::rendezvous
