#include "cohort/data/idx_reader.h"

#include <gtest/gtest.h>

#include "cohort/data/idx_test_util.h"

namespace cohort::data {
namespace {

using namespace testing_util;

TEST_F(IdxTest, ReadsPlainAndGzip) {
  for (bool gz : {false, true}) {
    std::string p = write(gz ? "a.gz" : "a", idx_images(3, 2, 4), gz);
    Tensor t = read_idx(p);
    EXPECT_EQ(t.sizes(), (Shape{3, 2, 4}));
    EXPECT_EQ(t.dtype(), DType::kUInt8);
    auto v = t.to_vector<uint8_t>();
    EXPECT_EQ(v[2 * 8 + 1 * 4 + 3], 2 + 1 + 3);
  }
}

TEST_F(IdxTest, DecodesBigEndianTypes) {
  std::string ints = std::string("\0\0\x0C\x01", 4) + be32(2) + be32(0x01020304) + be32(0xFFFFFFFE);
  EXPECT_EQ(read_idx(write("i", ints)).to_vector<int32_t>(),
            (std::vector<int32_t>{0x01020304, -2}));
  std::string floats = std::string("\0\0\x0D\x01", 4) + be32(1) + be32(0x3FC00000);  // 1.5f
  EXPECT_EQ(read_idx(write("f", floats)).to_vector<float>(), (std::vector<float>{1.5f}));
  std::string shorts = std::string("\0\0\x0B\x01", 4) + be32(1) + std::string("\xFF\xFD", 2);
  EXPECT_EQ(read_idx(write("s", shorts)).to_vector<int32_t>(), (std::vector<int32_t>{-3}));
}

TEST_F(IdxTest, RejectsNonIdx) {
  std::string p = write("text", "hello, this is not an IDX file");
  expect_io_error([&] { read_idx(p); }, p, "not an IDX file");
  std::string q = write("type", std::string("\0\0\x07\x01", 4) + be32(0));
  expect_io_error([&] { read_idx(q); }, q, "unknown element type 0x07");
  std::string e = write("empty", "");
  expect_io_error([&] { read_idx(e); }, e, "not an IDX file");
}

TEST_F(IdxTest, RejectsTruncatedAndTrailing) {
  std::string full = idx_images(4, 3, 3);
  std::string p = write("short", full.substr(0, full.size() - 5));
  expect_io_error([&] { read_idx(p); }, p, "truncated");
  std::string h = write("header", full.substr(0, 9));
  expect_io_error([&] { read_idx(h); }, h, "truncated");
  std::string t = write("trailing", full + "xx");
  expect_io_error([&] { read_idx(t); }, t, "trailing");
  // A gzip stream cut in the middle.
  std::string gz_path = write("cut.gz", idx_images(50, 28, 28), true);
  std::string gz;
  {
    std::ifstream in(gz_path, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string cut = write("cut2.gz", gz.substr(0, gz.size() / 2));
  expect_io_error([&] { read_idx(cut); }, cut, "truncated");
}

TEST_F(IdxTest, MissingFileNamesPath) {
  std::string p = (dir_ / "nope").string();
  expect_io_error([&] { read_idx(p); }, p, "cannot open");
}

}  // namespace
}  // namespace cohort::data
