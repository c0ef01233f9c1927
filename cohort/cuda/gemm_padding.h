// The padding rule of the cuBLASLt products (gemm.cc) for the products
// cuBLASLt has no algorithm for: its kernels want every operand's leading
// dimension, batch stride and address 16-byte aligned (bf16 with an odd
// leading dimension, such as an untied 50257-word vocabulary, has none). Such
// an operand is copied into a buffer whose rows are padded to 16 bytes, the
// product runs there, and a padded C is copied back into the caller's.
// Pure host arithmetic, so that the rule is checked on machines without a GPU;
// gemm.cc runs the copies it describes with cudaMemcpy2DAsync.
// Thread safety: stateless.
#pragma once

#include <cstdint>

namespace cohort::cuda {

inline constexpr int64_t kGemmAlignBytes = 16;

// A stored matrix as gemm.h's operands are: `rows` rows of `cols` elements,
// row starts `ld` elements apart; a batch of them `batch_stride` elements
// apart (0: one matrix shared by every product of the batch).
struct StoredMatrix {
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  uintptr_t address = 0;
};

// cudaMemcpy2D's arguments, `count` times, the matrices `src_step` and
// `dst_step` bytes apart (count 1 when the batch is one contiguous run).
struct PitchCopy {
  int64_t rows = 0, row_bytes = 0, src_pitch = 0, dst_pitch = 0;
  int64_t count = 0, src_step = 0, dst_step = 0;
};

// What becomes of one operand: unchanged (padded false: ld and batch_stride
// are the original's), or a padded copy of `bytes` bytes, filled by
// `to_padded` (A, B; C when beta is not 0) and, for C, copied back by
// `from_padded`.
struct PaddedMatrix {
  bool padded = false;
  int64_t ld = 0, batch_stride = 0, bytes = 0;
  PitchCopy to_padded, from_padded;
};

struct GemmPadding {
  PaddedMatrix a, b, c;
  bool any() const { return a.padded || b.padded || c.padded; }
};

// The stored matrices of C[m, n] = op(A)[m, k] op(B)[k, n] (gemm.h's
// convention: a transposed operand is stored as its transpose, row-major).
StoredMatrix stored_a(int64_t m, int64_t k, bool trans, int64_t ld, int64_t batch_stride,
                      uintptr_t address);
StoredMatrix stored_b(int64_t k, int64_t n, bool trans, int64_t ld, int64_t batch_stride,
                      uintptr_t address);
StoredMatrix stored_c(int64_t m, int64_t n, int64_t ldc, int64_t batch_stride, uintptr_t address);

// Whether `s` (elements of elem_bytes) is misaligned for cuBLASLt.
bool gemm_misaligned(const StoredMatrix& s, int64_t elem_bytes, int64_t batch);

// The padding of each operand: a misaligned one is padded to rows of
// cols rounded up to 16 bytes, its batch dense (stride rows x padded ld, or
// 0 when shared); an aligned one is left as it is.
GemmPadding gemm_padding(const StoredMatrix& a, const StoredMatrix& b, const StoredMatrix& c,
                         int64_t ab_bytes, int64_t c_bytes, int64_t batch);

}  // namespace cohort::cuda
