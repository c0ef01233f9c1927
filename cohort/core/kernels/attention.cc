// The blocked attention algorithm (attention.h) over the block operations of
// the current kernel path (attention_blocks.h).
//
// Forward: one task per (head, block of queries); it walks the key blocks the
// queries can see, keeping each row's running maximum m and sum l, rescaling
// its output row when m grows, and divides by l at the end.
// Backward: delta = rowsum(dout * out) first; then one task per (head, block
// of keys) owns dk and dv of its keys and walks the query blocks that see
// them, recomputing P = exp(s - lse) and dS = P (dP - delta) scale tile by
// tile. dq: when there are at least as many heads as threads, one task per
// head runs all its key blocks in order and adds dS K into dq as it goes;
// otherwise a second pass, one task per (head, block of queries), recomputes
// the tiles and adds dS K for its queries. Both add the same tiles into a dq
// row in the same (key block) order, so the bits do not depend on the choice,
// nor on how the tasks are split over threads.
#include "cohort/core/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/error.h"
#include "cohort/base/isa.h"
#include "cohort/base/parallel.h"
#include "cohort/core/kernels/attention_blocks.h"
#include "cohort/core/kernels/attention_dp.h"
#include "cohort/core/kernels/attention_tiles.h"
#include "cohort/core/native/linalg_bf16.h"

namespace cohort::kernels {
namespace detail {
namespace {

void gemm_nt_base(int64_t rows, int64_t cols, int64_t depth, const float* a, int64_t lda,
                  const float* bt, int64_t ldb, float* c, int64_t ldc, Band band) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0, end = std::min(cols, r + 1 + band.hi); j < end; ++j) {
      float acc = 0;
      for (int64_t d = 0; d < depth; ++d) acc += a[r * lda + d] * bt[d * ldb + j];
      c[r * ldc + j] = acc;
    }
}

void gemm_acc_base(int64_t rows, int64_t n, int64_t depth, const float* a, int64_t a_rs,
                   int64_t a_ks, const float* b, int64_t ldb, float* c, int64_t ldc, Band band) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = std::max<int64_t>(0, r + band.lo), end = std::min(depth, r + 1 + band.hi);
         k < end; ++k) {
      const float x = a[r * a_rs + k * a_ks];
      for (int64_t i = 0; i < n; ++i) c[r * ldc + i] += x * b[k * ldb + i];
    }
}

float row_max_base(const float* s, int64_t n, float c) {
  float m = s[0] * c;
  for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j] * c);
  return m;
}

float row_exp_base(const float* s, int64_t n, int64_t n_zero, float c, float m, float* p) {
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp2(s[j] * c - m);
    sum += p[j];
  }
  for (int64_t j = n; j < n_zero; ++j) p[j] = 0;
  return sum;
}

void row_ds_base(const float* p, const float* dp, int64_t n, int64_t n_zero, float delta,
                 float scale, float* ds) {
  for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (dp[j] - delta) * scale;
  for (int64_t j = n; j < n_zero; ++j) ds[j] = 0;
}

void scale_row_base(const float* x, int64_t n, float a, float* y) {
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] * a;
}

void pack_t_base(const float* src, int64_t rs, int64_t rows, int64_t d, float* dst, int64_t ldd) {
  for (int64_t c = 0; c < d; ++c) {
    float* out = dst + c * ldd;
    for (int64_t j = 0; j < rows; ++j) out[j] = src[j * rs + c];
    std::fill(out + rows, out + ldd, 0.0f);
  }
}

}  // namespace

OnlineSoftmax::OnlineSoftmax(const AttentionShape& s, int64_t q0, int64_t qn, float* acc)
    : s_(s), q0_(q0), qn_(qn), d_(s.head_dim), acc_(acc) {
  std::fill(acc, acc + qn * d_, 0.0f);
  std::fill(m_, m_ + qn, -std::numeric_limits<float>::infinity());
  std::fill(l_, l_ + qn, 0.0f);
}

