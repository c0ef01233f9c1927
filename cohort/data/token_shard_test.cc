#include "cohort/data/token_shard.h"

#include <gtest/gtest.h>

#include "cohort/data/token_test_util.h"

namespace cohort::data {
namespace {

using namespace testing_util;
using TokenShardTest = IdxTest;

TEST_F(TokenShardTest, RoundTripsThroughTheFile) {
  const std::vector<uint16_t> tokens{0, 1, 50256, 65535, 7, 256};
  const std::string path = (dir_ / "x_train_000001.bin").string();
  write_token_shard(path, tokens);
  EXPECT_EQ(fs::file_size(path), 1024u + 2 * tokens.size());
  EXPECT_EQ(read_token_shard(path), tokens);
  // The header is llm.c's, byte for byte.
  std::ifstream in(path, std::ios::binary);
  std::string head(12, '\0');
  in.read(head.data(), 12);
  EXPECT_EQ(head, le32(20240520) + le32(1) + le32(6));
  // Only the shard is left in the directory (the temporary file was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(TokenShardTest, RoundTripsAnEmptyShardAndOverwrites) {
  const std::string path = (dir_ / "a.bin").string();
  write_token_shard(path, std::vector<uint16_t>{1, 2, 3});
  write_token_shard(path, std::vector<uint16_t>{});
  EXPECT_TRUE(read_token_shard(path).empty());
  EXPECT_EQ(fs::file_size(path), 1024u);
}

TEST_F(TokenShardTest, ReadsHandWrittenShard) {
  const std::string path = write("h.bin", shard_bytes(20240520, 1, 3, {10, 500, 40000}));
  EXPECT_EQ(read_token_shard(path), (std::vector<uint16_t>{10, 500, 40000}));
}

TEST_F(TokenShardTest, MissingFileNamesPath) {
  const std::string path = (dir_ / "nope.bin").string();
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {"read_token_shard", path, "No such file"});
}

TEST_F(TokenShardTest, WrongMagicSaysWhatWasFoundAndWhatIsRight) {
  const std::string path = write("m.bin", shard_bytes(12345, 1, 0, {}));
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "magic 12345", "20240520"});
}

TEST_F(TokenShardTest, WrongMagicHintsAtPlainText) {
  const std::string path =
      write("t.bin", "First Citizen:\nBefore we proceed any further, hear me.\n");
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "20240520", "plain text", "--dataset text"});
}

TEST_F(TokenShardTest, WrongMagicHintsAtHeaderlessUint16) {
  // nanoGPT's prepare.py: np.uint16 tokens, no header.
  std::string raw;
  for (uint16_t t : {15496u, 11u, 995u, 0u, 50256u, 1169u}) {
    raw.push_back(static_cast<char>(t & 0xff));
    raw.push_back(static_cast<char>(t >> 8));
  }
  const std::string path = write("train.bin", raw);
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "20240520", "headerless", "uint16"});
}

TEST_F(TokenShardTest, EmptyFileAndEvaluationFileAreNamed) {
  const std::string empty = write("e.bin", "");
  expect_all(message_of<IoError>([&] { read_token_shard(empty); }),
             {empty, "only 0 bytes", "20240520", "empty"});
  const std::string eval = write("hellaswag_val.bin", shard_bytes(20240522, 1, 0, {}));
  expect_all(message_of<IoError>([&] { read_token_shard(eval); }),
             {eval, "magic 20240522", "evaluation"});
}

TEST_F(TokenShardTest, WrongVersion) {
  const std::string path = write("v.bin", shard_bytes(20240520, 2, 1, {5}));
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "version 2", "version 1"});
}

TEST_F(TokenShardTest, TruncatedFileSaysBothCounts) {
  const std::string path = write("tr.bin", shard_bytes(20240520, 1, 10, {1, 2, 3, 4, 5, 6, 7}));
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "truncated", "header says 10 tokens", "file holds 7 tokens"});
}

TEST_F(TokenShardTest, LongerFileThanHeaderSays) {
  const std::string path = write("lo.bin", shard_bytes(20240520, 1, 2, {1, 2, 3}));
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "header says 2 tokens", "file holds 3 tokens"});
}

TEST_F(TokenShardTest, ShorterThanTheHeader) {
  const std::string path = write("s.bin", le32(20240520) + le32(1) + le32(0));
  expect_all(message_of<IoError>([&] { read_token_shard(path); }),
             {path, "truncated", "12 bytes", "1024-byte header"});
}

TEST_F(TokenShardTest, TokenAtOrAboveTheVocabularyNamesTokenPositionAndVocab) {
  const std::string path = write("big.bin", shard_bytes(20240520, 1, 4, {1, 2, 300, 4}));
  expect_all(message_of<InvalidArgument>([&] { read_token_shard(path, 256); }),
             {path, "token 300", "position 2", "vocabulary size 256", "at least 301"});
  // The boundary: token 255 is within a vocabulary of 256, 256 is not.
  const std::string edge = write("edge.bin", shard_bytes(20240520, 1, 2, {255, 256}));
  expect_all(message_of<InvalidArgument>([&] { read_token_shard(edge, 256); }),
             {"token 256", "position 1"});
  EXPECT_EQ(read_token_shard(edge, 257).size(), 2u);
  EXPECT_THROW(read_token_shard(edge, 0), InvalidArgument);
  EXPECT_THROW(read_token_shard(edge, 65537), InvalidArgument);
}

TEST_F(TokenShardTest, WriteIntoMissingDirectoryNamesPath) {
  const std::string path = (dir_ / "no" / "such" / "x.bin").string();
  expect_all(message_of<IoError>([&] { write_token_shard(path, std::vector<uint16_t>{1}); }),
             {"write_token_shard", path});
}

}  // namespace
}  // namespace cohort::data
