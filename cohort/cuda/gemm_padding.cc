#include "cohort/cuda/gemm_padding.h"

namespace cohort::cuda {
namespace {

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// One copy of `count` matrices, merged into one when both sides are dense.
PitchCopy pitch_copy(int64_t rows, int64_t row_bytes, int64_t src_pitch, int64_t dst_pitch,
                     int64_t count, int64_t src_step, int64_t dst_step) {
  if (count > 1 && src_step == rows * src_pitch && dst_step == rows * dst_pitch)
    return {rows * count, row_bytes, src_pitch, dst_pitch, 1, 0, 0};
  return {rows, row_bytes, src_pitch, dst_pitch, count, src_step, dst_step};
}

PaddedMatrix pad(const StoredMatrix& s, int64_t elem, int64_t batch) {
  PaddedMatrix p;
  p.ld = s.ld;
  p.batch_stride = s.batch_stride;
  if (!gemm_misaligned(s, elem, batch)) return p;
  p.padded = true;
  p.ld = round_up(s.cols, kGemmAlignBytes / elem);
  const int64_t count = s.batch_stride != 0 ? batch : 1;
  p.batch_stride = s.batch_stride != 0 ? s.rows * p.ld : 0;
  p.bytes = count * s.rows * p.ld * elem;
  const int64_t src_pitch = s.ld * elem, dst_pitch = p.ld * elem;
  const int64_t src_step = s.batch_stride * elem, dst_step = p.batch_stride * elem;
  p.to_padded = pitch_copy(s.rows, s.cols * elem, src_pitch, dst_pitch, count, src_step, dst_step);
  p.from_padded =
      pitch_copy(s.rows, s.cols * elem, dst_pitch, src_pitch, count, dst_step, src_step);
  return p;
}

}  // namespace

StoredMatrix stored_a(int64_t m, int64_t k, bool trans, int64_t ld, int64_t batch_stride,
                      uintptr_t address) {
  return {trans ? k : m, trans ? m : k, ld, batch_stride, address};
}

StoredMatrix stored_b(int64_t k, int64_t n, bool trans, int64_t ld, int64_t batch_stride,
                      uintptr_t address) {
  return {trans ? n : k, trans ? k : n, ld, batch_stride, address};
}

StoredMatrix stored_c(int64_t m, int64_t n, int64_t ldc, int64_t batch_stride, uintptr_t address) {
  return {m, n, ldc, batch_stride, address};
}

bool gemm_misaligned(const StoredMatrix& s, int64_t elem_bytes, int64_t batch) {
  const bool ld_bad = (s.ld * elem_bytes) % kGemmAlignBytes != 0;
  const bool address_bad = s.address % kGemmAlignBytes != 0;
  const bool stride_bad =
      batch > 1 && s.batch_stride != 0 && (s.batch_stride * elem_bytes) % kGemmAlignBytes != 0;
  return ld_bad || address_bad || stride_bad;
}

GemmPadding gemm_padding(const StoredMatrix& a, const StoredMatrix& b, const StoredMatrix& c,
                         int64_t ab_bytes, int64_t c_bytes, int64_t batch) {
  return {pad(a, ab_bytes, batch), pad(b, ab_bytes, batch), pad(c, c_bytes, batch)};
}

}  // namespace cohort::cuda
