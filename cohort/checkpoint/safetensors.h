// safetensors files (https://github.com/huggingface/safetensors), the format
// of cohort's checkpoints and of weights exchanged with PyTorch:
//   8 bytes   little-endian uint64 N, the header length
//   N bytes   JSON: {"__metadata__": {str: str}, name: {"dtype": "F32",
//             "shape": [..], "data_offsets": [begin, end]}, ...}, padded with
//             spaces to a multiple of 8
//   rest      the tensors' raw little-endian bytes, row major; offsets are
//             relative to the start of this section, which they cover
//             exactly, without holes or overlaps.
// dtypes: F32, F64, I64, I32, U8, BF16, F16.
//
// save_safetensors writes atomically (see atomic_file.h). load_safetensors
// validates everything before trusting it and throws IoError naming the file
// and the problem: truncated file, header length beyond the file, bad JSON,
// a malformed entry, unknown dtype, offsets out of range, overlapping or
// leaving holes, a byte count that does not match dtype x shape.
// Pure functions of the file; thread safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/core/tensor_dict.h"

namespace cohort::checkpoint {

using Metadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  TensorDict tensors;  // in file (offset) order
  Metadata metadata;
};

// One tensor's entry in a header.
struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0;  // byte offsets in the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in offset order
  Metadata metadata;
  uint64_t data_start = 0;  // file offset of the data section
};

// Writes `tensors` (any layout; written contiguous) and `metadata` to path
// atomically. Throws InvalidArgument for an empty or "__metadata__" name.
void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const Metadata& metadata = {});

// Reads and validates the whole file.
SafetensorsContents load_safetensors(const std::string& path);

// Reads and validates the header only (the file size is checked against it).
SafetensorsHeader read_safetensors_header(const std::string& path);

// The header bytes (length prefix included) save_safetensors writes for
// these tensors; exposed for tests that build corrupt files.
std::string safetensors_header_bytes(const TensorDict& tensors, const Metadata& metadata);
// The same for tensors described by name, dtype and shape, in this order (for
// writers that stream the data after the header); begin/end are ignored.
std::string safetensors_header_bytes(const std::vector<TensorInfo>& tensors,
                                     const Metadata& metadata);

// "F32", "I64", ...; and back (false for names cohort does not know).
std::string_view safetensors_dtype(DType dtype);
bool parse_safetensors_dtype(std::string_view name, DType* out);

}  // namespace cohort::checkpoint
