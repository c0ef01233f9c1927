#include "cohort/data/default_corpus.h"

#include <filesystem>

#include "cohort/base/error.h"
#include "cohort/data/idx_reader.h"

namespace cohort::data {
namespace fs = std::filesystem;

std::string read_default_corpus_text(const std::string& dir) {
  const std::string install = fmt::format(
      "install the Debian package '{}' (apt-get install {}; scripts/install_deps.sh does), or "
      "give a text file",
      kDefaultCorpusPackage, kDefaultCorpusPackage);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw IoError(
        fmt::format("default text corpus: directory '{}' does not exist: {}", dir, install));
  std::string text;
  for (const char* name : kDefaultCorpusFiles) {
    const fs::path p = fs::path(dir) / name;
    if (!fs::is_regular_file(p, ec))
      throw IoError(fmt::format("default text corpus: '{}' is missing: {}", p.string(), install));
    const std::string file = read_maybe_gzip(p.string(), "default text corpus");
    // Each line that is only the separator "%" becomes an empty line.
    size_t line = 0;
    while (line < file.size()) {
      size_t end = file.find('\n', line);
      end = end == std::string::npos ? file.size() : end + 1;
      const std::string_view l(file.data() + line, end - line);
      if (l == "%\n" || l == "%") {
        text.push_back('\n');
      } else {
        text.append(l);
      }
      line = end;
    }
  }
  return text;
}

TokenCorpus load_default_corpus(const CorpusOptions& options, const std::string& dir) {
  const std::string text = read_default_corpus_text(dir);
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    tokens[i] = static_cast<uint16_t>(static_cast<unsigned char>(text[i]));
  const int64_t vocab = options.vocab_size != 0 ? options.vocab_size : kByteVocabSize;
  TokenStream all(
      std::move(tokens), vocab,
      fmt::format("the default corpus (Debian package '{}', {})", kDefaultCorpusPackage, dir));
  return split_corpus(all, options, fmt::format("{} ({})", kDefaultCorpusPackage, dir));
}

}  // namespace cohort::data
