#include "cohort/data/token_shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "cohort/base/error.h"
#include "cohort/base/unique_fd.h"

namespace cohort::data {
namespace {

int32_t load_le32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) |
                              (uint32_t{p[3]} << 24));
}

void store_le32(uint8_t* p, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}

// Reads exactly `n` bytes at `offset`; returns how many were there (short at
// end of file).
size_t read_at(int fd, void* dst, size_t n, off_t offset, const std::string& path) {
  auto* d = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, d + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno(fmt::format("read_token_shard: cannot read '{}'", path), errno);
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

void write_all(int fd, const void* src, size_t n, const std::string& what) {
  const auto* s = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t w = ::write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno(what, errno);
    }
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// Whether `bytes` reads as text: printable ASCII, whitespace or UTF-8 bytes,
// with no NUL (uint16 tokens below 256 put a NUL in every other byte).
bool looks_like_text(const uint8_t* bytes, size_t n) {
  if (n == 0) return false;
  size_t printable = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = bytes[i];
    if (c == 0) return false;
    if (c >= 0x20 || c == '\n' || c == '\r' || c == '\t') ++printable;
  }
  return printable * 100 >= n * 98;
}

std::string magic_hint(const uint8_t* head, size_t head_bytes, int64_t file_bytes) {
  if (file_bytes == 0) return "; the file is empty";
  if (head_bytes >= 4 && load_le32(head) == 20240522)
    return "; 20240522 is the magic of llm.c's evaluation files (hellaswag_val.bin: "
           "multiple-choice examples), not a token stream";
  if (looks_like_text(head, head_bytes))
    return "; the file looks like plain text: read it as a byte-level text corpus "
           "(load_text_corpus, `--dataset text`) instead";
  if (file_bytes % 2 == 0)
    return "; if it is a headerless array of uint16 tokens (nanoGPT's prepare.py writes "
           "train.bin/val.bin that way), it needs llm.c's 1024-byte header first (int32 magic "
           "20240520, version 1, token count, 253 zeros), e.g. by write_token_shard";
  return "";
}

}  // namespace

std::vector<uint16_t> read_token_shard(const std::string& path, int64_t vocab_size) {
  COHORT_CHECK(vocab_size >= 1 && vocab_size <= kTokenShardMaxVocab,
               "read_token_shard: vocab_size must be in [1, {}] (uint16 tokens), got {}",
               kTokenShardMaxVocab, vocab_size);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw_errno(fmt::format("read_token_shard: cannot open '{}'", path), errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw_errno(fmt::format("read_token_shard: cannot stat '{}'", path), errno);
  if (S_ISDIR(st.st_mode))
    throw IoError(fmt::format("read_token_shard: '{}' is a directory, not a token shard", path));
  const int64_t file_bytes = st.st_size;

  uint8_t header[kTokenShardHeaderBytes];
  const size_t got = read_at(fd.get(), header, sizeof(header), 0, path);
  const int32_t magic = got >= 4 ? load_le32(header) : 0;
  if (got < 4 || magic != kTokenShardMagic) {
    const std::string found =
        got >= 4 ? fmt::format("magic {} (0x{:08x})", magic, static_cast<uint32_t>(magic))
                 : fmt::format("only {} bytes", got);
    throw IoError(fmt::format(
        "read_token_shard: '{}' is not a token shard: found {}, a shard starts with the int32 "
        "magic {} (llm.c's format: 256 int32 header, then uint16 tokens){}",
        path, found, kTokenShardMagic, magic_hint(header, got, file_bytes)));
  }
  if (got < sizeof(header))
    throw IoError(fmt::format(
        "read_token_shard: '{}' is truncated: {} bytes, shorter than the {}-byte header", path,
        file_bytes, kTokenShardHeaderBytes));
  const int32_t version = load_le32(header + 4);
  if (version != kTokenShardVersion)
    throw IoError(fmt::format(
        "read_token_shard: '{}' has version {}, this reader reads version {} (uint16 tokens)", path,
        version, kTokenShardVersion));
  const int64_t count = load_le32(header + 8);
  if (count < 0)
    throw IoError(
        fmt::format("read_token_shard: '{}' header holds a negative token count {}", path, count));
  const int64_t data_bytes = file_bytes - kTokenShardHeaderBytes;
  if (data_bytes != 2 * count) {
    const std::string odd = data_bytes % 2 != 0 ? " and one odd byte" : "";
    throw IoError(fmt::format(
        "read_token_shard: '{}' is {}: header says {} tokens ({} bytes after the {}-byte header), "
        "file holds {} tokens{} ({} bytes)",
        path, data_bytes < 2 * count ? "truncated" : "longer than its header says", count,
        2 * count, kTokenShardHeaderBytes, data_bytes / 2, odd, data_bytes));
  }

  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  const size_t want = static_cast<size_t>(2 * count);
  if (read_at(fd.get(), tokens.data(), want, kTokenShardHeaderBytes, path) != want)
    throw IoError(fmt::format("read_token_shard: '{}' shrank while being read", path));
  if constexpr (std::endian::native == std::endian::big)
    for (uint16_t& t : tokens) t = static_cast<uint16_t>((t >> 8) | (t << 8));
  if (vocab_size < kTokenShardMaxVocab) {
    const auto bound = static_cast<uint16_t>(vocab_size);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= bound) [[unlikely]]
        throw InvalidArgument(fmt::format(
            "read_token_shard: '{}' holds token {} at position {}, not below the vocabulary size "
            "{}: use a vocabulary of at least {} tokens or the shards of this tokenizer",
            path, tokens[i], i, vocab_size, int64_t{tokens[i]} + 1));
    }
  }
  return tokens;
}

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  COHORT_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX),
               "write_token_shard: '{}': {} tokens do not fit the header's int32 count (at most "
               "{}); split them into several shards",
               path, tokens.size(), INT32_MAX);
  uint8_t header[kTokenShardHeaderBytes] = {};
  store_le32(header, kTokenShardMagic);
  store_le32(header + 4, kTokenShardVersion);
  store_le32(header + 8, static_cast<int32_t>(tokens.size()));

  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const std::string what = fmt::format("write_token_shard: cannot write '{}'", tmp);
  try {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) throw_errno(what, errno);
    write_all(fd.get(), header, sizeof(header), what);
    if constexpr (std::endian::native == std::endian::little) {
      write_all(fd.get(), tokens.data(), tokens.size_bytes(), what);
    } else {
      std::vector<uint16_t> le(tokens.begin(), tokens.end());
      for (uint16_t& t : le) t = static_cast<uint16_t>((t >> 8) | (t << 8));
      write_all(fd.get(), le.data(), le.size() * 2, what);
    }
    if (::fsync(fd.get()) != 0) throw_errno(what, errno);
    if (::close(fd.release()) != 0) throw_errno(what, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw_errno(fmt::format("write_token_shard: cannot rename '{}' to '{}'", tmp, path), errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace cohort::data
