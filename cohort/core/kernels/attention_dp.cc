// The blocked attention tasks on bf16 products (attention_dp.h).
#include "cohort/core/kernels/attention_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cohort/base/cpu.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::kernels::detail {
namespace {

constexpr int64_t kPanel = 32;  // columns per word panel

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

int64_t pairs_of(int64_t n) { return (n + 1) / 2; }

// K^T or V^T of key block kb as panels along head_dim (for q k^T, dout v^T):
// panel p holds keys [32p, 32p + 32), zero past the block's kn keys.
void pack_keys_along(const AttentionDpOps& dp, Bf16HeadRows x, int64_t bh, int64_t k0, int64_t kn,
                     int64_t d, uint32_t* dst) {
  const uint16_t* src = bits(x.head(bh) + k0 * x.row_stride);
  for (int64_t p = 0; p < kB / kPanel; ++p)
    dp.pack_along(src + p * kPanel * x.row_stride, x.row_stride,
                  static_cast<int>(std::clamp<int64_t>(kn - p * kPanel, 0, kPanel)), d,
                  static_cast<int>(kPanel), dst + p * (d / 2) * kPanel);
}

// n rows of x from row r0 as the B operand of a product over those rows
// (P v, dS k, P^T dout, dS^T q): panels of 32 of the head_dim columns.
void pack_rows_across(const AttentionDpOps& dp, Bf16HeadRows x, int64_t bh, int64_t r0, int64_t n,
                      int64_t d, uint32_t* dst) {
  const uint16_t* src = bits(x.head(bh) + r0 * x.row_stride);
  for (int64_t c = 0; c < d; c += kPanel)
    dp.pack_across(src + c, x.row_stride, static_cast<int>(kPanel), n, static_cast<int>(kPanel),
                   dst + (c / kPanel) * pairs_of(n) * kPanel);
}

// rows x cols of a float tile (ld kB) rounded into a bf16 tile (ld kB), zero
// from column cols to kB.
void round_tile(const float* src, int64_t rows, int64_t cols, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    native::to_bf16(src + r * kB, reinterpret_cast<BFloat16*>(dst + r * kB), cols);
    std::fill(dst + r * kB + cols, dst + (r + 1) * kB, uint16_t{0});
  }
}

// A tile's bf16 rows (P or dS, [qn, kB]) as panels across its qn rows: the
// A operand of P^T dout and dS^T q (key j's word q at panel j / 32).
void transpose_tile(const AttentionDpOps& dp, const uint16_t* t, int64_t qn, uint32_t* dst) {
  for (int64_t p = 0; p < kB / kPanel; ++p)
    dp.pack_across(t + p * kPanel, kB, static_cast<int>(kPanel), qn, static_cast<int>(kPanel),
                   dst + p * pairs_of(qn) * kPanel);
}

// c[kn, d] += tile^T b: the transposed tile's panels times b's (over qn).
void acc_transposed(const AttentionDpOps& dp, const uint32_t* tt, int64_t kn, int64_t qn, int64_t d,
                    const uint32_t* b, float* c) {
  const int64_t pq = pairs_of(qn);
  for (int64_t p = 0; p * kPanel < kn; ++p)
    dp.dp_gemm(std::min(kPanel, kn - p * kPanel), d, pq,
               reinterpret_cast<const uint16_t*>(tt + p * pq * kPanel), 2, 2 * kPanel, b,
               c + p * kPanel * d, d, true);
}

// Scores and dS of tile (qb, kb) of head bh from the packed kp / vp: leaves
// P (float32) in sc, dS (scale included) in dsc, both rounded in p16 / ds16.
void grad_tile_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                  const DpArgs& a, int64_t bh, int64_t qb, int64_t kb, DpScratch& w) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  const float c = static_cast<float>(s.scale * kLog2e);
  dp.dp_gemm(qn, kB, d / 2, bits(a.q.head(bh) + q0 * a.q.row_stride), a.q.row_stride, 2,
             w.kp.data(), w.sc.data(), kB, false);
  dp.dp_gemm(qn, kB, d / 2, bits(a.dout.head(bh) + q0 * a.dout.row_stride), a.dout.row_stride, 2,
             w.vp.data(), w.dsc.data(), kB, false);
  const float* lse2 = a.rows.lse2 + bh * s.q_len + q0;
  const float* delta = a.rows.delta + bh * s.q_len + q0;
  for (int64_t r = 0; r < qn; ++r) {
    const int64_t n = visible_keys(s, q0 + r, k0, kn);
    float* sr = w.sc.data() + r * kB;
    float* dr = w.dsc.data() + r * kB;
    ops.row_exp(sr, n, kn, c, lse2[r], sr);
    ops.row_ds(sr, dr, n, kn, delta[r], static_cast<float>(s.scale), dr);
  }
  round_tile(w.sc.data(), qn, kn, w.p16.data());
  round_tile(w.dsc.data(), qn, kn, w.ds16.data());
}

void pack_key_block(const AttentionDpOps& dp, const AttentionShape& s, const DpArgs& a, int64_t bh,
                    int64_t kb, DpScratch& w) {
  const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  pack_keys_along(dp, a.k, bh, k0, kn, s.head_dim, w.kp.data());
  pack_keys_along(dp, a.v, bh, k0, kn, s.head_dim, w.vp.data());
  pack_rows_across(dp, a.k, bh, k0, kn, s.head_dim, w.kx.data());
}

}  // namespace

bool attention_dp_supported(const AttentionShape& s) {
  return attention_dp_ops() != nullptr && s.head_dim % kPanel == 0;
}

