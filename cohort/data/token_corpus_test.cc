#include "cohort/data/token_corpus.h"

#include <gtest/gtest.h>

#include "cohort/data/token_shard.h"
#include "cohort/data/token_test_util.h"

namespace cohort::data {
namespace {

using namespace testing_util;
using TokenCorpusTest = IdxTest;

std::vector<uint16_t> as_vector(const TokenStream& s) {
  return {s.tokens().begin(), s.tokens().end()};
}

std::string text_of(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>('a' + i % 26));
  return s;
}

std::vector<uint16_t> iota_tokens(uint16_t first, int n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>(first + i);
  return t;
}

TEST_F(TokenCorpusTest, TextIsBytesSplitAsNanoGpt) {
  std::string text = text_of(999) + "\xff";  // a byte >= 128 is a token too
  const std::string path = write("t.txt", text);
  TokenCorpus c = load_text_corpus(path);
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.train.size(), 900);  // int(1000 * 0.9)
  EXPECT_EQ(c.val.size(), 100);
  EXPECT_EQ(c.train[0], 'a');
  EXPECT_EQ(c.train[899], static_cast<uint16_t>('a' + 899 % 26));
  EXPECT_EQ(c.val[0], static_cast<uint16_t>('a' + 900 % 26));
  EXPECT_EQ(c.val[99], 255);
  expect_all(c.description, {path, "1000 tokens", "train 900", "validation 100"});

  CorpusOptions o;
  o.val_fraction = 0.25;
  TokenCorpus q = load_text_corpus(path, o);
  EXPECT_EQ(q.train.size(), 750);
  EXPECT_EQ(q.val.size(), 250);
  o.val_fraction = 0;
  TokenCorpus none = load_text_corpus(path, o);
  EXPECT_EQ(none.train.size(), 1000);
  EXPECT_TRUE(none.val.empty());
}

TEST_F(TokenCorpusTest, TextMayBeGzipped) {
  const std::string path = write("t.txt.gz", text_of(300), true);
  TokenStream s = read_text_tokens(path);
  EXPECT_EQ(s.size(), 300);
  EXPECT_EQ(s[27], 'b');
}

TEST_F(TokenCorpusTest, TextErrors) {
  const std::string missing = (dir_ / "missing.txt").string();
  expect_all(message_of<IoError>([&] { read_text_tokens(missing); }),
             {"read_text_tokens", missing, "No such file"});
  const std::string empty = write("empty.txt", "");
  expect_all(message_of<IoError>([&] { load_text_corpus(empty); }),
             {empty, "is empty", "block_size + 1"});
  const std::string shorter = write("short.txt", text_of(64));
  CorpusOptions o;
  o.block_size = 64;
  expect_all(message_of<InvalidArgument>([&] { load_text_corpus(shorter, o); }),
             {shorter, "64 tokens", "block_size + 1 = 65"});
  // Long enough in all, but the validation split (10 % of 100) is not.
  const std::string hundred = write("hundred.txt", text_of(100));
  o.block_size = 16;
  expect_all(message_of<InvalidArgument>([&] { load_text_corpus(hundred, o); }),
             {"validation split", "10 tokens", "block_size + 1 = 17", "val_fraction"});
  o.val_fraction = 0;  // no validation: fine
  EXPECT_EQ(load_text_corpus(hundred, o).train.size(), 100);
  o.val_fraction = 1.0;
  EXPECT_THROW(load_text_corpus(hundred, o), InvalidArgument);
}

TEST_F(TokenCorpusTest, TextBytesAboveASmallerVocabularyAreNamed) {
  const std::string path = write("v.txt", "ab\xc3\xa9");  // "abé" in UTF-8
  CorpusOptions o;
  o.vocab_size = 128;
  expect_all(message_of<InvalidArgument>([&] { load_text_corpus(path, o); }),
             {path, "token 195", "position 2", "vocabulary size 128"});
}

TEST_F(TokenCorpusTest, ShardsConcatenateInOrderAndValShardsAreValidation) {
  write_token_shard((dir_ / "d_train_000002.bin").string(), iota_tokens(200, 50));
  write_token_shard((dir_ / "d_train_000001.bin").string(), iota_tokens(100, 40));
  write_token_shard((dir_ / "d_val_000000.bin").string(), iota_tokens(7, 30));
  std::vector<uint16_t> train = iota_tokens(100, 40), more = iota_tokens(200, 50);
  train.insert(train.end(), more.begin(), more.end());
  // A directory, a glob, and the files one by one give the same corpus.
  for (const std::vector<std::string>& sources :
       {std::vector<std::string>{dir_.string()},
        std::vector<std::string>{(dir_ / "d_*.bin").string()},
        std::vector<std::string>{(dir_ / "d_train_000001.bin").string(),
                                 (dir_ / "d_train_000002.bin").string(),
                                 (dir_ / "d_val_000000.bin").string()}}) {
    TokenCorpus c = load_token_corpus(sources);
    EXPECT_EQ(c.vocab_size, kGpt2VocabSize);
    EXPECT_EQ(as_vector(c.train), train);
    EXPECT_EQ(as_vector(c.val), iota_tokens(7, 30));
  }
}

