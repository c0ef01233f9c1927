// Test helper: reads and writes a TensorDict in the safetensors layout (8-byte
// little-endian header length, JSON header {name: {dtype, shape,
// data_offsets}}, raw little-endian data) so the parity test can exchange
// weights and batches with the PyTorch script (torch_parity.py has the
// matching reader/writer). float32, float64 and int64 only. The library's
// checkpoint layer has its own, complete implementation; this one keeps the
// parity test independent of it. Throws IoError on malformed files.
#pragma once

#include <string>

#include "cohort/core/tensor_dict.h"

namespace cohort::parity {

void write_tensor_file(const std::string& path, const TensorDict& dict);
TensorDict read_tensor_file(const std::string& path);

}  // namespace cohort::parity
