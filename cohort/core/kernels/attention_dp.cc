// The blocked attention tasks on bf16 products (attention_dp.h).
#include "cohort/core/kernels/attention_dp.h"

#include <algorithm>

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

// c[kn, d] += tile^T b: the transposed tile's panels times b's (over qn);
// band: key row j needs the query columns [j + band.lo, j + 1 + band.hi).
void acc_transposed(const AttentionDpOps& dp, const uint32_t* tt, int64_t kn, int64_t qn, int64_t d,
                    const uint32_t* b, float* c, Band band) {
  const int64_t pq = pairs_of(qn);
  for (int64_t p = 0; p * kPanel < kn; ++p) {
    const int64_t j0 = p * kPanel;  // the panel's rows start at key j0
    dp.dp_acc(std::min(kPanel, kn - j0), d, pq,
              reinterpret_cast<const uint16_t*>(tt + p * pq * kPanel), 2, 2 * kPanel, b, c + j0 * d,
              d, Band{band.lo + j0, band.hi + j0});
  }
}

// Block b (of keys or queries, n rows from b kB) of x's head bh as panels
// along head_dim or across its rows, from the head's cache.
const uint32_t* along(const AttentionDpOps& dp, BlockPanels& cache, Bf16HeadRows x, int64_t bh,
                      int64_t b, int64_t n, int64_t d) {
  return cache.get(bh, b, [&](uint32_t* dst) { pack_keys_along(dp, x, bh, b * kB, n, d, dst); });
}
const uint32_t* across(const AttentionDpOps& dp, BlockPanels& cache, Bf16HeadRows x, int64_t bh,
                       int64_t b, int64_t n, int64_t d) {
  return cache.get(bh, b, [&](uint32_t* dst) { pack_rows_across(dp, x, bh, b * kB, n, d, dst); });
}

// Scores and dS of tile (qb, kb) of head bh: leaves
// P (float32) in sc, dS (scale included) in dsc, both rounded into the
// transposed panels pt / dst, and dS into ds16.
void grad_tile_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                  const DpArgs& a, int64_t bh, int64_t qb, int64_t kb, DpScratch& w) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  const float c = static_cast<float>(s.scale * kLog2e);
  const Band band = rows_q(s, q0, k0);
  dp.dp_scores(qn, kB, d / 2, bits(a.q.head(bh) + q0 * a.q.row_stride), a.q.row_stride, 2,
               along(dp, w.k_along, a.k, bh, kb, kn, d), w.sc.data(), kB, band);
  dp.dp_scores(qn, kB, d / 2, bits(a.dout.head(bh) + q0 * a.dout.row_stride), a.dout.row_stride, 2,
               along(dp, w.v_along, a.v, bh, kb, kn, d), w.dsc.data(), kB, band);
  const float* lse2 = a.rows.lse2 + bh * s.q_len + q0;
  const float* delta = a.rows.delta + bh * s.q_len + q0;
  for (int64_t r = 0; r < qn; ++r) {
    const int64_t n = visible_keys(s, q0 + r, k0, kn);
    float* sr = w.sc.data() + r * kB;
    float* dr = w.dsc.data() + r * kB;
    ops.row_exp(sr, n, kn, c, lse2[r], sr);
    ops.row_ds(sr, dr, n, kn, delta[r], static_cast<float>(s.scale), dr);
  }
  dp.round_transposed(w.sc.data(), kB, qn, w.pt.data());
  dp.round_transposed(w.dsc.data(), kB, qn, w.dst.data());
  dp.round_rows(w.dsc.data(), kB, qn, kn, w.ds16.data());
}

}  // namespace

bool attention_dp_supported(const AttentionShape& s) {
  return attention_dp_ops() != nullptr && s.head_dim % kPanel == 0;
}

DpScratch::DpScratch(const AttentionShape& s)
    : d(s.head_dim),
      pt(static_cast<size_t>(kB / 2 * kB)),
      dst(pt.size()),
      p16(static_cast<size_t>(kB * kB)),
      ds16(p16.size()),
      sc(p16.size()),
      dsc(p16.size()),
      acc0(static_cast<size_t>(kB * d)),
      acc1(acc0.size()) {
  const int64_t words = kB / 2 * d, nkb = num_blocks(s.kv_len), nqb = num_blocks(s.q_len);
  for (BlockPanels* b : {&k_along, &v_along, &k_across, &v_across}) b->reserve(nkb, words);
  for (BlockPanels* b : {&q_across, &dout_across}) b->reserve(nqb, words);
}

void forward_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                     Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v, HeadRows<float> out,
                     float* lse, int64_t bh, int64_t qb, DpScratch& w) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  const float c = static_cast<float>(s.scale * kLog2e);
  float* sc = w.sc.data();
  float* acc = w.acc0.data();  // [qn, d]: the output rows before the division by l
  const uint16_t* qp = bits(q.head(bh) + q0 * q.row_stride);
  OnlineSoftmax softmax(s, q0, qn, acc);
  for (int64_t kb = 0, nkb = num_blocks(s.kv_len); kb < nkb && block_needed(s, qb, kb); ++kb) {
    const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
    const Band band = rows_q(s, q0, k0);
    dp.dp_scores(qn, kB, d / 2, qp, q.row_stride, 2, along(dp, w.k_along, k, bh, kb, kn, d), sc, kB,
                 band);
    softmax.add_tile(ops, sc, k0, kn, c);
    dp.round_rows(sc, kB, qn, kn, w.p16.data());
    dp.dp_acc(qn, d, pairs_of(kn), w.p16.data(), kB, 2, across(dp, w.v_across, v, bh, kb, kn, d),
              acc, d, band);
  }
  softmax.finish(ops, out, lse, bh);
}

void key_task_dp(const AttentionShape& s, const AttentionOps& ops, const AttentionDpOps& dp,
                 const DpArgs& a, int64_t bh, int64_t kb, bool with_dq, DpScratch& w) {
  const int64_t d = s.head_dim, k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  float* dkt = w.acc0.data();  // [kn, d] tiles, copied out at the end
  float* dvt = w.acc1.data();
  std::fill(dkt, dkt + kn * d, 0.0f);
  std::fill(dvt, dvt + kn * d, 0.0f);
  for (int64_t qb = 0, nqb = num_blocks(s.q_len); qb < nqb; ++qb) {
    if (!block_needed(s, qb, kb)) continue;
    const int64_t q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
    grad_tile_dp(s, ops, dp, a, bh, qb, kb, w);
    const Band bk = rows_k(s, q0, k0);
    acc_transposed(dp, w.pt.data(), kn, qn, d, across(dp, w.dout_across, a.dout, bh, qb, qn, d),
                   dvt, bk);
    acc_transposed(dp, w.dst.data(), kn, qn, d, across(dp, w.q_across, a.q, bh, qb, qn, d), dkt,
                   bk);
    if (with_dq)
      dp.dp_acc(qn, d, pairs_of(kn), w.ds16.data(), kB, 2,
                across(dp, w.k_across, a.k, bh, kb, kn, d), a.dq.head(bh) + q0 * a.dq.row_stride,
                a.dq.row_stride, rows_q(s, q0, k0));
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
    const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
    grad_tile_dp(s, ops, dp, a, bh, qb, kb, w);
    dp.dp_acc(qn, d, pairs_of(kn), w.ds16.data(), kB, 2, across(dp, w.k_across, a.k, bh, kb, kn, d),
              dqp, a.dq.row_stride, rows_q(s, q0, k0));
  }
}

}  // namespace cohort::kernels::detail
