#include "cohort/data/default_corpus.h"

#include <gtest/gtest.h>

#include <cctype>

#include "cohort/data/token_test_util.h"
#include "cohort/data/window_sampler.h"

namespace cohort::data {
namespace {

using namespace testing_util;
using DefaultCorpusTest = IdxTest;

TEST_F(DefaultCorpusTest, FilesConcatenateInOrderWithSeparatorsAsEmptyLines) {
  for (const char* name : kDefaultCorpusFiles) write(name, "");
  write("art", "Art is long.\n%\nLife is short.\n%\n");
  write("zippy", "Are we having FUN yet?\n%");
  write("art.dat", "index: not read");
  write("zzz-not-listed", "not read");
  EXPECT_EQ(read_default_corpus_text(dir_.string()),
            "Art is long.\n\nLife is short.\n\nAre we having FUN yet?\n\n");
}

TEST_F(DefaultCorpusTest, MissingPackageIsNamed) {
  const std::string missing = (dir_ / "fortunes").string();
  expect_all(message_of<IoError>([&] { load_default_corpus({}, missing); }),
             {missing, "Debian package 'fortunes'", "apt-get install fortunes"});
  // A directory with a file of the package missing.
  write("art", "x\n");
  expect_all(message_of<IoError>([&] { load_default_corpus({}, dir_.string()); }),
             {(dir_ / "ascii-art").string(), "is missing", "'fortunes'"});
}

TEST(DefaultCorpus, LoadsTheInstalledPackage) {
  if (!fs::is_regular_file(fs::path(kDefaultCorpusDir) / "zippy"))
    GTEST_SKIP() << kDefaultCorpusDir << " absent: apt-get install " << kDefaultCorpusPackage
                 << " (scripts/install_deps.sh --tests installs it)";
  CorpusOptions o;
  o.block_size = 128;
  TokenCorpus c = load_default_corpus(o);
  const int64_t n = c.train.size() + c.val.size();
  EXPECT_GT(n, 2'000'000);  // 2.56 MB in fortunes 1:1.99.1
  EXPECT_EQ(c.train.size(), static_cast<int64_t>(static_cast<double>(n) * 0.9));
  EXPECT_EQ(c.vocab_size, 256);
  expect_all(c.description, {"fortunes", "train", "validation"});
  // English text: mostly letters and spaces, no separator lines left.
  int64_t letters = 0, spaces = 0;
  for (uint16_t t : c.train.tokens()) {
    letters += std::isalpha(t) ? 1 : 0;
    spaces += t == ' ' ? 1 : 0;
  }
  EXPECT_GT(static_cast<double>(letters) / static_cast<double>(c.train.size()), 0.6);
  EXPECT_GT(static_cast<double>(spaces) / static_cast<double>(c.train.size()), 0.1);
  const std::string text = read_default_corpus_text();
  EXPECT_EQ(text.find("\n%\n"), std::string::npos);
  // Windows can be drawn from both splits.
  WindowSampler s(c.train, {.batch_size = 4, .block_size = 128});
  EXPECT_EQ(s.next().input.sizes(), (Shape{4, 128}));
  EvalWindows ev(c.val, {.batch_size = 4, .block_size = 128, .max_batches = 2});
  EXPECT_EQ(ev.num_batches(), 2);
}

}  // namespace
}  // namespace cohort::data
