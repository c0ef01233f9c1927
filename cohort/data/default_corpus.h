// The default text corpus, so that `cohort train --model gpt --dataset text`
// runs with no data argument: the fortune cookies of Debian's `fortunes`
// package (section games, Debian main; it pulls in `fortunes-min`), which
// install 43 plain-text files in /usr/share/games/fortunes: 2.58 MB of English
// (quotations, jokes, poems, definitions: Mark Twain, Shakespeare, Pratchett,
// the Tao, computing lore), ASCII but for 10 lines.
//
// Why this package: it is the largest body of English prose in Debian main
// that is stored as plain text (readable with no decoder); a few MB is the
// size of the char-level corpora nanoGPT and llm.c start with (tiny
// Shakespeare is 1.1 MB). The alternatives checked: bible-kjv-text (4.4 MB of
// the King James Bible, but in the `bible` program's own compressed format),
// jargon-text (1.7 MB, half of it box-drawing tables), r-cran-janeaustenr
// (Jane Austen, but as R data with all of R as a dependency), dict-gcide (a
// dictionary, not prose).
//
// The corpus is the package's files in sorted name order (kDefaultCorpusFiles,
// the list shipped by fortunes 1:1.99.1; the .dat indexes and .u8 links are
// not read, nor other fortune packages' files or subdirectories, so the
// corpus is the same on every machine), each line that is only the fortune
// separator "%" made an empty line, so fortunes are separated as paragraphs.
// Bytes are tokens (vocabulary 256) and the last 10 % is validation.
//
// Failures: IoError naming the directory or file and the package to install
// (apt-get install fortunes) when the package is missing. Thread safe.
#pragma once

#include <array>
#include <string>

#include "cohort/data/token_corpus.h"

namespace cohort::data {

inline constexpr const char* kDefaultCorpusPackage = "fortunes";
inline constexpr const char* kDefaultCorpusDir = "/usr/share/games/fortunes";
inline constexpr std::array<const char*, 43> kDefaultCorpusFiles = {
    "art",           "ascii-art",  "computers", "cookie",       "debian",   "definitions",
    "disclaimer",    "drugs",      "education", "ethnic",       "food",     "fortunes",
    "goedel",        "humorists",  "kids",      "knghtbrd",     "law",      "linux",
    "linuxcookie",   "literature", "love",      "magic",        "medicine", "men-women",
    "miscellaneous", "news",       "paradoxum", "people",       "perl",     "pets",
    "platitudes",    "politics",   "pratchett", "riddles",      "science",  "songs-poems",
    "sports",        "startrek",   "tao",       "translate-me", "wisdom",   "work",
    "zippy"};

// The corpus text as described above, read from `dir`.
std::string read_default_corpus_text(const std::string& dir = kDefaultCorpusDir);

// The default corpus as tokens, split by `options` (val_fraction 0.1 by
// default). The description names the package.
TokenCorpus load_default_corpus(const CorpusOptions& options = {},
                                const std::string& dir = kDefaultCorpusDir);

}  // namespace cohort::data
