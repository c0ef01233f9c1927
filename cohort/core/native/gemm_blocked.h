// Internal to native: the Goto / BLIS loop nest shared by cohort's packed
// GEMMs (gemm_packed.cc for float32, gemm_bf16_avx512.cc for bfloat16 inputs
// with float32 accumulation). Blocks: kKC steps of k per pass, 16 register
// tiles of A rows packed per block (kept in L2), kNC columns of B packed per
// block (L3). Threads split C into row or column ranges that are whole
// register tiles; every thread packs its own operands. Each element of C is
// the same sum in the same order whatever the split, so the result has the
// same bits on any number of threads.
//
// Split by rows (the common case: activations times weights), a thread that
// has done its share takes rows from another's remaining ones (stealing_rows):
// on a VM whose vCPUs run at different speeds from one moment to the next (a
// neighbour on one's sibling hyperthread), fixed shares left the faster
// thread waiting for the slower one (up to 7 % of a bf16 GPT step on a 2-vCPU
// Zen 5 in its noisy phases, where stealing took the step's mean from 117.5 to
// 115.7 ms over 6 alternating runs; no difference in quiet ones). Each thread
// starts on the rows a fixed split would give it, so a result stays on the
// core that made it for the op that reads it next (handing out rows first
// come, first served instead made the step 5 % slower).
//
// Kernels (gemm_kernels.h's GemmKernels, or gemm_bf16_kernels.h's) provide
// mr, nr, kpack (the multiple of k a packed panel's depth is rounded up to: 1
// for float32, 2 for bf16 pairs), micro, pack_a, pack_b over elements of type
// T; packing may write up to kPackSlack elements past the last panel.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "cohort/base/cpu.h"
#include "cohort/base/parallel.h"
#include "cohort/base/runtime.h"
#include "cohort/core/native/gemm_kernels.h"

