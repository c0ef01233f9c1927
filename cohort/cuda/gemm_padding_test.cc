// The padding rule of gemm.cc's fallback (gemm_padding.h), on the CPU: the
// copies it describes, run with memcpy, and a reference product over the
// padded layout give the product of the original layout, bit for bit (small
// integers: exact in every element type); aligned operands are not padded.
#include "cohort/cuda/gemm_padding.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace cohort::cuda {
namespace {

// A host buffer standing in for device memory, 256-byte aligned as the
// caching allocator's blocks are (alignas on the element type is not enough).
struct Buffer {
  std::vector<unsigned char> raw;
  unsigned char* data = nullptr;
  explicit Buffer(int64_t bytes, int64_t offset = 0) : raw(static_cast<size_t>(bytes) + 512) {
    auto v = reinterpret_cast<uintptr_t>(raw.data());
    data = raw.data() + ((256 - v % 256) % 256) + offset;
  }
};

template <class E>
E* as(Buffer& b) {
  return reinterpret_cast<E*>(b.data);
}

void run_copy(const PitchCopy& c, const unsigned char* src, unsigned char* dst) {
  for (int64_t i = 0; i < c.count; ++i)
    for (int64_t r = 0; r < c.rows; ++r)
      std::memcpy(dst + i * c.dst_step + r * c.dst_pitch, src + i * c.src_step + r * c.src_pitch,
                  static_cast<size_t>(c.row_bytes));
}

// C = op(A) op(B) in gemm.h's convention, as double; a transposed operand
// stored as its transpose.
template <class E, class C>
void reference_gemm(int64_t m, int64_t n, int64_t k, int64_t batch, const E* a, bool ta,
                    int64_t lda, int64_t sa, const E* b, bool tb, int64_t ldb, int64_t sb, C* c,
                    int64_t ldc, int64_t sc) {
  for (int64_t z = 0; z < batch; ++z)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = static_cast<double>(a[z * sa + (ta ? p * lda + i : i * lda + p)]);
          const double y = static_cast<double>(b[z * sb + (tb ? j * ldb + p : p * ldb + j)]);
          s += x * y;
        }
        c[z * sc + i * ldc + j] = static_cast<C>(s);
      }
}

struct Case {
  int64_t m, n, k, batch;
  bool ta, tb;
  int64_t lda_extra, ldb_extra, ldc_extra;  // elements past the stored row
  bool share_b = false;                     // B's batch stride 0 (broadcast)
  int64_t a_offset = 0;                     // bytes past an aligned address
  int64_t a_gap = 0;                        // elements between A's matrices
};

