// Token corpora for language models: a stream of tokens held in memory, read
// from a text file (byte level: vocabulary 256, token = byte value, as
// nanoGPT's shakespeare_char without the character table) or from llm.c token
// shards (token_shard.h), and split into training and validation streams.
//
// Splits: a text corpus's last `val_fraction` of tokens (10 % by default,
// nanoGPT's split: train = tokens[:int(n * 0.9)]) is the validation stream.
// Token shards: the files whose names mark them as validation (`_val_` or
// `_val.` in the name, as llm.c's <name>_val_000000.bin / <name>_val.bin) are
// the validation stream and the others the training stream; when no
// validation file is given, the last `val_fraction` of the training tokens is.
// Several shards concatenate in the order given (directories and globs in
// sorted name order), so a window may span the end of one shard and the start
// of the next, as in one long file.
//
// A TokenStream is immutable and shares its storage (copies and slices are
// cheap); all functions here are pure functions of their arguments and the
// files; thread safe.
//
// Failures name the file and what would be right: IoError for a missing,
// unreadable, empty or malformed file (token_shard.h lists the shard checks)
// and for a directory or glob that names no shard; InvalidArgument for a token
// >= the vocabulary size (token, file, position, vocabulary), a bad option, or
// a split shorter than block_size + 1 tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cohort::data {

// GPT-2's tokenizer (r50k_base): the tokens of llm.c's shards are below this.
inline constexpr int64_t kGpt2VocabSize = 50257;
// Byte-level text: one token per byte.
inline constexpr int64_t kByteVocabSize = 256;

// A contiguous run of tokens, each < vocab_size().
class TokenStream {
 public:
  TokenStream() = default;
  // Takes `tokens` (checked: each < vocab_size, vocab_size in [1, 65536]);
  // `source` says where they came from, for messages ("'a.txt'").
  TokenStream(std::vector<uint16_t> tokens, int64_t vocab_size, std::string source);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t vocab_size() const { return vocab_size_; }
  const std::string& source() const { return source_; }
  std::span<const uint16_t> tokens() const {
    return {storage_ ? storage_->data() + begin_ : nullptr, static_cast<size_t>(size_)};
  }
  // Token i, 0 <= i < size() (unchecked).
  uint16_t operator[](int64_t i) const { return (*storage_)[static_cast<size_t>(begin_ + i)]; }

  // Tokens [begin, end) sharing this stream's storage; `source` describes the
  // part (empty: "<source> tokens [begin, end)").
  TokenStream slice(int64_t begin, int64_t end, std::string source = "") const;

 private:
  std::shared_ptr<const std::vector<uint16_t>> storage_;
  int64_t begin_ = 0;
  int64_t size_ = 0;
  int64_t vocab_size_ = kByteVocabSize;
  std::string source_;
};

struct CorpusOptions {
  // The share of the tokens, at the end, that becomes the validation stream
  // when no validation shards are given; in [0, 1). 0: no validation stream.
  double val_fraction = 0.1;
  // > 0: the training stream, and the validation stream when not empty, must
  // each hold at least block_size + 1 tokens (one window).
  int64_t block_size = 0;
  // Every token must be below it. 0: the format's own, 256 for text and
  // kGpt2VocabSize for token shards. At most 65536.
  int64_t vocab_size = 0;
};

struct TokenCorpus {
  TokenStream train;
  TokenStream val;
  int64_t vocab_size = 0;
  // What was loaded, for a log line: the source, the token counts of both
  // splits and how they were split.
  std::string description;
};

// The bytes of `path` as tokens (vocabulary 256; a gzip file is decompressed).
// IoError naming the file when it is missing, unreadable or empty.
TokenStream read_text_tokens(const std::string& path);

// A byte-level text file split into train and validation.
TokenCorpus load_text_corpus(const std::string& path, const CorpusOptions& options = {});

// Splits a stream of text-like tokens: the last val_fraction is validation.
// `what` names the corpus in messages and the description.
TokenCorpus split_corpus(const TokenStream& all, const CorpusOptions& options,
                         const std::string& what);

// Token shards, each source a file, a directory (its *.bin files) or a glob
// pattern (`data/fineweb_*.bin`), split as described above.
TokenCorpus load_token_corpus(const std::vector<std::string>& sources,
                              const CorpusOptions& options = {});

// The shard files `sources` name, in order: files as given, directories'
// *.bin files and glob matches in sorted order. IoError naming the source when
// a directory or glob matches no file or a named file does not exist.
std::vector<std::string> expand_token_shards(const std::vector<std::string>& sources);

// Whether a shard's file name marks it as validation data (`_val_` or `_val.`
// in its base name, llm.c's naming).
bool is_validation_shard(const std::string& path);

}  // namespace cohort::data
