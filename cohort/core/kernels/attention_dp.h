// Internal to the attention kernels: the blocked algorithm's tasks with their
// products on AVX512-BF16's vdpbf16ps (bf16 pairs, float32 accumulation),
// for bf16 operands (attention.h's bf16 overloads with bf16_products).
//
// The tiles are those of attention.cc's float32 tasks, and so are the
// softmax, its statistics and the row operations (float32, AttentionOps).
// What differs: every product reads bf16, as flash attention's bf16 kernels
// do. P = exp(s - m) is rounded to bf16 before P v (forward) and P^T dout;
// dS before dS k and dS^T q (by vcvtneps2bf16: to nearest even, subnormal
// values to zero). The row sums l stay those of the float32 P.
// A causal tile's products leave out what its mask leaves out, in whole
// register tiles and pairs (Band, attention_blocks.h): P and dS are zero
// there.
//
// Operand layouts of the products (dp_scores, dp_acc): A is bf16, element (r, 2q + e) at
// a[r * a_rs + q * a_qs + e] (rows of q or P as stored: a_qs = 2; a panel
// of pack_across_k read as rows: a_rs = 2, a_qs = 64); B comes as word
// panels of 32 columns (native/bf16_panels.h), panel p at bp + p * pairs *
// 32 words.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cohort/core/kernels/attention.h"
#include "cohort/core/kernels/attention_blocks.h"
#include "cohort/core/kernels/attention_tiles.h"

namespace cohort::kernels::detail {

struct AttentionDpOps {
  // c[r * ldc + x] = the sum over q < pairs of the two products of pair q,
  // for r < m and x < n (n a multiple of 32), at least for x < r + 1 +
  // band.hi (band.lo is not used): other columns hold their sums or 0.
  void (*dp_scores)(int64_t m, int64_t n, int64_t pairs, const uint16_t* a, int64_t a_rs,
                    int64_t a_qs, const uint32_t* bp, float* c, int64_t ldc, Band band);
  // c[r * ldc + x] += the same sums; pairs of row r wholly outside the inner
  // elements [r + band.lo, r + 1 + band.hi) may be left out (a must be zero
  // there).
  void (*dp_acc)(int64_t m, int64_t n, int64_t pairs, const uint16_t* a, int64_t a_rs, int64_t a_qs,
                 const uint32_t* bp, float* c, int64_t ldc, Band band);
  // dst[r * ld + j] = bf16(src[r * ld + j]) for r < rows, j < cols, 0 for
  // cols <= j < ld (ld a multiple of 16).
  void (*round_rows)(const float* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst);
  // The transposed tile's panels (the A operand of P^T dout and dS^T q):
  // word (q, j) = (bf16(src[2q][j]), bf16(src[2q + 1][j])) at dst + (j / 32)
  // * pairs * 32 + q * 32 + j % 32, pairs = (rows + 1) / 2, the row past an
  // odd `rows` zero; j < ld (a multiple of 32), rows of ld floats.
  void (*round_transposed)(const float* src, int64_t ld, int64_t rows, uint32_t* dst);
  // AttentionOps::row_exp (p[j] = exp2(s[j] c - m), 0 up to n_zero, returns
  // the sum) with a degree-5 polynomial and vscalefps: relative error below
  // 3e-6, against 6e-9 for the float32 kernels' degree 7; P is rounded to
  // bf16 (3.9e-3) before it is multiplied. Values below 2^-127 are 0 and
  // NaN stays NaN, as there.
  float (*row_exp)(const float* s, int64_t n, int64_t n_zero, float c, float m, float* p);
  // native/bf16_panels.h's packers.
  void (*pack_along)(const uint16_t* src, int64_t ld, int rows, int64_t kc, int width,
                     uint32_t* dst);
  void (*pack_across)(const uint16_t* src, int64_t ld, int cols, int64_t kc, int width,
                      uint32_t* dst);
};

// Null unless this CPU has AVX512-BF16.
const AttentionDpOps* attention_dp_ops();

// Whether the bf16-product tasks take shape s here: AVX512-BF16 and a
// head_dim that is a multiple of 32 (whole column panels).
bool attention_dp_supported(const AttentionShape& s);

// The word panels of one operand's blocks of one head (32 x head_dim words
// each), packed on first use and kept while the same head is asked for
// again: a thread's consecutive tasks of one head pack each block once.
class BlockPanels {
 public:
  // Block b of head bh; pack(dst) fills it the first time.
  template <class Pack>
  const uint32_t* get(int64_t bh, int64_t b, Pack pack) {
    if (bh != bh_) {
      std::fill(ready_.begin(), ready_.end(), char{0});
      bh_ = bh;
    }
    uint32_t* dst = buf_.data() + b * words_;
    if (!ready_[static_cast<size_t>(b)]) {
      pack(dst);
      ready_[static_cast<size_t>(b)] = 1;
    }
    return dst;
  }
  void reserve(int64_t blocks, int64_t words) {
    words_ = words;
    buf_.resize(static_cast<size_t>(blocks * words));
    ready_.assign(static_cast<size_t>(blocks), char{0});
  }

 private:
  int64_t bh_ = -1, words_ = 0;
  std::vector<uint32_t> buf_;
  std::vector<char> ready_;
};

// Per task: the head's block panels of k and v (along head_dim for q k^T and
// dout v^T, across keys for P v and dS k) and of q and dout (across queries
// for dS^T q and P^T dout), bf16 tiles of P and dS and their transposed
// panels, and float32 score and accumulator tiles.
class DpScratch {
 public:
  explicit DpScratch(const AttentionShape& s);
  int64_t d;
  BlockPanels k_along, v_along, k_across, v_across, q_across, dout_across;
  std::vector<uint32_t> pt, dst;    // word panels of P^T, dS^T
  std::vector<uint16_t> p16, ds16;  // [kB, kB] bf16
  std::vector<float> sc, dsc, acc0, acc1;
};

struct DpArgs {
  Bf16HeadRows q, k, v, dout;
  RowStats rows;
  HeadRows<float> dq, dk, dv;
};

void forward_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                     Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v, HeadRows<float> out,
                     float* lse, int64_t bh, int64_t qb, DpScratch& scratch);
// dk, dv of key block kb (and, with_dq, dS k added into dq).
void key_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                 const DpArgs& a, int64_t bh, int64_t kb, bool with_dq, DpScratch& scratch);
// dq of query block qb.
void query_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                   const DpArgs& a, int64_t bh, int64_t qb, DpScratch& scratch);

}  // namespace cohort::kernels::detail
