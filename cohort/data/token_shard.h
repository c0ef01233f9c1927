// Token shards: the binary token files that llm.c's data scripts write
// (dev/data/*.py: tinyshakespeare, fineweb, ...) and its trainers read. A shard
// is a header of 256 little-endian int32 -- [0] the magic 20240520, [1] the
// version 1, [2] the token count N, the rest 0 -- followed by N little-endian
// uint16 tokens (GPT-2 token ids, or any vocabulary of at most 65536). llm.c
// names them <name>_train_<k>.bin / <name>_val_<k>.bin (or <name>_train.bin /
// <name>_val.bin); nanoGPT's prepare.py writes the same uint16 tokens with no
// header at all, which read_token_shard recognises and reports.
//
// read_token_shard validates everything and throws, naming the file:
//   IoError          the file is missing or unreadable; shorter than the
//                    header; a wrong magic (saying what was found, and whether
//                    the file looks like plain text or a headerless uint16
//                    file); a version other than 1; a negative count; a file
//                    holding more or fewer bytes than the header's count needs
//                    ("header says N tokens, file holds M");
//   InvalidArgument  a token >= vocab_size (the token, its position in the
//                    file and the vocabulary size).
// write_token_shard writes atomically: a temporary file beside `path`, synced,
// then renamed over it, so a reader never sees half a shard; IoError naming the
// path on failure (the temporary file is removed).
// Both are pure functions of their arguments and the file system; thread safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cohort::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;  // 1024
// The largest vocabulary a uint16 token can index.
inline constexpr int64_t kTokenShardMaxVocab = 65536;

// The tokens of the shard at `path`. Every token must be < vocab_size, which
// must be in [1, 65536].
std::vector<uint16_t> read_token_shard(const std::string& path,
                                       int64_t vocab_size = kTokenShardMaxVocab);

// Writes `tokens` as a shard at `path` (at most 2^31 - 1 tokens: the count is
// an int32 in the header), atomically.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace cohort::data
