#include "cohort/transport/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>
#include <random>
#include <utility>

#include "cohort/base/error.h"
#include "cohort/base/unique_fd.h"

namespace cohort::transport {

namespace {

constexpr uint64_t kMagic = 0x31534D48524F4843ull;  // "CHORHMS1"
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t controls_offset() { return kHeaderBytes; }
size_t data_offset(int size) {
  return round_up(kHeaderBytes + static_cast<size_t>(size) * sizeof(ShmRingControl), kPage);
}

std::string random_name() {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("/cohort-{}-{:016x}", ::getpid(), r);
}

// Calls fn(creator, name) for every segment name in /dev/shm that
// random_name() made ("cohort-<creator pid>-<hex>", name without the '/').
template <typename Fn>
void for_each_segment_name(Fn&& fn) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = ::readdir(dir)) {
    long pid = 0;
    char rest[64];
    if (std::sscanf(e->d_name, "cohort-%ld-%60s", &pid, rest) != 2 || pid <= 0) continue;
    fn(static_cast<pid_t>(pid), std::string(e->d_name));
  }
  ::closedir(dir);
}

// Names are unlinked once every peer has mapped them, so only a rank killed
// during bootstrap leaves one behind. Remove those: ours by name, whose
// creator no longer exists, and old enough (10 min) that no bootstrap can
// still be using them even if the pid belongs to another pid namespace.
void sweep_stale_segments() {
  time_t now = ::time(nullptr);
  for_each_segment_name([&](pid_t pid, const std::string& name) {
    if (::kill(pid, 0) == 0 || errno != ESRCH) return;
    struct stat st {};
    if (::stat(("/dev/shm/" + name).c_str(), &st) != 0 || now - st.st_mtime < 600) return;
    ::shm_unlink(("/" + name).c_str());
  });
}

}  // namespace

int remove_segments_of(pid_t creator) {
  int removed = 0;
  for_each_segment_name([&](pid_t pid, const std::string& name) {
    if (pid == creator && ::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  });
  return removed;
}

size_t ShmSegment::layout_bytes(int size, size_t ring_bytes) {
  return data_offset(size) + static_cast<size_t>(size) * ring_bytes;
}

ShmSegment ShmSegment::create(int owner_rank, int size, size_t ring_bytes) {
  COHORT_CHECK(ring_bytes >= 4096 && (ring_bytes & (ring_bytes - 1)) == 0,
               "shm segment: ring size must be a power of two >= 4096, got {}", ring_bytes);
  sweep_stale_segments();
  ShmSegment seg;
  UniqueFd fd;
  for (int attempt = 0; attempt < 8 && !fd.valid(); ++attempt) {
    seg.name_ = random_name();
    fd.reset(::shm_open(seg.name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
    if (!fd.valid() && errno != EEXIST) throw_errno("shm_open(" + seg.name_ + ")", errno);
  }
  if (!fd.valid()) throw IoError("shm segment: could not find a free /dev/shm name");
  seg.owns_name_ = true;
  seg.bytes_ = layout_bytes(size, ring_bytes);
  if (::ftruncate(fd.get(), static_cast<off_t>(seg.bytes_)) != 0) {
    throw_errno(fmt::format("shm segment: ftruncate({}, {} bytes)", seg.name_, seg.bytes_), errno);
  }
  void* p = ::mmap(nullptr, seg.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw_errno("shm segment: mmap(" + seg.name_ + ")", errno);
  seg.base_ = p;
  // ftruncate zero-fills, which is the initial state of every atomic here.
  ShmSegmentHeader* h = new (p) ShmSegmentHeader();
  h->ring_bytes = ring_bytes;
  h->owner_rank = owner_rank;
  h->size = size;
  for (int r = 0; r < size; ++r) new (seg.ring_control(r)) ShmRingControl();
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, int expected_owner, int expected_size) {
  ShmSegment seg;
  seg.name_ = name;
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR, 0600));
  if (!fd.valid()) {
    throw_errno(fmt::format("shm segment: open {} of rank {}", name, expected_owner), errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno("shm segment: fstat " + name, errno);
  seg.bytes_ = static_cast<size_t>(st.st_size);
  COHORT_CHECK(seg.bytes_ >= kHeaderBytes, "shm segment {}: too small ({} bytes)", name,
               seg.bytes_);
  void* p = ::mmap(nullptr, seg.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw_errno("shm segment: mmap " + name, errno);
  seg.base_ = p;
  const ShmSegmentHeader* h = seg.header();
  COHORT_CHECK(h->magic == kMagic && h->owner_rank == expected_owner && h->size == expected_size &&
                   seg.bytes_ == layout_bytes(h->size, h->ring_bytes),
               "shm segment {}: expected owner rank {} of {}, found rank {} of {} ({} bytes)", name,
               expected_owner, expected_size, h->owner_rank, h->size, seg.bytes_);
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      owns_name_(std::exchange(other.owns_name_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    this->~ShmSegment();
    new (this) ShmSegment(std::move(other));
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink_name();
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

ShmRingControl* ShmSegment::ring_control(int producer) const {
  return reinterpret_cast<ShmRingControl*>(static_cast<char*>(base_) + controls_offset()) +
         producer;
}

std::byte* ShmSegment::ring_data(int producer) const {
  return static_cast<std::byte*>(base_) + data_offset(header()->size) +
         static_cast<size_t>(producer) * header()->ring_bytes;
}

void ShmSegment::unlink_name() {
  if (owns_name_) {
    ::shm_unlink(name_.c_str());
    owns_name_ = false;
  }
}

void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  if (timeout_ns <= 0) return;
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000);
  // EAGAIN (value changed), EINTR and ETIMEDOUT all mean "look again".
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_shared(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace cohort::transport