void OnlineSoftmax::add_tile(const AttentionOps& ops, float* sc, int64_t k0, int64_t kn, float c) {
  for (int64_t r = 0; r < qn_; ++r) {
    float* sr = sc + r * kB;
    const int64_t n = visible_keys(s_, q0_ + r, k0, kn);
    if (n == 0) {
      std::fill(sr, sr + kn, 0.0f);
      continue;
    }
    const float m_new = std::max(m_[r], ops.row_max(sr, n, c));
    const float sum = ops.row_exp(sr, n, kn, c, m_new, sr);
    if (l_[r] != 0 && m_new != m_[r]) {
      const float alpha = std::exp2(m_[r] - m_new);
      ops.scale_row(acc_ + r * d_, d_, alpha, acc_ + r * d_);
      l_[r] *= alpha;
    }
    l_[r] += sum;
    m_[r] = m_new;
  }
}

void OnlineSoftmax::finish(const AttentionOps& ops, HeadRows<float> out, float* lse,
                           int64_t bh) const {
  float* op = out.head(bh) + q0_ * out.row_stride;
  for (int64_t r = 0; r < qn_; ++r) {
    ops.scale_row(acc_ + r * d_, d_, 1.0f / l_[r], op + r * out.row_stride);
    lse[bh * s_.q_len + q0_ + r] = static_cast<float>(m_[r] * kLn2 + std::log(l_[r]));
  }
}

const AttentionOps kAttentionOpsBaseline{gemm_nt_base, gemm_acc_base,  row_max_base, row_exp_base,
                                         row_ds_base,  scale_row_base, pack_t_base};

COHORT_ISA_DECLARE_TABLE(AttentionOps, kAttentionOps)

const AttentionOps* attention_ops() {
  return COHORT_ISA_TABLE(AttentionOps, &kAttentionOpsBaseline, kAttentionOps);
}

}  // namespace detail

namespace {

using detail::AttentionOps;
using detail::Band;
using detail::block_needed;
using detail::kB;
using detail::kLog2e;
using detail::num_blocks;
using detail::OnlineSoftmax;
using detail::rows_k;
using detail::rows_q;
using detail::RowStats;
using detail::visible_keys;

// Per task: packed keys and values [D, kB], two score tiles [kB, kB] and two
// accumulator tiles [kB, D] (out; dk and dv), reused tile after tile.
struct Scratch {
  explicit Scratch(const AttentionShape& s)
      : d(s.head_dim), buf(static_cast<size_t>(attention_scratch_floats(s))) {}
  float* kt() { return buf.data(); }
  float* vt() { return buf.data() + d * kB; }
  float* scores() { return buf.data() + 2 * d * kB; }
  float* dscores() { return buf.data() + 2 * d * kB + kB * kB; }
  float* acc0() { return buf.data() + 2 * d * kB + 2 * kB * kB; }
  float* acc1() { return buf.data() + 3 * d * kB + 2 * kB * kB; }
  int64_t d;
  std::vector<float> buf;
};

void forward_task(const AttentionShape& s, const AttentionOps& ops, ConstHeadRows q,
                  ConstHeadRows k, ConstHeadRows v, HeadRows<float> out, float* lse, int64_t bh,
                  int64_t qb, Scratch& scratch) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  const float c = static_cast<float>(s.scale * kLog2e);
  float* kt = scratch.kt();
  float* sc = scratch.scores();
  float* acc = scratch.acc0();  // [qn, d]: the output rows before the division by l
  const float* qp = q.head(bh) + q0 * q.row_stride;
  OnlineSoftmax softmax(s, q0, qn, acc);
  for (int64_t kb = 0, nkb = num_blocks(s.kv_len); kb < nkb && block_needed(s, qb, kb); ++kb) {
    const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
    ops.pack_t(k.head(bh) + k0 * k.row_stride, k.row_stride, kn, d, kt, kB);
    ops.gemm_nt(qn, kn, d, qp, q.row_stride, kt, kB, sc, kB, rows_q(s, q0, k0));
    softmax.add_tile(ops, sc, k0, kn, c);
    ops.gemm_acc(qn, d, kn, sc, kB, 1, v.head(bh) + k0 * v.row_stride, v.row_stride, acc, d,
                 rows_q(s, q0, k0));
  }
  softmax.finish(ops, out, lse, bh);
}

