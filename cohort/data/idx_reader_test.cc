#include "cohort/data/idx_reader.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cohort/data/mnist.h"

namespace cohort::data {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class IdxTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_idx_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes, bool gzip = false) {
    std::string path = (dir_ / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary) << bytes;
    }
    return path;
  }

  fs::path dir_;
};

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// IDX ubyte images [n, rows, cols] with pixel (i, r, c) = i + r + c.
std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string s = std::string("\0\0\x08\x03", 4) + be32(n) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t c = 0; c < cols; ++c) s.push_back(static_cast<char>(i + r + c));
  return s;
}

std::string idx_labels(uint32_t n) {
  std::string s = std::string("\0\0\x08\x01", 4) + be32(n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}

void expect_io_error(const std::function<void()>& fn, const std::string& needle1,
                     const std::string& needle2) {
  try {
    fn();
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(needle1), std::string::npos) << what;
    EXPECT_NE(what.find(needle2), std::string::npos) << what;
  }
}

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

TEST_F(IdxTest, MnistFromGeneratedFiles) {
  write("train-images-idx3-ubyte.gz", idx_images(5, 28, 28), true);
  write("train-labels-idx1-ubyte", idx_labels(5));
  Mnist m(dir_.string(), Split::kTrain);
  EXPECT_EQ(m.size(), 5);
  std::vector<int64_t> idx{4, 1, 4};
  Batch b = m.get_batch(idx);
  EXPECT_EQ(b.input.sizes(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(b.input.dtype(), DType::kFloat32);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{4, 1, 4}));
  // pixel (4, r=2, c=3) = 9 -> 9 / 255 exactly as float32.
  EXPECT_EQ(b.input.data_ptr<float>()[2 * 28 + 3], 9.0f / 255.0f);
  // The fused batch path equals gather-then-convert.
  EXPECT_TRUE(equal(b.input, pixels_to_float(gather_rows(m.images(), idx, "test"))));
  Example e = m.get(1);
  EXPECT_EQ(e.input.sizes(), (Shape{1, 28, 28}));
  EXPECT_EQ(e.target.item<int64_t>(), 1);
  EXPECT_THROW(m.get(5), InvalidArgument);
  EXPECT_THROW(Mnist(dir_.string(), Split::kTest), IoError);  // no t10k files
}

TEST_F(IdxTest, MnistRejectsDisagreeingCounts) {
  std::string images = write("train-images-idx3-ubyte", idx_images(5, 28, 28));
  std::string labels = write("train-labels-idx1-ubyte", idx_labels(6));
  expect_io_error([&] { Mnist m(dir_.string()); }, images, "6 labels");
}

TEST_F(IdxTest, MnistRejectsLabelOutOfRange) {
  write("train-images-idx3-ubyte", idx_images(2, 28, 28));
  std::string labels = write("train-labels-idx1-ubyte",
                             std::string("\0\0\x08\x01", 4) + be32(2) + std::string("\x01\x0b", 2));
  expect_io_error([&] { Mnist m(dir_.string()); }, labels, "label 11");
}

TEST(FashionMnist, MissingDirectoryNamesPathAndPackage) {
  expect_io_error([] { FashionMnist m("/nonexistent/cohort-fmnist"); },
                  "/nonexistent/cohort-fmnist", "dataset-fashion-mnist");
}

TEST(FashionMnist, RealDataSet) {
  if (!fs::is_directory(FashionMnist::kDefaultRoot))
    GTEST_SKIP() << FashionMnist::kDefaultRoot << " absent (apt-get install dataset-fashion-mnist)";
  FashionMnist train(FashionMnist::kDefaultRoot, Split::kTrain);
  FashionMnist test(FashionMnist::kDefaultRoot, Split::kTest);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.images().sizes(), (Shape{60000, 28, 28}));
  // Every class appears 6000 times in the training set.
  std::vector<int64_t> counts(10);
  for (int64_t y : train.labels().to_vector<int64_t>()) ++counts[static_cast<size_t>(y)];
  for (int64_t c : counts) EXPECT_EQ(c, 6000);
  std::vector<int64_t> idx{0, 59999};
  Batch b = train.get_batch(idx);
  EXPECT_EQ(b.input.sizes(), (Shape{2, 1, 28, 28}));
  float lo = 1, hi = 0;
  for (float v : b.input.to_vector<float>()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, 0.0f);
  EXPECT_LE(hi, 1.0f);
  EXPECT_GT(hi, 0.5f);
  EXPECT_EQ(train.labels().to_vector<int64_t>()[0], 9);  // the first image is an ankle boot
}

}  // namespace
}  // namespace cohort::data
