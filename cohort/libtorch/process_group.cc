// The LibTorch-facing collectives: argument checks on at::Tensor, then
// cohort's raw-buffer ops on the tensors' own memory; list forms pack into
// or unpack from one flat buffer (the unpacking runs in Work::wait).
#include "cohort/libtorch/process_group.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <sstream>

#include "cohort/base/error.h"

namespace cohort::libtorch {

struct Work::State {
  distributed::Work work;
  std::vector<at::Tensor> keep;  // the op's buffers
  std::function<void()> finish;  // list forms: unpack after the op
  std::mutex mu;
  bool finished = false;

  ~State() {
    if (!work.defined() || work.is_completed()) return;
    try {
      work.wait();
    } catch (const std::exception&) {
      // Nobody is left to report it to; the group reports it to later ops.
    }
  }
};

namespace {

struct Buf {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  size_t bytes = 0;
};

std::string join_sizes(at::IntArrayRef v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

Buf check_tensor(const char* op, const std::string& arg, const at::Tensor& t) {
  COHORT_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor; pass a defined CPU tensor",
               op, arg);
  COHORT_CHECK(t.device().is_cpu(),
               "{}: argument '{}' is on device {}; cohort's collectives take CPU tensors (move it "
               "with .cpu() and copy the result back)",
               op, arg, t.device().str());
  COHORT_CHECK(t.layout() == at::kStrided,
               "{}: argument '{}' has a {} layout; cohort's collectives take dense (strided) "
               "tensors (call .to_dense())",
               op, arg, (std::ostringstream() << t.layout()).str());
  COHORT_CHECK(t.is_contiguous(),
               "{}: argument '{}' is not contiguous (sizes {}, strides {}); pass a contiguous "
               "tensor (.contiguous(), then copy the result back with copy_): the op works on "
               "the tensor's memory in place",
               op, arg, join_sizes(t.sizes()), join_sizes(t.strides()));
  DataType dt = to_data_type(t.scalar_type(), op, arg);
  auto n = static_cast<size_t>(t.numel());
  return Buf{n == 0 ? nullptr : t.data_ptr(), n, dt, t.nbytes()};
}

void check_like(const char* op, const std::string& arg, const Buf& b, DataType dtype, size_t count,
                const char* why) {
  COHORT_CHECK(b.dtype == dtype, "{}: argument '{}' has dtype {}, expected {} ({})", op, arg,
               collectives::dtype_name(b.dtype), collectives::dtype_name(dtype), why);
  COHORT_CHECK(b.count == count, "{}: argument '{}' has {} elements, expected {} ({})", op, arg,
               b.count, count, why);
}

std::vector<Buf> check_list(const char* op, const char* arg, const std::vector<at::Tensor>& list,
                            size_t n, DataType dtype, size_t count, const char* why) {
  COHORT_CHECK(list.size() == n, "{}: argument '{}' must hold {} tensors (one per rank), got {}",
               op, arg, n, list.size());
  std::vector<Buf> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string name = fmt::format("{}[{}]", arg, i);
    out.push_back(check_tensor(op, name, list[i]));
    check_like(op, name, out.back(), dtype, count, why);
  }
  return out;
}

void pack(const std::vector<Buf>& parts, const at::Tensor& flat) {
  auto* dst = static_cast<std::byte*>(flat.data_ptr());
  for (const Buf& p : parts) {
    if (p.bytes) std::memcpy(dst, p.data, p.bytes);
    dst += p.bytes;
  }
}

void unpack(const at::Tensor& flat, const std::vector<Buf>& parts) {
  const auto* src = static_cast<const std::byte*>(flat.data_ptr());
  for (const Buf& p : parts) {
    if (p.bytes) std::memcpy(p.data, src, p.bytes);
    src += p.bytes;
  }
}

// A list form's staging buffer: n tensors like `like`, one after the other,
// packed from `inputs` (when given) before the op; finish() unpacks it into
// `outputs` (when given) after the op.
struct Staging {
  at::Tensor flat;
  void* data = nullptr;  // flat's memory, nullptr when empty
  std::vector<Buf> outputs;
  std::function<void()> finish() const {
    if (outputs.empty()) return {};
    return [flat = flat, outs = outputs] { unpack(flat, outs); };
  }
};

Staging stage(const at::Tensor& like, size_t n, const std::vector<Buf>& inputs,
              std::vector<Buf> outputs) {
  Staging s;
  s.flat = at::empty({static_cast<int64_t>(n) * like.numel()}, like.options());
  pack(inputs, s.flat);
  s.data = s.flat.numel() ? s.flat.data_ptr() : nullptr;
  s.outputs = std::move(outputs);
  return s;
}

// The tensors an async op keeps alive: `list` and `more`.
std::vector<at::Tensor> keep(std::vector<at::Tensor> list, std::initializer_list<at::Tensor> more) {
  list.insert(list.end(), more.begin(), more.end());
  return list;
}

// Runs an op: op() blocking, then finish; or op(async_op), the Work keeping
// `kept` alive and running finish in wait().
template <typename Op>
Work issue(bool async, std::vector<at::Tensor> kept, std::function<void()> finish, Op&& op) {
  if (!async) {
    op();
    if (finish) finish();
    return Work();
  }
  auto st = std::make_shared<Work::State>();
  st->keep = std::move(kept);
  st->finish = std::move(finish);
  st->work = op(async_op);
  return Work(std::move(st));
}

}  // namespace