// The (qb, kb) tile of head bh: leaves P in scratch.scores and dS (scale
// included) in scratch.dscores. kt/vt hold key block kb packed.
void grad_tile(const AttentionShape& s, const AttentionOps& ops, ConstHeadRows q,
               ConstHeadRows dout, RowStats rows, int64_t bh, int64_t qb, int64_t kb,
               Scratch& scratch) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  const float c = static_cast<float>(s.scale * kLog2e);
  float* sc = scratch.scores();
  float* ds = scratch.dscores();
  const Band band = rows_q(s, q0, k0);
  ops.gemm_nt(qn, kn, d, q.head(bh) + q0 * q.row_stride, q.row_stride, scratch.kt(), kB, sc, kB,
              band);
  ops.gemm_nt(qn, kn, d, dout.head(bh) + q0 * dout.row_stride, dout.row_stride, scratch.vt(), kB,
              ds, kB, band);
  const float* lse2 = rows.lse2 + bh * s.q_len + q0;
  const float* delta = rows.delta + bh * s.q_len + q0;
  for (int64_t r = 0; r < qn; ++r) {
    const int64_t n = visible_keys(s, q0 + r, k0, kn);
    ops.row_exp(sc + r * kB, n, kn, c, lse2[r], sc + r * kB);
    ops.row_ds(sc + r * kB, ds + r * kB, n, kn, delta[r], static_cast<float>(s.scale), ds + r * kB);
  }
}

void pack_keys(const AttentionShape& s, const AttentionOps& ops, ConstHeadRows k, ConstHeadRows v,
               int64_t bh, int64_t kb, Scratch& scratch) {
  const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  ops.pack_t(k.head(bh) + k0 * k.row_stride, k.row_stride, kn, s.head_dim, scratch.kt(), kB);
  ops.pack_t(v.head(bh) + k0 * v.row_stride, v.row_stride, kn, s.head_dim, scratch.vt(), kB);
}

void zero_rows(float* p, int64_t rs, int64_t rows, int64_t d) {
  for (int64_t r = 0; r < rows; ++r) std::fill(p + r * rs, p + r * rs + d, 0.0f);
}

struct BackwardArgs {
  ConstHeadRows q, k, v, dout;
  RowStats rows;
  HeadRows<float> dq, dk, dv;
};

// dk, dv of key block kb (and, with_dq, dS K added into dq).
void key_task(const AttentionShape& s, const AttentionOps& ops, const BackwardArgs& a, int64_t bh,
              int64_t kb, bool with_dq, Scratch& scratch) {
  const int64_t d = s.head_dim, k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
  float* dkt = scratch.acc0();  // [kn, d] tiles, copied out at the end
  float* dvt = scratch.acc1();
  std::fill(dkt, dkt + kn * d, 0.0f);
  std::fill(dvt, dvt + kn * d, 0.0f);
  pack_keys(s, ops, a.k, a.v, bh, kb, scratch);
  const float* p = scratch.scores();
  const float* ds = scratch.dscores();
  for (int64_t qb = 0, nqb = num_blocks(s.q_len); qb < nqb; ++qb) {
    if (!block_needed(s, qb, kb)) continue;
    const int64_t q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
    grad_tile(s, ops, a.q, a.dout, a.rows, bh, qb, kb, scratch);
    const Band bk = rows_k(s, q0, k0);
    ops.gemm_acc(kn, d, qn, p, 1, kB, a.dout.head(bh) + q0 * a.dout.row_stride, a.dout.row_stride,
                 dvt, d, bk);
    ops.gemm_acc(kn, d, qn, ds, 1, kB, a.q.head(bh) + q0 * a.q.row_stride, a.q.row_stride, dkt, d,
                 bk);
    if (with_dq)
      ops.gemm_acc(qn, d, kn, ds, kB, 1, a.k.head(bh) + k0 * a.k.row_stride, a.k.row_stride,
                   a.dq.head(bh) + q0 * a.dq.row_stride, a.dq.row_stride, rows_q(s, q0, k0));
  }
  float* dkp = a.dk.head(bh) + k0 * a.dk.row_stride;
  float* dvp = a.dv.head(bh) + k0 * a.dv.row_stride;
  for (int64_t j = 0; j < kn; ++j) {
    std::copy(dkt + j * d, dkt + (j + 1) * d, dkp + j * a.dk.row_stride);
    std::copy(dvt + j * d, dvt + (j + 1) * d, dvp + j * a.dv.row_stride);
  }
}

