// The Tensor-facing overloads of ProcessGroup: argument checks, then the
// raw-buffer op on the tensors' memory. List forms pack into / unpack from one
// flat buffer inside the op, so the data is read and written when the op
// runs, as in PyTorch.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "cohort/distributed/process_group_submit.h"

namespace cohort::distributed {
namespace {

struct Buf {
  void* data;
  size_t count;
  DataType dtype;
  size_t bytes;
};

Buf check_tensor(const char* op, const std::string& what, const Tensor& t) {
  COHORT_CHECK(t.defined(), "{}: {} is an undefined tensor", op, what);
  COHORT_CHECK(t.is_contiguous(),
               "{}: {} must be contiguous, got shape {} with strides {}; call .contiguous() "
               "first (the op works on the tensor's memory in place)",
               op, what, shape_str(t.sizes()), shape_str(t.strides()));
  DataType dt = to_data_type(t.dtype());
  auto n = static_cast<size_t>(t.numel());
  void* data = n == 0 ? nullptr : t.is_cpu() ? t.raw_data() : t.device_data();
  return Buf{data, n, dt, t.nbytes()};
}

// The list forms pack through host memory; on a device, the flat forms take
// one tensor instead.
void check_on_host(const char* op, const char* flat_form, const std::vector<Tensor>& list) {
  for (const Tensor& t : list) {
    if (t.defined() && !t.is_cpu()) {
      throw NotSupported(
          fmt::format("{}: lists of {} tensors are not supported; use {} with one flat tensor", op,
                      t.device().str(), flat_form));
    }
  }
}

void check_like(const char* op, const std::string& what, const Buf& b, DataType dtype,
                size_t count) {
  COHORT_CHECK(b.dtype == dtype, "{}: {} has dtype {}, expected {}", op, what,
               collectives::dtype_name(b.dtype), collectives::dtype_name(dtype));
  COHORT_CHECK(b.count == count, "{}: {} has {} elements, expected {}", op, what, b.count, count);
}

// Checks a list of n tensors of `count` elements of `dtype`.
std::vector<Buf> check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                            size_t n, DataType dtype, size_t count) {
  COHORT_CHECK(list.size() == n, "{}: {} must hold {} tensors (one per rank), got {}", op, what, n,
               list.size());
  std::vector<Buf> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string name = fmt::format("{}[{}]", what, i);
    out.push_back(check_tensor(op, name, list[i]));
    check_like(op, name, out.back(), dtype, count);
  }
  return out;
}

void pack(const std::vector<Buf>& parts, std::byte* flat) {
  for (const Buf& p : parts) {
    if (p.bytes) std::memcpy(flat, p.data, p.bytes);
    flat += p.bytes;
  }
}

void unpack(const std::byte* flat, const std::vector<Buf>& parts) {
  for (const Buf& p : parts) {
    if (p.bytes) std::memcpy(p.data, flat, p.bytes);
    flat += p.bytes;
  }
}

// The body of a list form: op `a` on flat staging buffers of n blocks of
// `block` bytes, `ins` packed into the send buffer before the op runs and the
// recv buffer unpacked into `outs` after it (inside the op, so the tensors
// are read and written when it runs, as in PyTorch). `keep`: the tensors a
// queued op keeps alive.
auto staged(Backend* be, OpArgs a, std::vector<Buf> ins, std::vector<Buf> outs, size_t block,
            std::vector<Tensor> keep) {
  return [be, a, ins = std::move(ins), outs = std::move(outs), block, keep = std::move(keep)] {
    std::vector<std::byte> send(block * ins.size());
    std::vector<std::byte> recv(block * outs.size());
    OpArgs b = a;
    if (!ins.empty()) {
      pack(ins, send.data());
      b.send = send.data();
    }
    if (!outs.empty()) b.recv = recv.data();
    be->run(b);
    unpack(recv.data(), outs);
  };
}

std::vector<Tensor> joined(std::vector<Tensor> list, std::initializer_list<Tensor> more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}

}  // namespace

DataType to_data_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return DataType::kFloat32;
    case DType::kFloat64:
      return DataType::kFloat64;
    case DType::kInt32:
      return DataType::kInt32;
    case DType::kInt64:
      return DataType::kInt64;
    case DType::kUInt8:
      return DataType::kUInt8;
    case DType::kBFloat16:
      return DataType::kBFloat16;
    case DType::kFloat16:
      return DataType::kFloat16;
  }
  throw InvalidArgument(
      fmt::format("distributed: dtype {} has no collectives equivalent", dtype_name(dtype)));
}

