// Shapes and strides: small helpers over std::vector<int64_t>. Strides are in
// elements (not bytes), as in PyTorch. Pure functions, thread safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

using Shape = std::vector<int64_t>;

// Product of the sizes (1 for a 0-d shape).
int64_t shape_numel(const Shape& sizes);
// Row-major strides for sizes.
Shape contiguous_strides(const Shape& sizes);
// "[2, 3, 4]".
std::string shape_str(const Shape& sizes);
// Wraps a possibly negative dim into [0, ndim); throws InvalidArgument naming op.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);
// NumPy broadcasting of two shapes; throws InvalidArgument naming op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace cohort