DataType to_data_type(c10::ScalarType type, std::string_view op, std::string_view arg) {
  switch (type) {
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    case c10::ScalarType::Int:
      return DataType::kInt32;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    case c10::ScalarType::Byte:
      return DataType::kUInt8;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    default:
      break;
  }
  throw InvalidArgument(fmt::format(
      "{}: argument '{}' has dtype {}; cohort's collectives take Float, Double, Half, BFloat16, "
      "Int, Long and Byte tensors (convert with .to(torch::kFloat) or another of these)",
      op, arg, c10::toString(type)));
}

// ---- Work ----

const Work::State& Work::state() const {
  COHORT_CHECK(state_ != nullptr,
               "libtorch::Work: undefined (a blocking call returns no Work; pass async_op)");
  return *state_;
}

void Work::wait(Duration timeout) const {
  state().work.wait(timeout);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->finished) return;
  state_->finished = true;
  if (state_->finish) state_->finish();
}

bool Work::is_completed() const { return state().work.is_completed(); }
bool Work::is_success() const { return state().work.is_success(); }
std::exception_ptr Work::exception() const { return state().work.exception(); }
const distributed::Work& Work::work() const { return state().work; }

// ---- ProcessGroup ----

distributed::ProcessGroup& ProcessGroup::get() const {
  COHORT_CHECK(pg_ != nullptr,
               "libtorch::ProcessGroup: undefined handle (this rank is outside the subgroup, or "
               "the group was never initialised)");
  return *pg_;
}

Work ProcessGroup::run_tensor(distributed::OpArgs a, const at::Tensor& t, bool async) const {
  Buf b = check_tensor(collectives::op_kind_name(a.kind), "tensor", t);
  a = collectives::with_one_buffer(a, b.data, b.count, b.dtype);
  auto& pg = get();
  return issue(async, {t}, {}, [&](auto... tag) { return pg.run(a, tag...); });
}

Work ProcessGroup::all_gather_impl(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                   const AllGatherOptions& o, bool async) const {
  auto& pg = get();
  Buf in = check_tensor("all_gather", "input", input);
  auto outs = check_list("all_gather", "outputs", outputs, static_cast<size_t>(pg.size()), in.dtype,
                         in.count, "like input");
  Staging st = stage(input, outs.size(), {}, outs);
  return issue(async, keep(outputs, {input, st.flat}), st.finish(), [&](auto... tag) {
    return pg.all_gather(in.data, st.data, in.count, in.dtype, o, tag...);
  });
}

Work ProcessGroup::all_gather_into_tensor_impl(const at::Tensor& output, const at::Tensor& input,
                                               const AllGatherOptions& o, bool async) const {
  const char* op = "all_gather_into_tensor";
  auto& pg = get();
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  check_like(op, "output", out, in.dtype, in.count * static_cast<size_t>(pg.size()),
             "size() * input.numel()");
  return issue(async, {input, output}, {}, [&](auto... tag) {
    return pg.all_gather(in.data, out.data, in.count, in.dtype, o, tag...);
  });
}

Work ProcessGroup::gather_impl(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                               const GatherOptions& o, bool async) const {
  auto& pg = get();
  Buf in = check_tensor("gather", "input", input);
  if (pg.rank() != o.root) {
    COHORT_CHECK(outputs.empty(),
                 "gather: argument 'outputs' must be empty off the root (rank {}, root {}), got "
                 "{} tensors",
                 pg.rank(), o.root, outputs.size());
    return issue(async, {input}, {}, [&](auto... tag) {
      return pg.gather(in.data, nullptr, in.count, in.dtype, o, tag...);
    });
  }
  auto outs = check_list("gather", "outputs", outputs, static_cast<size_t>(pg.size()), in.dtype,
                         in.count, "like input");
  Staging st = stage(input, outs.size(), {}, outs);
  return issue(async, keep(outputs, {input, st.flat}), st.finish(), [&](auto... tag) {
    return pg.gather(in.data, st.data, in.count, in.dtype, o, tag...);
  });
}