Work ProcessGroup::run_tensor(OpArgs a, const Tensor& tensor, bool async) {
  Buf b = check_tensor(collectives::op_kind_name(a.kind), "tensor", tensor);
  a = collectives::with_one_buffer(a, b.data, b.count, b.dtype);
  return run_op(a, {&tensor}, async);
}

Work ProcessGroup::all_gather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                   const AllGatherOptions& o, bool async) {
  check_on_host("all_gather", "all_gather_into_tensor", joined(outputs, {input}));
  Buf in = check_tensor("all_gather", "input", input);
  auto outs =
      check_list("all_gather", "outputs", outputs, static_cast<size_t>(size_), in.dtype, in.count);
  OpArgs a = op_args(OpKind::kAllGather, in.data, nullptr, in.count, in.dtype, o);
  a.timeout = op_timeout(a.timeout);
  return submit("all_gather", true, a.timeout, async, {},
                staged(backend_.get(), a, {}, std::move(outs), in.bytes, joined(outputs, {input})));
}

Work ProcessGroup::all_gather_into_tensor_impl(const Tensor& output, const Tensor& input,
                                               const AllGatherOptions& o, bool async) {
  const char* op = "all_gather_into_tensor";
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  check_like(op, "output", out, in.dtype, in.count * static_cast<size_t>(size_));
  return run_op(op_args(OpKind::kAllGather, in.data, out.data, in.count, in.dtype, o),
                {&input, &output}, async);
}

Work ProcessGroup::gather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                               const GatherOptions& o, bool async) {
  check_on_host("gather", "all_gather_into_tensor", joined(outputs, {input}));
  Buf in = check_tensor("gather", "input", input);
  check_root("gather", o.root);
  OpArgs a = op_args(OpKind::kGather, in.data, nullptr, in.count, in.dtype, o);
  if (rank_ != o.root) {
    COHORT_CHECK(outputs.empty(), "gather: outputs must be empty off the root (rank {}, root {})",
                 rank_, o.root);
    return run_op(a, {&input}, async);
  }
  auto outs =
      check_list("gather", "outputs", outputs, static_cast<size_t>(size_), in.dtype, in.count);
  a.timeout = op_timeout(a.timeout);
  return submit("gather", true, a.timeout, async, {},
                staged(backend_.get(), a, {}, std::move(outs), in.bytes, joined(outputs, {input})));
}

Work ProcessGroup::scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                const ScatterOptions& o, bool async) {
  check_on_host("scatter", "broadcast of one flat tensor", joined(inputs, {output}));
  Buf out = check_tensor("scatter", "output", output);
  check_root("scatter", o.root);
  OpArgs a = op_args(OpKind::kScatter, nullptr, out.data, out.count, out.dtype, o);
  if (rank_ != o.root) {
    COHORT_CHECK(inputs.empty(), "scatter: inputs must be empty off the root (rank {}, root {})",
                 rank_, o.root);
    return run_op(a, {&output}, async);
  }
  auto ins =
      check_list("scatter", "inputs", inputs, static_cast<size_t>(size_), out.dtype, out.count);
  a.timeout = op_timeout(a.timeout);
  return submit("scatter", true, a.timeout, async, {},
                staged(backend_.get(), a, std::move(ins), {}, out.bytes, joined(inputs, {output})));
}

Work ProcessGroup::reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                       const ReduceScatterOptions& o, bool async) {
  check_on_host("reduce_scatter", "reduce_scatter_tensor", joined(inputs, {output}));
  Buf out = check_tensor("reduce_scatter", "output", output);
  auto ins = check_list("reduce_scatter", "inputs", inputs, static_cast<size_t>(size_), out.dtype,
                        out.count);
  OpArgs a = op_args(OpKind::kReduceScatter, nullptr, out.data, out.count, out.dtype, o);
  a.timeout = op_timeout(a.timeout);
  return submit("reduce_scatter", true, a.timeout, async, {},
                staged(backend_.get(), a, std::move(ins), {}, out.bytes, joined(inputs, {output})));
}

Work ProcessGroup::reduce_scatter_tensor_impl(const Tensor& output, const Tensor& input,
                                              const ReduceScatterOptions& o, bool async) {
  const char* op = "reduce_scatter_tensor";
  Buf out = check_tensor(op, "output", output);
  Buf in = check_tensor(op, "input", input);
  check_like(op, "input", in, out.dtype, out.count * static_cast<size_t>(size_));
  return run_op(op_args(OpKind::kReduceScatter, in.data, out.data, out.count, out.dtype, o),
                {&input, &output}, async);
}