namespace cohort::native::detail {

inline constexpr int64_t kBlockKC = 256, kBlockNC = 3072;
// Register tiles of A's rows per packed block.
inline constexpr int64_t kBlockTiles = 16;

// done(r0, r1, c0, c1), when given, runs on the thread that computed it for
// each block of C (rows [r0, r1) x columns [c0, c1)) right after the block's
// last pass over k, while the block is still in that core's cache: a fused
// elementwise epilogue without another pass over C. Blocks are disjoint.
using BlockDone = std::function<void(int64_t, int64_t, int64_t, int64_t)>;

// The depth of a packed panel holding kc steps of k: kc rounded up to the
// kernels' kpack (bf16 panels hold k in pairs).
template <typename Kernels>
int64_t panel_depth(const Kernels& kr, int64_t kc) {
  return (kc + kr.kpack - 1) / kr.kpack * kr.kpack;
}

// This thread's packing buffers (kept between calls: thread-local, found
// without a lock), sized for passes over k of at most kBlockKC, blocks of
// kBlockTiles register tiles of A's rows and up to `cols` columns of B. The
// use ends with the object: a buffer over the runtime's thread_buffer_bytes is
// then freed (base/runtime.h).
template <typename Kernels, typename T>
struct PackBuffers {
  ThreadBufferUse<T> a_use, b_use;
  T* a = a_use.data();
  T* b = b_use.data();
};
template <typename T, typename Kernels>
PackBuffers<Kernels, T> pack_buffers(const Kernels& kr, int64_t k, int64_t cols) {
  thread_local ThreadBuffer abuf, bbuf;
  const int64_t kc_max = panel_depth(kr, std::min(kBlockKC, k));
  const int64_t nc_max = std::min<int64_t>(kBlockNC, (cols + kr.nr - 1) / kr.nr * kr.nr);
  return {{abuf, static_cast<size_t>(kBlockTiles * kr.mr * kc_max + kPackSlack)},
          {bbuf, static_cast<size_t>(nc_max * kc_max + kPackSlack)}};
}

// C's rows [ic, ic + mc) x columns [jc, jc + nc) from one pass over k: A's
// panels in ap, B's in bp (kcp deep), tile by tile. `bias` reaches kernels
// whose micro takes one.
template <typename Kernels, typename T>
void block_product(const Kernels& kr, int64_t kc, int64_t kcp, const T* ap, const T* bp, float* c,
                   int64_t ldc, int64_t ic, int64_t mc, int64_t jc, int64_t nc, float alpha,
                   float beta, bool first, const float* bias) {
  for (int64_t jr = 0; jr < nc; jr += kr.nr) {
    const int n = static_cast<int>(std::min<int64_t>(kr.nr, nc - jr));
    const float* tile_bias = bias ? bias + jc + jr : nullptr;
    for (int64_t ir = 0; ir < mc; ir += kr.mr) {
      const int m = static_cast<int>(std::min<int64_t>(kr.mr, mc - ir));
      float* ct = c + (ic + ir) * ldc + jc + jr;
      if constexpr (requires {
                      kr.micro(kc, ap, bp, ct, ldc, m, n, alpha, beta, first, tile_bias);
                    })
        kr.micro(kc, ap + ir * kcp, bp + jr * kcp, ct, ldc, m, n, alpha, beta, first, tile_bias);
      else
        kr.micro(kc, ap + ir * kcp, bp + jr * kcp, ct, ldc, m, n, alpha, beta, first);
    }
  }
}

// One thread's part: C rows [r0, r1) x columns [c0, c1).
// `bias` (kernels whose micro takes one: the bf16 ones), when not null, is a
// row added to every row of C on the first pass over k: C = alpha op(A)
// op(B) + bias + beta C without a separate pass over C.
template <typename Kernels, typename T>
void blocked_gemm_range(const Kernels& kr, bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0,
                        int64_t c1, int64_t k, float alpha, const T* a, int64_t lda, const T* b,
                        int64_t ldb, float beta, float* c, int64_t ldc, const float* bias = nullptr,
                        const BlockDone* done = nullptr) {
  const int64_t mc_max = kBlockTiles * kr.mr;
  const PackBuffers<Kernels, T> buf = pack_buffers<T>(kr, k, c1 - c0);
  for (int64_t jc = c0; jc < c1; jc += kBlockNC) {
    const int64_t nc = std::min(kBlockNC, c1 - jc);
    for (int64_t pc = 0; pc < k; pc += kBlockKC) {
      const int64_t kc = std::min(kBlockKC, k - pc);
      const int64_t kcp = panel_depth(kr, kc);
      const bool first = pc == 0, last = pc + kc >= k;
      kr.pack_b(tb, b, ldb, pc, kc, jc, nc, buf.b);
      for (int64_t ic = r0; ic < r1; ic += mc_max) {
        const int64_t mc = std::min(mc_max, r1 - ic);
        kr.pack_a(ta, a, lda, ic, mc, pc, kc, buf.a);
        block_product(kr, kc, kcp, buf.a, buf.b, c, ldc, ic, mc, jc, nc, alpha, beta, first, bias);
        if (last && done && *done) (*done)(ic, ic + mc, jc, jc + nc);
      }
    }
  }
}

// Claims on a thread's row blocks [lo, hi), packed in one word so that the
// owner (from the front) and thieves (from the back) can race for them.
class BlockClaims {
 public:
  void reset(int64_t blocks) { v_.store(uint64_t(blocks), std::memory_order_relaxed); }
  // The next block from the front (owner) or back (thief); false when none is left.
  bool take(bool front, int64_t& block) {
    uint64_t cur = v_.load(std::memory_order_relaxed), next = 0;
    do {
      const int64_t lo = int64_t(cur >> 32), hi = int64_t(cur & 0xFFFFFFFFu);
      if (lo >= hi) return false;
      block = front ? lo : hi - 1;
      next =
          front ? (uint64_t(lo + 1) << 32) | uint64_t(hi) : (uint64_t(lo) << 32) | uint64_t(hi - 1);
    } while (!v_.compare_exchange_weak(cur, next, std::memory_order_relaxed));
    return true;
  }