// dq of query block qb (the second pass).
void query_task(const AttentionShape& s, const AttentionOps& ops, const BackwardArgs& a, int64_t bh,
                int64_t qb, Scratch& scratch) {
  const int64_t d = s.head_dim, q0 = qb * kB, qn = std::min(kB, s.q_len - q0);
  float* dqp = a.dq.head(bh) + q0 * a.dq.row_stride;
  zero_rows(dqp, a.dq.row_stride, qn, d);
  for (int64_t kb = 0, nkb = num_blocks(s.kv_len); kb < nkb && block_needed(s, qb, kb); ++kb) {
    const int64_t k0 = kb * kB, kn = std::min(kB, s.kv_len - k0);
    pack_keys(s, ops, a.k, a.v, bh, kb, scratch);
    grad_tile(s, ops, a.q, a.dout, a.rows, bh, qb, kb, scratch);
    ops.gemm_acc(qn, d, kn, scratch.dscores(), kB, 1, a.k.head(bh) + k0 * a.k.row_stride,
                 a.k.row_stride, dqp, a.dq.row_stride, rows_q(s, q0, k0));
  }
}

// The first `rows` rows of one head of an operand as the block functions
// read it (float32): float32 heads as they are, bfloat16 heads widened into
// a buffer kept while the same head is asked for again.
template <class T>
class Widened;

template <>
class Widened<float> {
 public:
  ConstHeadRows head(ConstHeadRows src, int64_t, int64_t, int64_t) const { return src; }
};

template <>
class Widened<BFloat16> {
 public:
  ConstHeadRows head(Bf16HeadRows src, int64_t bh, int64_t rows, int64_t d) {
    if (bh != bh_) {
      buf_.resize(static_cast<size_t>(rows * d));
      const BFloat16* h = src.head(bh);
      if (src.row_stride == d) {
        native::bf16_to_float(h, buf_.data(), rows * d);
      } else {
        for (int64_t r = 0; r < rows; ++r)
          native::bf16_to_float(h + r * src.row_stride, buf_.data() + r * d, d);
      }
      bh_ = bh;
    }
    // heads 1 and no strides: head(any bh) is the buffer.
    return ConstHeadRows{buf_.data(), 1, 0, 0, d};
  }

 private:
  std::vector<float> buf_;
  int64_t bh_ = -1;
};

// The row operations of the bf16-product tasks: the float32 kernels' with
// the cheaper exp (attention_dp.h).
AttentionOps with_dp_exp(const AttentionOps& ops, const detail::AttentionDpOps& dp) {
  AttentionOps r = ops;
  r.row_exp = dp.row_exp;
  return r;
}

// dp: the bf16-product tasks (attention_dp.h; T = BFloat16 only).
template <class T>
void forward_impl(const AttentionShape& s, HeadRows<const T> q, HeadRows<const T> k,
                  HeadRows<const T> v, HeadRows<float> out, float* lse, bool dp = false) {
  check_attention_shape(s, "attention_forward");
  if (s.batch_heads == 0 || s.q_len == 0) return;
  const AttentionOps& ops = *detail::attention_ops();
  const int64_t nqb = num_blocks(s.q_len), d = s.head_dim;
  parallel_for(0, s.batch_heads * nqb, 1, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (dp) {
        const detail::AttentionDpOps& dpo = *detail::attention_dp_ops();
        const AttentionOps rows = with_dp_exp(ops, dpo);
        detail::DpScratch scratch(s);
        for (int64_t t = b; t < e; ++t)
          detail::forward_task_dp(s, rows, dpo, q, k, v, out, lse, t / nqb, t % nqb, scratch);
        return;
      }
    }
    Scratch scratch(s);
    Widened<T> wq, wk, wv;
    for (int64_t t = b; t < e; ++t) {
      const int64_t bh = t / nqb;
      forward_task(s, ops, wq.head(q, bh, s.q_len, d), wk.head(k, bh, s.kv_len, d),
                   wv.head(v, bh, s.kv_len, d), out, lse, bh, t % nqb, scratch);
    }
  });
}