// Runs `cs` with elements E (A, B) and C (C), checking the rule's copies and
// padded layout against the unpadded product. Returns whether it padded.
template <class E, class C>
bool check_case(const Case& cs) {
  const int64_t ar = cs.ta ? cs.k : cs.m, ac = cs.ta ? cs.m : cs.k;
  const int64_t br = cs.tb ? cs.n : cs.k, bc = cs.tb ? cs.k : cs.n;
  const int64_t lda = ac + cs.lda_extra, ldb = bc + cs.ldb_extra, ldc = cs.n + cs.ldc_extra;
  const int64_t sa = cs.batch > 1 ? ar * lda + cs.a_gap : 0;
  const int64_t sb = cs.batch > 1 && !cs.share_b ? br * ldb : 0;
  const int64_t sc = cs.batch > 1 ? cs.m * ldc : 0;
  const int64_t na = std::max<int64_t>(cs.batch, 1) * (ar * lda + cs.a_gap);
  const int64_t nb = (sb ? cs.batch : 1) * br * ldb,
                nc = std::max<int64_t>(cs.batch, 1) * cs.m * ldc;
  Buffer ab(na * static_cast<int64_t>(sizeof(E)), cs.a_offset), bb(nb * sizeof(E));
  Buffer want_b(nc * sizeof(C)), got_b(nc * sizeof(C));
  std::mt19937 rng(static_cast<unsigned>(cs.m * 131 + cs.n * 17 + cs.k));
  std::uniform_int_distribution<int> dist(-4, 4);
  for (int64_t i = 0; i < na; ++i) as<E>(ab)[i] = static_cast<E>(dist(rng));
  for (int64_t i = 0; i < nb; ++i) as<E>(bb)[i] = static_cast<E>(dist(rng));
  // The gaps between C's rows must come back untouched: a sentinel there.
  for (int64_t i = 0; i < nc; ++i) as<C>(want_b)[i] = as<C>(got_b)[i] = static_cast<C>(77);
  reference_gemm(cs.m, cs.n, cs.k, cs.batch, as<E>(ab), cs.ta, lda, sa, as<E>(bb), cs.tb, ldb, sb,
                 as<C>(want_b), ldc, sc);

  const auto address = [](Buffer& b) { return reinterpret_cast<uintptr_t>(b.data); };
  GemmPadding p =
      gemm_padding(stored_a(cs.m, cs.k, cs.ta, lda, sa, address(ab)),
                   stored_b(cs.k, cs.n, cs.tb, ldb, sb, address(bb)),
                   stored_c(cs.m, cs.n, ldc, sc, address(got_b)), sizeof(E), sizeof(C), cs.batch);
  // Every operand the product then reads is aligned.
  for (const PaddedMatrix* o : {&p.a, &p.b}) {
    EXPECT_EQ(o->ld * static_cast<int64_t>(sizeof(E)) % kGemmAlignBytes, 0);
    if (cs.batch > 1) {
      EXPECT_EQ(o->batch_stride * static_cast<int64_t>(sizeof(E)) % kGemmAlignBytes, 0);
    }
  }
  EXPECT_EQ(p.c.ld * static_cast<int64_t>(sizeof(C)) % kGemmAlignBytes, 0);

  Buffer pa(p.a.bytes), pb(p.b.bytes), pc(p.c.bytes);
  // The operand the product reads: the padded copy, or the original.
  auto operand = [](const PaddedMatrix& pm, Buffer& orig, Buffer& copy, int64_t cols,
                    int64_t ld) -> const unsigned char* {
    if (!pm.padded) {
      EXPECT_EQ(pm.ld, ld);
      return orig.data;
    }
    EXPECT_GE(pm.ld, cols);
    run_copy(pm.to_padded, orig.data, copy.data);
    return copy.data;
  };
  const unsigned char* a_use = operand(p.a, ab, pa, ac, lda);
  const unsigned char* b_use = operand(p.b, bb, pb, bc, ldb);
  unsigned char* c_use = got_b.data;
  if (p.c.padded) c_use = pc.data;
  reference_gemm(cs.m, cs.n, cs.k, cs.batch, reinterpret_cast<const E*>(a_use), cs.ta, p.a.ld,
                 p.a.batch_stride, reinterpret_cast<const E*>(b_use), cs.tb, p.b.ld,
                 p.b.batch_stride, reinterpret_cast<C*>(c_use), p.c.ld, p.c.batch_stride);
  if (p.c.padded) run_copy(p.c.from_padded, pc.data, got_b.data);
  EXPECT_EQ(std::memcmp(want_b.data, got_b.data, static_cast<size_t>(nc * sizeof(C))), 0)
      << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " batch=" << cs.batch << " ta=" << cs.ta
      << " tb=" << cs.tb;
  return p.any();
}

// bf16's storage (2 bytes): the layout is what is checked, and small
// integers are exact as uint16_t's bit patterns would not be; int16_t keeps
// the element size and the values.
using Bf16Like = int16_t;

TEST(GemmPadding, OddLeadingDimensionsArePaddedAndGiveTheSameProduct) {
  const std::vector<Case> cases = {
      {5, 7, 3, 1, false, false, 0, 0, 0},      // every ld odd
      {6, 13, 9, 1, false, true, 0, 0, 3},      // x w^T with an odd vocabulary, C gaps
      {4, 9, 11, 3, true, false, 1, 2, 0},      // batched, A stored transposed
      {3, 5, 7, 4, true, true, 0, 0, 1, true},  // B shared by the batch
      {2, 3, 8, 2, false, false, 0, 0, 0},      // A aligned (k = 8), B and C not
  };
  for (const Case& c : cases) {
    EXPECT_TRUE((check_case<Bf16Like, float>(c)));
    EXPECT_TRUE((check_case<float, float>(c)));
  }
  // A's matrices apart by more than their size (a strided batch view): one
  // copy per matrix, not one run.
  Case gap{4, 6, 5, 3, false, false, 0, 0, 0};
  gap.a_gap = 3;
  EXPECT_TRUE((check_case<float, float>(gap)));
  // float64: 16 bytes are 2 elements; an odd ld is misaligned.
  EXPECT_TRUE((check_case<double, double>(cases[0])));
}

