// The safetensors reader (cohort/checkpoint/safetensors.h) on arbitrary
// bytes: header JSON, dtypes, shapes and offsets all come from the file and
// must be checked before a byte of data is touched.
#include <cstddef>
#include <cstdint>

#include "cohort/base/error.h"
#include "cohort/checkpoint/safetensors.h"
#include "fuzz/memfd_path.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cohort::fuzz::MemFile f(data, size);
  try {
    cohort::checkpoint::SafetensorsContents c = cohort::checkpoint::load_safetensors(f.path());
    for (const auto& [name, t] : c.tensors) (void)t.numel();
  } catch (const cohort::Error&) {
  }
  return 0;
}