TEST_F(TokenCorpusTest, ShardsWithoutValidationShardSplitByFraction) {
  // llm.c's tinyshakespeare naming: <name>_train.bin; a single file.
  const std::string path = (dir_ / "tiny_shakespeare_train.bin").string();
  write_token_shard(path, iota_tokens(0, 100));
  TokenCorpus c = load_token_corpus({path});
  EXPECT_EQ(c.train.size(), 90);
  EXPECT_EQ(c.val.size(), 10);
  EXPECT_EQ(c.val[0], 90);
  EXPECT_TRUE(is_validation_shard((dir_ / "tiny_shakespeare_val.bin").string()));
  EXPECT_TRUE(is_validation_shard("fineweb_val_000000.bin"));
  EXPECT_FALSE(is_validation_shard(path));
  EXPECT_FALSE(is_validation_shard("/data_val_dir/interval.bin"));
}

TEST_F(TokenCorpusTest, OnlyValidationShardsGiveAnEmptyTrainingStream) {
  const std::string path = (dir_ / "x_val_000000.bin").string();
  write_token_shard(path, iota_tokens(0, 20));
  TokenCorpus c = load_token_corpus({path});
  EXPECT_TRUE(c.train.empty());
  EXPECT_EQ(c.val.size(), 20);
}

TEST_F(TokenCorpusTest, ShardTokenAboveGpt2VocabularyNamesFileAndPosition) {
  const std::string path = (dir_ / "g_train_000001.bin").string();
  write_token_shard(path, std::vector<uint16_t>{1, 50256, 50257});
  expect_all(message_of<InvalidArgument>([&] { load_token_corpus({path}); }),
             {path, "token 50257", "position 2", "50257"});
  CorpusOptions o;
  o.vocab_size = 50304;  // GPT-2's padded vocabulary
  EXPECT_EQ(load_token_corpus({path}, o).vocab_size, 50304);
}

TEST_F(TokenCorpusTest, ShardSourcesThatNameNothingAreErrors) {
  expect_all(message_of<IoError>([&] { load_token_corpus({dir_.string()}); }),
             {dir_.string(), "no *.bin"});
  const std::string pattern = (dir_ / "*_train_*.bin").string();
  expect_all(message_of<IoError>([&] { load_token_corpus({pattern}); }),
             {pattern, "matches no file"});
  const std::string missing = (dir_ / "m_train_000001.bin").string();
  expect_all(message_of<IoError>([&] { load_token_corpus({missing}); }),
             {missing, "does not exist"});
  EXPECT_THROW(load_token_corpus({}), InvalidArgument);
}

TEST_F(TokenCorpusTest, ShardsShorterThanOneWindow) {
  write_token_shard((dir_ / "s_train_000001.bin").string(), iota_tokens(0, 100));
  write_token_shard((dir_ / "s_val_000000.bin").string(), iota_tokens(0, 8));
  CorpusOptions o;
  o.block_size = 8;
  expect_all(message_of<InvalidArgument>([&] { load_token_corpus({dir_.string()}, o); }),
             {"validation split", "s_val_000000.bin", "8 tokens", "block_size + 1 = 9"});
  o.block_size = 7;
  EXPECT_EQ(load_token_corpus({dir_.string()}, o).val.size(), 8);
}

TEST(TokenStream, SlicesShareStorageAndCheckBounds) {
  TokenStream s(iota_tokens(0, 10), 16, "'ten'");
  TokenStream part = s.slice(2, 6);
  EXPECT_EQ(part.size(), 4);
  EXPECT_EQ(part[0], 2);
  EXPECT_EQ(part.tokens().data(), s.tokens().data() + 2);
  EXPECT_EQ(part.source(), "'ten' tokens [2, 6)");
  EXPECT_THROW(s.slice(5, 11), InvalidArgument);
  EXPECT_THROW(s.slice(6, 5), InvalidArgument);
  expect_all(message_of<InvalidArgument>([] { TokenStream(iota_tokens(14, 3), 16, "'x'"); }),
             {"'x'", "token 16", "position 2", "vocabulary size 16"});
}

}  // namespace
}  // namespace cohort::data
