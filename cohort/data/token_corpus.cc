#include "cohort/data/token_corpus.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "cohort/base/error.h"
#include "cohort/data/idx_reader.h"
#include "cohort/data/token_shard.h"

namespace cohort::data {
namespace fs = std::filesystem;

TokenStream::TokenStream(std::vector<uint16_t> tokens, int64_t vocab_size, std::string source)
    : size_(static_cast<int64_t>(tokens.size())),
      vocab_size_(vocab_size),
      source_(std::move(source)) {
  COHORT_CHECK(vocab_size >= 1 && vocab_size <= kTokenShardMaxVocab,
               "TokenStream ({}): vocab_size must be in [1, {}] (uint16 tokens), got {}", source_,
               kTokenShardMaxVocab, vocab_size);
  if (vocab_size < kTokenShardMaxVocab) {
    const auto bound = static_cast<uint16_t>(vocab_size);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= bound) [[unlikely]]
        throw InvalidArgument(fmt::format(
            "TokenStream: {} holds token {} at position {}, not below the vocabulary size {}: use "
            "a vocabulary of at least {} tokens",
            source_, tokens[i], i, vocab_size, int64_t{tokens[i]} + 1));
    }
  }
  storage_ = std::make_shared<const std::vector<uint16_t>>(std::move(tokens));
}

TokenStream TokenStream::slice(int64_t begin, int64_t end, std::string source) const {
  COHORT_CHECK(0 <= begin && begin <= end && end <= size_,
               "TokenStream::slice ({}): [{}, {}) is not within [0, {}]", source_, begin, end,
               size_);
  TokenStream out = *this;
  out.begin_ = begin_ + begin;
  out.size_ = end - begin;
  out.source_ =
      source.empty() ? fmt::format("{} tokens [{}, {})", source_, begin, end) : std::move(source);
  return out;
}

TokenStream read_text_tokens(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw IoError(fmt::format("read_text_tokens: '{}' is a directory, not a text file", path));
  const std::string bytes = read_maybe_gzip(path, "read_text_tokens");
  if (bytes.empty())
    throw IoError(fmt::format(
        "read_text_tokens: '{}' is empty: a text corpus needs at least block_size + 1 bytes "
        "(one window of input and its next-token target)",
        path));
  std::vector<uint16_t> tokens(bytes.size());
  std::transform(bytes.begin(), bytes.end(), tokens.begin(),
                 [](char c) { return static_cast<uint16_t>(static_cast<unsigned char>(c)); });
  return TokenStream(std::move(tokens), kByteVocabSize, fmt::format("'{}'", path));
}

namespace {

void check_options(const CorpusOptions& o, const char* op) {
  COHORT_CHECK(o.val_fraction >= 0.0 && o.val_fraction < 1.0,
               "{}: val_fraction must be in [0, 1), got {}", op, o.val_fraction);
  COHORT_CHECK(o.block_size >= 0, "{}: block_size must be >= 0, got {}", op, o.block_size);
  COHORT_CHECK(o.vocab_size >= 0 && o.vocab_size <= kTokenShardMaxVocab,
               "{}: vocab_size must be in [1, {}] (0: the format's own), got {}", op,
               kTokenShardMaxVocab, o.vocab_size);
}

// Throws unless `s` (not empty, or `required`) holds one window.
void check_split(const TokenStream& s, const CorpusOptions& o, const char* split, bool required,
                 const std::string& hint) {
  if (o.block_size <= 0 || (s.empty() && !required)) return;
  if (s.size() < o.block_size + 1)
    throw InvalidArgument(fmt::format(
        "{} split {} holds {} tokens, fewer than block_size + 1 = {} (one window of block_size "
        "inputs and the next-token target){}",
        split, s.source(), s.size(), o.block_size + 1, hint));
}

// A stream with every token re-checked against `vocab` (a cheap pass).
TokenStream with_vocab(const TokenStream& s, int64_t vocab) {
  std::vector<uint16_t> copy(s.tokens().begin(), s.tokens().end());
  return TokenStream(std::move(copy), vocab, s.source());
}

}  // namespace

