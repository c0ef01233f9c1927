// The IDX reader (cohort/data/idx_reader.h) on arbitrary bytes, plain or
// gzip: it must throw cohort::Error for anything malformed, never crash,
// read out of bounds or allocate what the header merely claims.
#include <cstddef>
#include <cstdint>

#include "cohort/base/error.h"
#include "cohort/data/idx_reader.h"
#include "fuzz/memfd_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cohort::fuzz::MemFile f(data, size);
  try {
    cohort::Tensor t = cohort::data::read_idx(f.path());
    (void)t.numel();
  } catch (const cohort::Error&) {
  }
  return 0;
}
