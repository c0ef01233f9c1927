// Test helpers for the IDX reader and the MNIST datasets: a temporary
// directory per test and generated IDX files. Tests only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cohort/base/error.h"

namespace cohort::data::testing_util {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("cohort_idx_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
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

inline std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// IDX ubyte images [n, rows, cols] with pixel (i, r, c) = i + r + c.
inline std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string s = std::string("\0\0\x08\x03", 4) + be32(n) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t c = 0; c < cols; ++c) s.push_back(static_cast<char>(i + r + c));
  return s;
}

inline std::string idx_labels(uint32_t n) {
  std::string s = std::string("\0\0\x08\x01", 4) + be32(n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}

inline void expect_io_error(const std::function<void()>& fn, const std::string& needle1,
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

}  // namespace cohort::data::testing_util