DpScratch::DpScratch(const AttentionShape& s)
    : d(s.head_dim),
      kp(static_cast<size_t>(d / 2 * kB)),
      vp(kp.size()),
      kx(static_cast<size_t>(kB / 2 * d)),
      vx(kx.size()),
      pt(static_cast<size_t>(kB / 2 * kB)),
      dst(pt.size()),
      ox(kx.size()),
      qx(kx.size()),
      p16(static_cast<size_t>(kB * kB)),
      ds16(p16.size()),
      sc(p16.size()),
      dsc(p16.size()),
      acc0(static_cast<size_t>(kB * d)),
      acc1(acc0.size()) {}

void forward_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                     Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v, HeadRows<float> out,
                     float* lse, int64_t bh, int64_t qb, DpScratch& w) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  const float c = static_cast<float>(s.scale * kLog2e);
  float* sc = w.sc.data();
  float* acc = w.acc0.data();  // [qn, d]: the output rows before the division by l
  const uint16_t* qp = bits(q.head(bh) + q0 * q.row_stride);
  std::fill(acc, acc + qn * d, 0.0f);
  float m[kB], l[kB];
  for (int64_t r = 0; r < qn; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0;
  }
  for (int64_t kb = 0, nkb = num_blocks(s.kv_len); kb < nkb && block_needed(s, qb, kb); ++kb) {
    const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
    pack_keys_along(dp, k, bh, k0, kn, d, w.kp.data());
    dp.dp_gemm(qn, kB, d / 2, qp, q.row_stride, 2, w.kp.data(), sc, kB, false);
    for (int64_t r = 0; r < qn; ++r) {
      float* sr = sc + r * kB;
      const int64_t n = visible_keys(s, q0 + r, k0, kn);
      if (n == 0) {
        std::fill(sr, sr + kn, 0.0f);
        continue;
      }
      const float m_new = std::max(m[r], ops.row_max(sr, n, c));
      const float sum = ops.row_exp(sr, n, kn, c, m_new, sr);
      if (l[r] != 0 && m_new != m[r]) {
        const float alpha = std::exp2(m[r] - m_new);
        ops.scale_row(acc + r * d, d, alpha, acc + r * d);
        l[r] *= alpha;
      }
      l[r] += sum;
      m[r] = m_new;
    }
    round_tile(sc, qn, kn, w.p16.data());
    pack_rows_across(dp, v, bh, k0, kn, d, w.vx.data());
    dp.dp_gemm(qn, d, pairs_of(kn), w.p16.data(), kB, 2, w.vx.data(), acc, d, true);
  }
  float* op = out.head(bh) + q0 * out.row_stride;
  for (int64_t r = 0; r < qn; ++r) {
    ops.scale_row(acc + r * d, d, 1.0f / l[r], op + r * out.row_stride);
    lse[bh * s.q_len + q0 + r] = static_cast<float>(m[r] * kLn2 + std::log(l[r]));
  }
}

void key_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                 const DpArgs& a, int64_t bh, int64_t kb, bool with_dq, DpScratch& w) {
  const int64_t d = s.head_dim, k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  float* dkt = w.acc0.data();  // [kn, d] tiles, copied out at the end
  float* dvt = w.acc1.data();
  std::fill(dkt, dkt + kn * d, 0.0f);
  std::fill(dvt, dvt + kn * d, 0.0f);
  pack_key_block(dp, s, a, bh, kb, w);
  for (int64_t qb = 0, nqb = num_blocks(s.q_len); qb < nqb; ++qb) {
    if (!block_needed(s, qb, kb)) continue;
    const int64_t q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
    grad_tile_dp(s, ops, dp, a, bh, qb, kb, w);
    transpose_tile(dp, w.p16.data(), qn, w.pt.data());
    transpose_tile(dp, w.ds16.data(), qn, w.dst.data());
    pack_rows_across(dp, a.dout, bh, q0, qn, d, w.ox.data());
    pack_rows_across(dp, a.q, bh, q0, qn, d, w.qx.data());
    acc_transposed(dp, w.pt.data(), kn, qn, d, w.ox.data(), dvt);
    acc_transposed(dp, w.dst.data(), kn, qn, d, w.qx.data(), dkt);
    if (with_dq)
      dp.dp_gemm(qn, d, pairs_of(kn), w.ds16.data(), kB, 2, w.kx.data(),
                 a.dq.head(bh) + q0 * a.dq.row_stride, a.dq.row_stride, true);
  }
  float* dkp = a.dk.head(bh) + k0 * a.dk.row_stride;
  float* dvp = a.dv.head(bh) + k0 * a.dv.row_stride;
  for (int64_t j = 0; j < kn; ++j) {
    std::copy(dkt + j * d, dkt + (j + 1) * d, dkp + j * a.dk.row_stride);
    std::copy(dvt + j * d, dvt + (j + 1) * d, dvp + j * a.dv.row_stride);
  }
}

void query_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                   const DpArgs& a, int64_t bh, int64_t qb, DpScratch& w) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  float* dqp = a.dq.head(bh) + q0 * a.dq.row_stride;
  for (int64_t r = 0; r < qn; ++r)
    std::fill(dqp + r * a.dq.row_stride, dqp + r * a.dq.row_stride + d, 0.0f);
  for (int64_t kb = 0, nkb = num_blocks(s.kv_len); kb < nkb && block_needed(s, qb, kb); ++kb) {
    const int64_t kn = std::min(kB, s.kv_len - kb * kB);
    pack_key_block(dp, s, a, bh, kb, w);
    grad_tile_dp(s, ops, dp, a, bh, qb, kb, w);
    dp.dp_gemm(qn, d, pairs_of(kn), w.ds16.data(), kB, 2, w.kx.data(), dqp, a.dq.row_stride, true);
  }
}

}  // namespace cohort::kernels::detail