TEST(GemmPadding, AlignedShapesAreNotPadded) {
  const std::vector<Case> cases = {
      {64, 768, 768, 1, false, true, 0, 0, 0},    // GPT-2's projections
      {16, 32, 24, 3, true, false, 8, 0, 0},      // batched, ld past the row
      {8, 8, 8, 2, false, false, 0, 0, 0, true},  // B shared
  };
  for (const Case& c : cases) {
    EXPECT_FALSE((check_case<Bf16Like, float>(c)));
    EXPECT_FALSE((check_case<float, float>(c)));
  }
  // Aligned bf16 is not aligned float32 alone: ld 8 x 4 bytes is, ld 4 x 2 is not.
  EXPECT_TRUE((check_case<Bf16Like, float>({3, 4, 4, 1, false, false, 0, 0, 0})));
  EXPECT_FALSE((check_case<float, float>({3, 4, 4, 1, false, false, 0, 0, 0})));
}

TEST(GemmPadding, MisalignedAddressIsCopied) {
  // A view starting 4 bytes into a block: its ld is aligned, its address is
  // not, so only A is copied.
  Case c{8, 8, 8, 1, false, false, 0, 0, 0};
  c.a_offset = 4;
  EXPECT_TRUE((check_case<float, float>(c)));
  StoredMatrix a = stored_a(8, 8, false, 8, 0, 0x1004), b = stored_b(8, 8, false, 8, 0, 0x2000);
  GemmPadding p = gemm_padding(a, b, stored_c(8, 8, 8, 0, 0x3000), 4, 4, 1);
  EXPECT_TRUE(p.a.padded);
  EXPECT_FALSE(p.b.padded);
  EXPECT_FALSE(p.c.padded);
}

TEST(GemmPadding, PaddedLayoutOfTheUntiedVocabulary) {
  // bf16 x [rows, 768] times w^T, w [50257, 768]: only C (ld 50257 floats)
  // is misaligned; it is padded to 50260 (16 bytes), one dense copy back.
  GemmPadding p = gemm_padding(stored_a(1024, 768, false, 768, 0, 0x1000),
                               stored_b(768, 50257, true, 768, 0, 0x2000),
                               stored_c(1024, 50257, 50257, 0, 0x3000), 2, 4, 1);
  EXPECT_FALSE(p.a.padded);
  EXPECT_FALSE(p.b.padded);
  ASSERT_TRUE(p.c.padded);
  EXPECT_EQ(p.c.ld, 50260);
  EXPECT_EQ(p.c.bytes, int64_t{1024} * 50260 * 4);
  EXPECT_EQ(p.c.from_padded.count, 1);
  EXPECT_EQ(p.c.from_padded.rows, 1024);
  EXPECT_EQ(p.c.from_padded.row_bytes, 50257 * 4);
  EXPECT_EQ(p.c.from_padded.src_pitch, 50260 * 4);
  EXPECT_EQ(p.c.from_padded.dst_pitch, 50257 * 4);
  // The weight stored [50257, 768] bf16 in the other product (dx = dy w):
  // dy [rows, 50257] bf16 is the one padded, to 50264 (16 bytes of bf16).
  GemmPadding q = gemm_padding(stored_a(1024, 50257, false, 50257, 0, 0x1000),
                               stored_b(50257, 768, false, 768, 0, 0x2000),
                               stored_c(1024, 768, 768, 0, 0x3000), 2, 4, 1);
  ASSERT_TRUE(q.a.padded);
  EXPECT_EQ(q.a.ld, 50264);
  EXPECT_FALSE(q.b.padded);
  EXPECT_FALSE(q.c.padded);
}

}  // namespace
}  // namespace cohort::cuda
