// Internal to the attention kernels: the block geometry the blocked
// algorithm's float32 tasks (attention.cc) and its bf16-product tasks
// (attention_dp.cc) share.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cohort/core/kernels/attention.h"
#include "cohort/core/kernels/attention_blocks.h"

namespace cohort::kernels::detail {

constexpr int64_t kB = kAttentionBlock;
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

inline int64_t num_blocks(int64_t n) { return (n + kB - 1) / kB; }

// Whether any query of block qb sees a key of block kb.
inline bool block_needed(const AttentionShape& s, int64_t qb, int64_t kb) {
  return !s.causal || kb * kB <= std::min(qb * kB + kB, s.q_len) - 1;
}

// How many of the kn keys starting at k0 query i sees (a prefix of them).
inline int64_t visible_keys(const AttentionShape& s, int64_t i, int64_t k0, int64_t kn) {
  return s.causal ? std::clamp<int64_t>(i - k0 + 1, 0, kn) : kn;
}

// Tiles of queries from q0 x keys from k0: query row r sees key columns
// j <= r + q0 - k0 (rows_q); key row j is seen by query columns
// i >= j - (q0 - k0) (rows_k).
inline Band rows_q(const AttentionShape& s, int64_t q0, int64_t k0) {
  return s.causal ? Band{-kUnbounded, q0 - k0} : Band{};
}
inline Band rows_k(const AttentionShape& s, int64_t q0, int64_t k0) {
  return s.causal ? Band{k0 - q0, kUnbounded} : Band{};
}

// A forward task's online softmax over its qn query rows: each row's running
// maximum m (base 2) and sum l, and its output rows acc [qn, d] (float32,
// before the division by l).
class OnlineSoftmax {
 public:
  OnlineSoftmax(const AttentionShape& s, int64_t q0, int64_t qn, float* acc);
  // The scores sc [qn, kB] of keys [k0, k0 + kn) become exp2(s c - m) in
  // place (0 where masked), rescaling acc's rows when m grows; c = scale
  // log2(e).
  void add_tile(const AttentionOps& ops, float* sc, int64_t k0, int64_t kn, float c);
  // out's rows = acc / l, lse = the natural log of each row's denominator.
  void finish(const AttentionOps& ops, HeadRows<float> out, float* lse, int64_t bh) const;

 private:
  const AttentionShape& s_;
  int64_t q0_, qn_, d_;
  float* acc_;
  float m_[kB], l_[kB];
};

// Per-row values the backward tiles need: lse in base 2 and delta.
struct RowStats {
  const float* lse2;   // [bh * q_len]
  const float* delta;  // [bh * q_len]
};

}  // namespace cohort::kernels::detail
