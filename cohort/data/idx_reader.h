// IDX files (the MNIST / Fashion-MNIST format): a 4-byte magic {0, 0, type,
// ndims}, ndims big-endian uint32 sizes, then the elements big-endian, row
// major. Files may be gzip-compressed (detected from the content, not the
// name) or plain.
//
// read_idx validates everything and throws IoError naming the file: not an
// IDX file (bad magic, unknown element type, no dims), truncated data,
// trailing bytes, or a gzip stream that is corrupt. Pure function of the
// file; thread safe.
#pragma once

#include <string>

#include "cohort/core/tensor.h"

namespace cohort::data {

// Reads an IDX file into a contiguous tensor of its dims. Element types:
// 0x08 ubyte -> uint8, 0x09 sbyte -> int32, 0x0B short -> int32, 0x0C int ->
// int32, 0x0D float -> float32, 0x0E double -> float64.
Tensor read_idx(const std::string& path);

// Reads a whole file, decompressing it when it starts with the gzip magic.
// Throws IoError naming `op` and the file on open/read errors or a
// corrupt/truncated gzip stream.
std::string read_maybe_gzip(const std::string& path, const char* op = "read_idx");

}  // namespace cohort::data