Work ProcessGroup::all_to_all_impl(const std::vector<Tensor>& outputs,
                                   const std::vector<Tensor>& inputs, const AllToAllOptions& o,
                                   bool async) {
  COHORT_CHECK(!inputs.empty(), "all_to_all: inputs must hold {} tensors, got 0", size_);
  check_on_host("all_to_all", "all_to_all_single", joined(inputs, {}));
  check_on_host("all_to_all", "all_to_all_single", outputs);
  Buf first = check_tensor("all_to_all", "inputs[0]", inputs[0]);
  auto ins = check_list("all_to_all", "inputs", inputs, static_cast<size_t>(size_), first.dtype,
                        first.count);
  auto outs = check_list("all_to_all", "outputs", outputs, static_cast<size_t>(size_), first.dtype,
                         first.count);
  OpArgs a = op_args(OpKind::kAllToAll, nullptr, nullptr, first.count, first.dtype, o);
  a.timeout = op_timeout(a.timeout);
  std::vector<Tensor> keep = joined(inputs, {});
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return submit(
      "all_to_all", true, a.timeout, async, {},
      staged(backend_.get(), a, std::move(ins), std::move(outs), first.bytes, std::move(keep)));
}

Work ProcessGroup::all_to_all_single_impl(const Tensor& output, const Tensor& input,
                                          const AllToAllOptions& o, bool async) {
  const char* op = "all_to_all_single";
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  auto n = static_cast<size_t>(size_);
  COHORT_CHECK(in.count % n == 0,
               "{}: input's {} elements do not split evenly over {} ranks (equal splits only)", op,
               in.count, n);
  check_like(op, "output", out, in.dtype, in.count);
  return run_op(op_args(OpKind::kAllToAll, in.data, out.data, in.count / n, in.dtype, o),
                {&input, &output}, async);
}

namespace {

// Elements per dim-0 row of t (the product of its other sizes).
size_t row_numel(const Tensor& t) {
  size_t n = 1;
  for (size_t d = 1; d < t.sizes().size(); ++d) n *= static_cast<size_t>(t.sizes()[d]);
  return n;
}

// The element counts per rank of t's dim-0 split `splits` (empty: equal).
std::vector<size_t> split_counts(const char* op, const char* what, const Tensor& t,
                                 std::span<const int64_t> splits, size_t n) {
  COHORT_CHECK(t.dim() >= 1, "{}: {} must have a dim 0 to split, got a scalar", op, what);
  const auto rows = static_cast<size_t>(t.size(0));
  const size_t row = row_numel(t);
  std::vector<size_t> counts(n);
  if (splits.empty()) {
    COHORT_CHECK(rows % n == 0,
                 "{}: {}'s {} rows do not split evenly over {} ranks; pass {}_split_sizes", op,
                 what, rows, n, what);
    std::fill(counts.begin(), counts.end(), rows / n * row);
    return counts;
  }
  COHORT_CHECK(splits.size() == n, "{}: {}_split_sizes must hold {} sizes (one per rank), got {}",
               op, what, n, splits.size());
  size_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    COHORT_CHECK(splits[j] >= 0, "{}: {}_split_sizes[{}] is {}; sizes must be >= 0", op, what, j,
                 splits[j]);
    counts[j] = static_cast<size_t>(splits[j]) * row;
    total += static_cast<size_t>(splits[j]);
  }
  COHORT_CHECK(total == rows, "{}: {}_split_sizes sum to {} rows, but {} has {} (its size(0))", op,
               what, total, what, rows);
  return counts;
}

}  // namespace

Work ProcessGroup::all_to_all_split_impl(const Tensor& output, const Tensor& input,
                                         std::span<const int64_t> output_split_sizes,
                                         std::span<const int64_t> input_split_sizes,
                                         const AllToAllOptions& o, bool async) {
  const char* op = "all_to_all_single";
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  COHORT_CHECK(out.dtype == in.dtype, "{}: output has dtype {}, expected {} (the input's)", op,
               collectives::dtype_name(out.dtype), collectives::dtype_name(in.dtype));
  const auto n = static_cast<size_t>(size_);
  std::vector<size_t> sc = split_counts(op, "input", input, input_split_sizes, n);
  std::vector<size_t> rc = split_counts(op, "output", output, output_split_sizes, n);
  COHORT_CHECK(row_numel(input) == row_numel(output),
               "{}: input's rows hold {} elements, output's {}; the shapes past dim 0 must match",
               op, row_numel(input), row_numel(output));
  OpArgs a = op_args(OpKind::kAllToAllV, in.data, out.data, 0, in.dtype, o);
  a.send_counts = sc.data();
  a.recv_counts = rc.data();
  return run_op(a, {&input, &output}, async);  // run_op copies the counts
}

}  // namespace cohort::distributed
