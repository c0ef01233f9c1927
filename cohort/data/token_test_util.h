// Test helpers for the token shard, corpus and window tests: shard bytes by
// hand and checks on an exception's message. Tests only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cohort/data/idx_test_util.h"

namespace cohort::data::testing_util {

inline std::string le32(int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  return {static_cast<char>(u), static_cast<char>(u >> 8), static_cast<char>(u >> 16),
          static_cast<char>(u >> 24)};
}

// A shard's bytes by hand: header {magic, version, count, 0...}, then `tokens`
// little-endian.
inline std::string shard_bytes(int32_t magic, int32_t version, int32_t count,
                               const std::vector<uint16_t>& tokens) {
  std::string s = le32(magic) + le32(version) + le32(count) + std::string(1024 - 12, '\0');
  for (uint16_t t : tokens) {
    s.push_back(static_cast<char>(t & 0xff));
    s.push_back(static_cast<char>(t >> 8));
  }
  return s;
}

// The message of the E that `fn` throws (a test failure when it throws none).
template <typename E>
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

inline void expect_all(const std::string& what, std::initializer_list<std::string> needles) {
  for (const std::string& n : needles)
    EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' in: " << what;
}

}  // namespace cohort::data::testing_util