// The widened operands of head bh.
template <class T>
struct WidenedArgs {
  Widened<T> q, k, v, dout;
  BackwardArgs of(const AttentionShape& s, const BackwardArgs& a, HeadRows<const T> q16,
                  HeadRows<const T> k16, HeadRows<const T> v16, HeadRows<const T> d16, int64_t bh) {
    const int64_t d = s.head_dim;
    return BackwardArgs{q.head(q16, bh, s.q_len, d),
                        k.head(k16, bh, s.kv_len, d),
                        v.head(v16, bh, s.kv_len, d),
                        dout.head(d16, bh, s.q_len, d),
                        a.rows,
                        a.dq,
                        a.dk,
                        a.dv};
  }
};

// Backward's two schedules (the file comment): one task per head running all
// its key blocks with dq, or one per (head, key block) and then one per
// (head, query block). make() gives each parallel chunk its worker (its
// scratch), whose key(bh, kb, with_dq) and query(bh, qb) run the tasks.
template <class MakeWorker>
void backward_schedule(const AttentionShape& s, HeadRows<float> dq, MakeWorker make) {
  const int64_t bh_n = s.batch_heads, nkb = num_blocks(s.kv_len), nqb = num_blocks(s.q_len);
  if (bh_n >= num_threads()) {
    parallel_for(0, bh_n, 1, [&](int64_t b, int64_t e) {
      auto w = make();
      for (int64_t bh = b; bh < e; ++bh) {
        zero_rows(dq.head(bh), dq.row_stride, s.q_len, s.head_dim);
        for (int64_t kb = 0; kb < nkb; ++kb) w.key(bh, kb, true);
      }
    });
    return;
  }
  parallel_for(0, bh_n * nkb, 1, [&](int64_t b, int64_t e) {
    auto w = make();
    for (int64_t t = b; t < e; ++t) w.key(t / nkb, t % nkb, false);
  });
  parallel_for(0, bh_n * nqb, 1, [&](int64_t b, int64_t e) {
    auto w = make();
    for (int64_t t = b; t < e; ++t) w.query(t / nqb, t % nqb);
  });
}

// The float32 tasks on (widened) operands.
template <class T>
struct WidenedWorker {
  const AttentionShape& s;
  const AttentionOps& ops;
  const BackwardArgs& a;
  HeadRows<const T> q, k, v, dout;
  Scratch scratch{s};
  WidenedArgs<T> w{};
  void key(int64_t bh, int64_t kb, bool with_dq) {
    key_task(s, ops, w.of(s, a, q, k, v, dout, bh), bh, kb, with_dq, scratch);
  }
  void query(int64_t bh, int64_t qb) {
    query_task(s, ops, w.of(s, a, q, k, v, dout, bh), bh, qb, scratch);
  }
};

// The bf16-product tasks (attention_dp.h).
struct DpWorker {
  const AttentionShape& s;
  const AttentionOps& ops;  // with the products' exp (with_dp_exp)
  const detail::AttentionDpOps& dp;
  const detail::DpArgs& a;
  detail::DpScratch scratch{s};
  void key(int64_t bh, int64_t kb, bool with_dq) {
    detail::key_task_dp(s, ops, dp, a, bh, kb, with_dq, scratch);
  }
  void query(int64_t bh, int64_t qb) { detail::query_task_dp(s, ops, dp, a, bh, qb, scratch); }
};