 private:
  std::atomic<uint64_t> v_{0};
};

// C split by rows over `threads` threads (the header comment): in each pass
// over k (a pc block of a jc block, in the serial order) thread p works
// through the rows a fixed split gives it, in the fixed split's blocks of 16
// register tiles; a thread out of blocks takes another's last remaining one.
// The blocks are those of the fixed split whoever runs them, so an epilogue
// sees the same blocks (and sums per block give the same bits). A block's
// pass waits until its previous pass is done (in practice already). Each
// thread packs a pass's B at its first block of the pass. If a thread throws,
// the others stop waiting.
template <typename Kernels, typename T>
void stealing_rows(const Kernels& kr, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   float alpha, const T* a, int64_t lda, const T* b, int64_t ldb, float beta,
                   float* c, int64_t ldc, const float* bias, const BlockDone* done,
                   int64_t threads) {
  const int mr = kr.mr;
  const int64_t tiles = (m + mr - 1) / mr;
  const int64_t col_blocks = (n + kBlockNC - 1) / kBlockNC;
  const int64_t k_blocks = (k + kBlockKC - 1) / kBlockKC;
  auto first_tile = [&](int64_t p) { return tiles * p / threads; };
  // claims[pass * threads + p]: thread p's blocks in a pass; passes[jc block
  // * tiles + t]: the passes over k that tile t's rows of C have had.
  std::vector<BlockClaims> claims(static_cast<size_t>(col_blocks * k_blocks * threads));
  for (int64_t pass = 0; pass < col_blocks * k_blocks; ++pass)
    for (int64_t p = 0; p < threads; ++p)
      claims[pass * threads + p].reset((first_tile(p + 1) - first_tile(p) + kBlockTiles - 1) /
                                       kBlockTiles);
  std::vector<std::atomic<int64_t>> passes(static_cast<size_t>(col_blocks * tiles));
  std::atomic<bool> failed{false};
  parallel_for(0, threads, 1, [&](int64_t p, int64_t) {
    const PackBuffers<Kernels, T> buf = pack_buffers<T>(kr, k, n);
    try {
      for (int64_t jb = 0; jb < col_blocks; ++jb) {
        const int64_t jc = jb * kBlockNC, nc = std::min(kBlockNC, n - jc);
        for (int64_t pb = 0; pb < k_blocks; ++pb) {
          const int64_t pc = pb * kBlockKC, kc = std::min(kBlockKC, k - pc);
          const int64_t kcp = panel_depth(kr, kc);
          const bool first = pb == 0, last = pb + 1 == k_blocks;
          BlockClaims* pass_claims = &claims[(jb * k_blocks + pb) * threads];
          bool packed = false;
          int64_t victim = 0;  // 0: on its own blocks; else the offset of the thread robbed
          for (;;) {
            int64_t block = 0;
            if (victim == 0 && !pass_claims[p].take(true, block)) victim = 1;
            if (victim > 0) {
              while (victim < threads && !pass_claims[(p + victim) % threads].take(false, block))
                ++victim;
              if (victim == threads) break;
            }
            const int64_t owner = (p + victim) % threads;
            const int64_t t0 = first_tile(owner) + block * kBlockTiles;
            const int64_t t1 = std::min(first_tile(owner + 1), t0 + kBlockTiles);
            if (!packed) kr.pack_b(tb, b, ldb, pc, kc, jc, nc, buf.b);
            packed = true;
            for (int64_t t = t0; t < t1; ++t)
              while (passes[jb * tiles + t].load(std::memory_order_acquire) != pb) {
                if (failed.load(std::memory_order_relaxed)) return;
                cpu_relax();
              }
            const int64_t ic = t0 * mr, mc = std::min(t1 * mr, m) - ic;
            kr.pack_a(ta, a, lda, ic, mc, pc, kc, buf.a);
            block_product(kr, kc, kcp, buf.a, buf.b, c, ldc, ic, mc, jc, nc, alpha, beta, first,
                          bias);
            if (last && done && *done) (*done)(ic, ic + mc, jc, jc + nc);
            for (int64_t t = t0; t < t1; ++t)
              passes[jb * tiles + t].store(pb + 1, std::memory_order_release);
          }
        }
      }
    } catch (...) {
      failed.store(true, std::memory_order_relaxed);
      throw;
    }
  });
}

// C[m, n] = alpha op(A) op(B) + beta C, split over cohort::num_threads() along
// C's longer side (one thread below 2^18 multiply-adds). m, n > 0; k == 0
// scales C by beta (beta == 0 writes zeros).
template <typename Kernels, typename T>
void blocked_gemm(const Kernels& kr, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, float beta, float* c,
                  int64_t ldc, const float* bias = nullptr, const BlockDone* done = nullptr) {
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]) + (bias ? bias[j] : 0.0f);
    if (done && *done) (*done)(0, m, 0, n);
    return;
  }
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? kr.mr : kr.nr;
  const int64_t units = ((by_rows ? m : n) + unit - 1) / unit;
  const int64_t parts = std::min<int64_t>(num_threads(), units);
  if (parts <= 1 || m * n * k < (int64_t(1) << 18)) {
    blocked_gemm_range(kr, ta, tb, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, done);
    return;
  }
  if (by_rows && units < (int64_t(1) << 31)) {  // TileRange's 32-bit ends
    stealing_rows(kr, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, done, parts);
    return;
  }
  const int64_t len = by_rows ? m : n;
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t s = std::min(len, units * p / parts * unit);
      const int64_t e = std::min(len, units * (p + 1) / parts * unit);
      if (e <= s) continue;
      if (by_rows)
        blocked_gemm_range(kr, ta, tb, s, e, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias,
                           done);
      else
        blocked_gemm_range(kr, ta, tb, 0, m, s, e, k, alpha, a, lda, b, ldb, beta, c, ldc, bias,
                           done);
    }
  });
}

}  // namespace cohort::native::detail