Work ProcessGroup::scatter_impl(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                const ScatterOptions& o, bool async) const {
  auto& pg = get();
  Buf out = check_tensor("scatter", "output", output);
  if (pg.rank() != o.root) {
    COHORT_CHECK(inputs.empty(),
                 "scatter: argument 'inputs' must be empty off the root (rank {}, root {}), got "
                 "{} tensors",
                 pg.rank(), o.root, inputs.size());
    return issue(async, {output}, {}, [&](auto... tag) {
      return pg.scatter(nullptr, out.data, out.count, out.dtype, o, tag...);
    });
  }
  auto ins = check_list("scatter", "inputs", inputs, static_cast<size_t>(pg.size()), out.dtype,
                        out.count, "like output");
  Staging st = stage(output, ins.size(), ins, {});
  return issue(async, {output, st.flat}, {}, [&](auto... tag) {
    return pg.scatter(st.data, out.data, out.count, out.dtype, o, tag...);
  });
}

Work ProcessGroup::reduce_scatter_impl(const at::Tensor& output,
                                       const std::vector<at::Tensor>& inputs,
                                       const ReduceScatterOptions& o, bool async) const {
  auto& pg = get();
  Buf out = check_tensor("reduce_scatter", "output", output);
  auto ins = check_list("reduce_scatter", "inputs", inputs, static_cast<size_t>(pg.size()),
                        out.dtype, out.count, "like output");
  Staging st = stage(output, ins.size(), ins, {});
  return issue(async, {output, st.flat}, {}, [&](auto... tag) {
    return pg.reduce_scatter(st.data, out.data, out.count, out.dtype, o, tag...);
  });
}

Work ProcessGroup::reduce_scatter_tensor_impl(const at::Tensor& output, const at::Tensor& input,
                                              const ReduceScatterOptions& o, bool async) const {
  const char* op = "reduce_scatter_tensor";
  auto& pg = get();
  Buf out = check_tensor(op, "output", output);
  Buf in = check_tensor(op, "input", input);
  check_like(op, "input", in, out.dtype, out.count * static_cast<size_t>(pg.size()),
             "size() * output.numel()");
  return issue(async, {input, output}, {}, [&](auto... tag) {
    return pg.reduce_scatter(in.data, out.data, out.count, out.dtype, o, tag...);
  });
}

Work ProcessGroup::all_to_all_impl(const std::vector<at::Tensor>& outputs,
                                   const std::vector<at::Tensor>& inputs, const AllToAllOptions& o,
                                   bool async) const {
  auto& pg = get();
  const auto n = static_cast<size_t>(pg.size());
  COHORT_CHECK(inputs.size() == n,
               "all_to_all: argument 'inputs' must hold {} tensors (one per rank), got {}", n,
               inputs.size());
  Buf first = check_tensor("all_to_all", "inputs[0]", inputs[0]);
  auto ins =
      check_list("all_to_all", "inputs", inputs, n, first.dtype, first.count, "like inputs[0]");
  auto outs =
      check_list("all_to_all", "outputs", outputs, n, first.dtype, first.count, "like inputs[0]");
  Staging send = stage(inputs[0], n, ins, {});
  Staging recv = stage(inputs[0], n, {}, outs);
  return issue(async, keep(outputs, {send.flat, recv.flat}), recv.finish(), [&](auto... tag) {
    return pg.all_to_all(send.data, recv.data, first.count, first.dtype, o, tag...);
  });
}

Work ProcessGroup::all_to_all_single_impl(const at::Tensor& output, const at::Tensor& input,
                                          const AllToAllOptions& o, bool async) const {
  const char* op = "all_to_all_single";
  auto& pg = get();
  const auto n = static_cast<size_t>(pg.size());
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  COHORT_CHECK(in.count % n == 0,
               "{}: argument 'input' has {} elements, not a multiple of the group size {} (equal "
               "splits only)",
               op, in.count, n);
  check_like(op, "output", out, in.dtype, in.count, "like input");
  return issue(async, {input, output}, {}, [&](auto... tag) {
    return pg.all_to_all(in.data, out.data, in.count / n, in.dtype, o, tag...);
  });
}

Work ProcessGroup::barrier(const BarrierOptions& opts, AsyncOp) const {
  auto& pg = get();
  return issue(true, {}, {}, [&](auto... tag) { return pg.barrier(opts, tag...); });
}

ProcessGroup init_process_group(std::string_view backend, const std::string& init_method,
                                int world_size, int rank, Duration timeout) {
  return ProcessGroup(
      distributed::init_process_group(backend, init_method, world_size, rank, timeout));
}

}  // namespace cohort::libtorch
