// The attention oracles: plain loops that materialise each head's scores in
// double (attention.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cohort/core/kernels/attention.h"

namespace cohort::kernels {
namespace {

// probs[i * kv_len + j] = softmax row i of (q k^T * scale + mask) for head bh;
// lse[i] its log-sum-exp. Masked entries are exactly 0.
void head_probs(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k, int64_t bh,
                std::vector<double>& probs, std::vector<double>& lse) {
  const int64_t tq = s.q_len, tk = s.kv_len, d = s.head_dim;
  probs.assign(static_cast<size_t>(tq * tk), 0.0);
  lse.assign(static_cast<size_t>(tq), 0.0);
  const float* qh = q.head(bh);
  const float* kh = k.head(bh);
  for (int64_t i = 0; i < tq; ++i) {
    const int64_t n = s.causal ? std::min(i + 1, tk) : tk;
    double* row = probs.data() + i * tk;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += static_cast<double>(qh[i * q.row_stride + c]) * kh[j * k.row_stride + c];
      row[j] = dot * s.scale;
      mx = std::max(mx, row[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
    for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - mx) / sum;
    lse[static_cast<size_t>(i)] = mx + std::log(sum);
  }
}

}  // namespace

void attention_forward_reference(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k,
                                 ConstHeadRows v, HeadRows<float> out, float* lse) {
  check_attention_shape(s, "attention_forward_reference");
  const int64_t tq = s.q_len, tk = s.kv_len, d = s.head_dim;
  std::vector<double> probs, row_lse, acc(static_cast<size_t>(d));
  for (int64_t bh = 0; bh < s.batch_heads; ++bh) {
    head_probs(s, q, k, bh, probs, row_lse);
    const float* vh = v.head(bh);
    float* oh = out.head(bh);
    for (int64_t i = 0; i < tq; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < tk; ++j) {
        const double p = probs[static_cast<size_t>(i * tk + j)];
        for (int64_t c = 0; c < d; ++c) acc[static_cast<size_t>(c)] += p * vh[j * v.row_stride + c];
      }
      for (int64_t c = 0; c < d; ++c)
        oh[i * out.row_stride + c] = static_cast<float>(acc[static_cast<size_t>(c)]);
      lse[bh * tq + i] = static_cast<float>(row_lse[static_cast<size_t>(i)]);
    }
  }
}

void attention_backward_reference(const AttentionShape& s, ConstHeadRows q, ConstHeadRows k,
                                  ConstHeadRows v, ConstHeadRows /*out*/, const float* /*lse*/,
                                  ConstHeadRows dout, HeadRows<float> dq, HeadRows<float> dk,
                                  HeadRows<float> dv) {
  check_attention_shape(s, "attention_backward_reference");
  const int64_t tq = s.q_len, tk = s.kv_len, d = s.head_dim;
  std::vector<double> probs, row_lse;
  std::vector<double> gq(static_cast<size_t>(tq * d)), gk(static_cast<size_t>(tk * d)),
      gv(static_cast<size_t>(tk * d)), dp(static_cast<size_t>(tk));
  for (int64_t bh = 0; bh < s.batch_heads; ++bh) {
    head_probs(s, q, k, bh, probs, row_lse);
    const float* qh = q.head(bh);
    const float* kh = k.head(bh);
    const float* vh = v.head(bh);
    const float* gh = dout.head(bh);
    std::fill(gq.begin(), gq.end(), 0.0);
    std::fill(gk.begin(), gk.end(), 0.0);
    std::fill(gv.begin(), gv.end(), 0.0);
    for (int64_t i = 0; i < tq; ++i) {
      const double* p = probs.data() + i * tk;
      const float* go = gh + i * dout.row_stride;
      // dv += p^T dout; dp = dout v^T; ds = p (dp - sum_j p dp).
      double dot_pd = 0;
      for (int64_t j = 0; j < tk; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < d; ++c) {
          gv[static_cast<size_t>(j * d + c)] += p[j] * go[c];
          acc += static_cast<double>(go[c]) * vh[j * v.row_stride + c];
        }
        dp[static_cast<size_t>(j)] = acc;
        dot_pd += p[j] * acc;
      }
      for (int64_t j = 0; j < tk; ++j) {
        const double ds = p[j] * (dp[static_cast<size_t>(j)] - dot_pd) * s.scale;
        if (ds == 0) continue;
        for (int64_t c = 0; c < d; ++c) {
          gq[static_cast<size_t>(i * d + c)] += ds * kh[j * k.row_stride + c];
          gk[static_cast<size_t>(j * d + c)] += ds * qh[i * q.row_stride + c];
        }
      }
    }
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t c = 0; c < d; ++c)
        dq.head(bh)[i * dq.row_stride + c] = static_cast<float>(gq[static_cast<size_t>(i * d + c)]);
    for (int64_t j = 0; j < tk; ++j)
      for (int64_t c = 0; c < d; ++c) {
        dk.head(bh)[j * dk.row_stride + c] = static_cast<float>(gk[static_cast<size_t>(j * d + c)]);
        dv.head(bh)[j * dv.row_stride + c] = static_cast<float>(gv[static_cast<size_t>(j * d + c)]);
      }
  }
}

}  // namespace cohort::kernels