TokenCorpus split_corpus(const TokenStream& all, const CorpusOptions& options,
                         const std::string& what) {
  check_options(options, "split_corpus");
  if (options.block_size > 0 && all.size() < options.block_size + 1)
    throw InvalidArgument(
        fmt::format("{} holds {} tokens, fewer than block_size + 1 = {}: use a longer text or a "
                    "smaller block_size",
                    what, all.size(), options.block_size + 1));
  const int64_t n = all.size();
  // nanoGPT's split: train = data[:int(n * 0.9)].
  const auto cut = static_cast<int64_t>(static_cast<double>(n) * (1.0 - options.val_fraction));
  TokenCorpus c;
  c.vocab_size = all.vocab_size();
  c.train = all.slice(0, cut, fmt::format("{} tokens [0, {})", what, cut));
  c.val = all.slice(cut, n, fmt::format("{} tokens [{}, {})", what, cut, n));
  const std::string hint = fmt::format(
      " (val_fraction {} of {} tokens): use a longer text, a smaller block_size or another "
      "val_fraction (0: no validation)",
      options.val_fraction, n);
  check_split(c.train, options, "training", true, hint);
  check_split(c.val, options, "validation", false, hint);
  c.description =
      fmt::format("{}: {} tokens (vocabulary {}), train {} / validation {} (last {:g} %)", what, n,
                  c.vocab_size, c.train.size(), c.val.size(), 100.0 * options.val_fraction);
  return c;
}

TokenCorpus load_text_corpus(const std::string& path, const CorpusOptions& options) {
  check_options(options, "load_text_corpus");
  TokenStream all = read_text_tokens(path);
  if (options.vocab_size != 0 && options.vocab_size != kByteVocabSize)
    all = with_vocab(all, options.vocab_size);
  return split_corpus(all, options, fmt::format("text '{}'", path));
}

bool is_validation_shard(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  return name.find("_val_") != std::string::npos || name.find("_val.") != std::string::npos;
}

std::vector<std::string> expand_token_shards(const std::vector<std::string>& sources) {
  COHORT_CHECK(!sources.empty(), "expand_token_shards: no token shard given");
  std::vector<std::string> files;
  for (const std::string& src : sources) {
    std::error_code ec;
    if (fs::is_directory(src, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(src, ec))
        if (e.path().extension() == ".bin" && !e.is_directory()) found.push_back(e.path().string());
      if (ec)
        throw IoError(fmt::format("expand_token_shards: cannot list '{}': {}", src, ec.message()));
      if (found.empty())
        throw IoError(fmt::format(
            "expand_token_shards: directory '{}' holds no *.bin token shard (llm.c names them "
            "<name>_train_000001.bin, <name>_val_000000.bin)",
            src));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (src.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      const int rc = ::glob(src.c_str(), GLOB_ERR, nullptr, &g);
      std::vector<std::string> found(g.gl_pathv, g.gl_pathv + g.gl_pathc);
      ::globfree(&g);
      if (rc != 0 || found.empty())
        throw IoError(
            fmt::format("expand_token_shards: pattern '{}' matches no file{}", src,
                        rc == GLOB_NOMATCH || rc == 0 ? "" : " (cannot read a directory)"));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      if (!fs::exists(src, ec))
        throw IoError(fmt::format("expand_token_shards: token shard '{}' does not exist", src));
      files.push_back(src);
    }
  }
  return files;
}

namespace {

std::string describe_files(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return fmt::format("'{}'", paths[0]);
  return fmt::format("{} shards '{}' .. '{}'", paths.size(), paths.front(), paths.back());
}

}  // namespace

TokenCorpus load_token_corpus(const std::vector<std::string>& sources,
                              const CorpusOptions& options) {
  check_options(options, "load_token_corpus");
  const int64_t vocab = options.vocab_size != 0 ? options.vocab_size : kGpt2VocabSize;
  std::vector<std::string> train_files, val_files;
  for (std::string& f : expand_token_shards(sources))
    (is_validation_shard(f) ? val_files : train_files).push_back(std::move(f));

  auto read = [&](const std::vector<std::string>& files) {
    std::vector<uint16_t> all;
    for (const std::string& p : files) {
      std::vector<uint16_t> t = read_token_shard(p, vocab);
      all.insert(all.end(), t.begin(), t.end());
    }
    // Checked per file above, naming it; the stream's own check cannot fail.
    return TokenStream(std::move(all), vocab, describe_files(files));
  };

  if (val_files.empty()) {
    TokenCorpus c = split_corpus(read(train_files), options, describe_files(train_files));
    c.vocab_size = vocab;
    return c;
  }
  TokenCorpus c;
  c.vocab_size = vocab;
  c.val = read(val_files);
  if (!train_files.empty()) c.train = read(train_files);
  const std::string hint = ": use longer shards or a smaller block_size";
  if (!train_files.empty()) check_split(c.train, options, "training", true, hint);
  check_split(c.val, options, "validation", false, hint);
  c.description = fmt::format(
      "token shards: train {} tokens from {}, validation {} tokens from {} (vocabulary {})",
      c.train.size(), train_files.empty() ? "no shard" : describe_files(train_files), c.val.size(),
      describe_files(val_files), vocab);
  return c;
}

}  // namespace cohort::data