template <class T>
void backward_impl(const AttentionShape& s, HeadRows<const T> q, HeadRows<const T> k,
                   HeadRows<const T> v, HeadRows<const T> out, const float* lse,
                   HeadRows<const T> dout, HeadRows<float> dq, HeadRows<float> dk,
                   HeadRows<float> dv, bool dp = false) {
  check_attention_shape(s, "attention_backward");
  if (s.batch_heads == 0) return;
  const int64_t bh_n = s.batch_heads, tq = s.q_len, d = s.head_dim;
  if (tq == 0) {
    for (int64_t bh = 0; bh < bh_n; ++bh) {
      zero_rows(dk.head(bh), dk.row_stride, s.kv_len, d);
      zero_rows(dv.head(bh), dv.row_stride, s.kv_len, d);
    }
    return;
  }
  const AttentionOps& ops = *detail::attention_ops();
  // lse2 and delta: O(q_len) per head.
  std::vector<float> stats(static_cast<size_t>(2 * bh_n * tq));
  float* lse2 = stats.data();
  float* delta = stats.data() + bh_n * tq;
  parallel_for(0, bh_n, 1, [&](int64_t b, int64_t e) {
    Widened<T> wo, wg;
    for (int64_t bh = b; bh < e; ++bh) {
      const ConstHeadRows oh = wo.head(out, bh, tq, d), gh = wg.head(dout, bh, tq, d);
      for (int64_t i = 0; i < tq; ++i) {
        const float* o = oh.head(bh) + i * oh.row_stride;
        const float* g = gh.head(bh) + i * gh.row_stride;
        double acc = 0;
        for (int64_t c = 0; c < d; ++c) acc += static_cast<double>(o[c]) * g[c];
        delta[bh * tq + i] = static_cast<float>(acc);
        lse2[bh * tq + i] = static_cast<float>(lse[bh * tq + i] * kLog2e);
      }
    }
  });
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (dp) {
      const detail::AttentionDpOps& dpo = *detail::attention_dp_ops();
      const AttentionOps rows = with_dp_exp(ops, dpo);
      const detail::DpArgs a{q, k, v, dout, RowStats{lse2, delta}, dq, dk, dv};
      backward_schedule(s, dq, [&] { return DpWorker{s, rows, dpo, a}; });
      return;
    }
  }
  const BackwardArgs a{{}, {}, {}, {}, RowStats{lse2, delta}, dq, dk, dv};
  backward_schedule(s, dq, [&] { return WidenedWorker<T>{s, ops, a, q, k, v, dout}; });
}

}  // namespace

void check_attention_shape(const AttentionShape& s, const char* op) {
  COHORT_CHECK(s.batch_heads >= 0 && s.q_len >= 0 && s.kv_len >= 0,
               "{}: sizes must be >= 0, got batch x heads {}, q_len {}, kv_len {}", op,
               s.batch_heads, s.q_len, s.kv_len);
  COHORT_CHECK(s.head_dim >= 1, "{}: head_dim must be >= 1, got {}", op, s.head_dim);
  COHORT_CHECK(s.kv_len >= 1 || s.q_len == 0 || s.batch_heads == 0,
               "{}: kv_len is 0 but q_len is {}: every query needs at least one key to attend "
               "(its softmax would have no terms)",
               op, s.q_len);
  COHORT_CHECK(std::isfinite(s.scale), "{}: scale must be finite, got {}", op, s.scale);
  int64_t n = 0;
  COHORT_CHECK(!__builtin_mul_overflow(s.batch_heads, std::max(s.q_len, s.kv_len), &n) &&
                   !__builtin_mul_overflow(n, s.head_dim, &n),
               "{}: batch x heads {} x length {} x head_dim {} overflows int64", op, s.batch_heads,
               std::max(s.q_len, s.kv_len), s.head_dim);
}

int64_t attention_scratch_floats(const AttentionShape& s) {
  return 4 * s.head_dim * kB + 2 * kB * kB;
}

void attention_forward(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k, ConstHeadRows v,
                       HeadRows<float> out, float* lse) {
  forward_impl(s, q, k, v, out, lse);
}

void attention_forward(const AttentionShape& s, Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v,
                       HeadRows<float> out, float* lse, bool bf16_products) {
  forward_impl(s, q, k, v, out, lse, bf16_products && detail::attention_dp_supported(s));
}

void attention_backward(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k, ConstHeadRows v,
                        ConstHeadRows out, const float* lse, ConstHeadRows dout, HeadRows<float> dq,
                        HeadRows<float> dk, HeadRows<float> dv) {
  backward_impl(s, q, k, v, out, lse, dout, dq, dk, dv);
}

void attention_backward(const AttentionShape& s, Bf16HeadRows q, Bf16HeadRows k, Bf16HeadRows v,
                        Bf16HeadRows out, const float* lse, Bf16HeadRows dout, HeadRows<float> dq,
                        HeadRows<float> dk, HeadRows<float> dv, bool bf16_products) {
  backward_impl(s, q, k, v, out, lse, dout, dq, dk, dv,
                bf16_products && detail::attention_dp_supported(s));
}

bool attention_bf16_products_supported(const AttentionShape& s) {
  return detail::attention_dp_supported(s);
}

}  // namespace cohort::kernels
