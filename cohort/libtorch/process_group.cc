// The LibTorch-facing collectives: argument checks on at::Tensor, then
// cohort's raw-buffer ops on the tensors' own memory; list forms pack into
// or unpack from one flat buffer (the unpacking runs in Work::wait). CUDA
// tensors take one of the two paths of cuda_tensors.h: zero copy (cohort's
// tensor ops on wrappers of the device memory, on LibTorch's current
// stream) or host staging (the same op on host copies, copied back after).
#include "cohort/libtorch/process_group.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>

#include "cohort/base/error.h"
#include "cohort/libtorch/cuda_tensors.h"

namespace cohort::libtorch {

struct Work::State {
  distributed::Work work;
  std::vector<at::Tensor> keep;  // the op's buffers
  std::function<void()> finish;  // list forms: unpack after the op
  std::mutex mu;
  bool finished = false;
  // Zero copy: the CUDA device whose LibTorch current stream waits for the
  // op in wait() (-1: a host op).
  int device_index = -1;

  ~State() {
    if (!work.defined() || work.is_completed()) return;
    try {
      std::optional<detail::TorchStreamScope> scope;
      if (device_index >= 0) scope.emplace(device_index);
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
  COHORT_CHECK(t.defined(), "{}: argument '{}' is an undefined tensor; pass a defined tensor", op,
               arg);
  COHORT_CHECK(t.device().is_cpu() || t.device().is_cuda(),
               "{}: argument '{}' is on device {}; cohort's collectives take CPU tensors and CUDA "
               "tensors (move it with .cpu() and copy the result back)",
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
// `kept` alive and running finish in wait() (on cuda:<device_index>'s
// LibTorch stream when that is >= 0).
template <typename Op>
Work issue(bool async, std::vector<at::Tensor> kept, std::function<void()> finish, Op&& op,
           int device_index = -1) {
  if (!async) {
    op();
    if (finish) finish();
    return Work();
  }
  auto st = std::make_shared<Work::State>();
  st->keep = std::move(kept);
  st->finish = std::move(finish);
  st->device_index = device_index;
  st->work = op(async_op);
  return Work(std::move(st));
}

// This process's path for CUDA tensors, found once (it follows from the build
// and the machine, which do not change while the process runs).
const CudaTensorPathChoice& process_cuda_path() {
  static const CudaTensorPathChoice choice = cuda_tensor_path();
  return choice;
}

// Where an op's tensors live decides its path: the host (CPU tensors),
// or for CUDA tensors this process's path (cuda_tensors.h).
enum class Path { kHost, kZeroCopy, kStaging };
struct Route {
  Path path = Path::kHost;
  int index = -1;  // the CUDA device
};

Route route_of(const char* op, const std::vector<at::Tensor>& tensors,
               std::optional<CudaTensorPath> forced) {
  std::optional<c10::Device> device;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;  // check_tensor names it
    if (!device) {
      device = t.device();
    } else if (t.device() != *device) {
      throw InvalidArgument(fmt::format(
          "{}: expected all tensors on one device, but found at least two devices, {} and {}", op,
          device->str(), t.device().str()));
    }
  }
  if (!device || !device->is_cuda()) return Route{};
  // The build decides it (cuda_tensors.h), unless the handle chose staging.
  const CudaTensorPath path = forced ? *forced : process_cuda_path().path;
  return Route{path == CudaTensorPath::kZeroCopy ? Path::kZeroCopy : Path::kStaging,
               device->has_index() ? device->index() : 0};
}

// Zero copy: `op` (cohort's tensor ops on wrappers of the device memory) with
// LibTorch's current stream on cuda:<index> as cohort's, for the call and
// for the Work's wait.
template <typename Op>
Work issue_on_device(bool async, int index, std::vector<at::Tensor> kept,
                     std::function<void()> finish, Op&& op) {
  detail::TorchStreamScope scope(index);
  return issue(async, std::move(kept), std::move(finish), std::forward<Op>(op), index);
}

// The one-tensor ops on a cohort tensor, blocking or (with the tag) async.
template <typename... Tag>
auto run_one(distributed::ProcessGroup& pg, const distributed::OpArgs& a, const Tensor& t,
             Tag... tag) {
  switch (a.kind) {
    case OpKind::kAllReduce:
      return pg.all_reduce(t, AllReduceOptions{.op = a.op, .timeout = a.timeout}, tag...);
    case OpKind::kBroadcast:
      return pg.broadcast(t, BroadcastOptions{.root = a.root, .timeout = a.timeout}, tag...);
    case OpKind::kReduce:
      return pg.reduce(t, ReduceOptions{.op = a.op, .root = a.root, .timeout = a.timeout}, tag...);
    case OpKind::kSend:
      return pg.send(t, a.root, SendOptions{.tag = a.tag, .timeout = a.timeout}, tag...);
    case OpKind::kRecv:
      return pg.recv(t, a.root, RecvOptions{.tag = a.tag, .timeout = a.timeout}, tag...);
    default:
      break;
  }
  throw InvalidArgument(fmt::format("libtorch::ProcessGroup: {} is not a one-tensor op",
                                    collectives::op_kind_name(a.kind)));
}

// `list` (contiguous, like-sized tensors) flattened into one, by LibTorch on
// its current stream.
at::Tensor cat_flat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> parts;
  parts.reserve(list.size());
  for (const at::Tensor& t : list) parts.push_back(t.reshape({-1}));
  return at::cat(parts);
}

// Copies `flat`'s consecutive pieces into `outputs`, by LibTorch.
std::function<void()> split_into(const at::Tensor& flat, const std::vector<at::Tensor>& outputs) {
  return [flat, outputs] {
    at::NoGradGuard no_grad;
    int64_t off = 0;
    for (const at::Tensor& t : outputs) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  };
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
    case c10::ScalarType::Char:
      return DataType::kInt8;
    case c10::ScalarType::Bool:
      return DataType::kBool;
    default:
      break;
  }
  throw InvalidArgument(fmt::format(
      "{}: argument '{}' has dtype {}; cohort's collectives take Float, Double, Half, BFloat16, "
      "Int, Long, Byte, Char and Bool tensors (convert with .to(torch::kFloat) or another of "
      "these)",
      op, arg, c10::toString(type)));
}

// ---- Work ----

const Work::State& Work::state() const {
  COHORT_CHECK(state_ != nullptr,
               "libtorch::Work: undefined (a blocking call returns no Work; pass async_op)");
  return *state_;
}

void Work::wait(Duration timeout) const {
  // Zero copy: LibTorch's current stream (of the waiting thread) waits for
  // the op's end on the device, and the unpacking is ordered after it.
  std::optional<detail::TorchStreamScope> scope;
  if (state().device_index >= 0) scope.emplace(state_->device_index);
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

Work detail::chain(Work inner, std::vector<at::Tensor> keep, std::function<void()> after) {
  auto st = std::make_shared<Work::State>();
  st->work = inner.work();
  st->keep = std::move(keep);
  st->finish = [inner = std::move(inner), after = std::move(after)] {
    inner.wait();
    if (after) after();
  };
  return Work(std::move(st));
}

// ---- ProcessGroup ----

ProcessGroup ProcessGroup::with_cuda_tensor_path(CudaTensorPath path) const {
  if (path == CudaTensorPath::kZeroCopy && process_cuda_path().path != path) {
    throw NotSupported(fmt::format(
        "libtorch::ProcessGroup::with_cuda_tensor_path: zero copy is not available here: {}",
        process_cuda_path().reason));
  }
  ProcessGroup out = *this;
  out.cuda_path_ = path;
  return out;
}

CudaTensorPath ProcessGroup::cuda_tensor_path() const {
  return cuda_path_ ? *cuda_path_ : process_cuda_path().path;
}

distributed::ProcessGroup& ProcessGroup::get() const {
  COHORT_CHECK(pg_ != nullptr,
               "libtorch::ProcessGroup: undefined handle (this rank is outside the subgroup, or "
               "the group was never initialised)");
  return *pg_;
}

Work ProcessGroup::run_tensor(distributed::OpArgs a, const at::Tensor& t, bool async) const {
  const char* op = collectives::op_kind_name(a.kind);
  const Route r = route_of(op, {t}, cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    const bool written = a.kind != OpKind::kSend;
    return s.done(run_tensor(a, written ? s.out(t) : s.in(t), async));
  }
  Buf b = check_tensor(op, "tensor", t);
  auto& pg = get();
  if (r.path == Path::kZeroCopy) {
    Tensor ct = detail::wrap_device_memory(t);
    return issue_on_device(async, r.index, {t}, {},
                           [&](auto... tag) { return run_one(pg, a, ct, tag...); });
  }
  a = collectives::with_one_buffer(a, b.data, b.count, b.dtype);
  return issue(async, {t}, {}, [&](auto... tag) { return pg.run(a, tag...); });
}

Work ProcessGroup::all_gather_impl(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                                   const AllGatherOptions& o, bool async) const {
  auto& pg = get();
  const Route r = route_of("all_gather", keep(outputs, {input}), cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    return s.done(all_gather_impl(s.out(outputs), s.in(input), o, async));
  }
  Buf in = check_tensor("all_gather", "input", input);
  auto outs = check_list("all_gather", "outputs", outputs, static_cast<size_t>(pg.size()), in.dtype,
                         in.count, "like input");
  if (r.path == Path::kZeroCopy) {
    at::Tensor flat = at::empty({pg.size() * input.numel()}, input.options());
    Tensor cin = detail::wrap_device_memory(input), cflat = detail::wrap_device_memory(flat);
    return issue_on_device(
        async, r.index, keep(outputs, {input, flat}), split_into(flat, outputs),
        [&](auto... tag) { return pg.all_gather_into_tensor(cflat, cin, o, tag...); });
  }
  Staging st = stage(input, outs.size(), {}, outs);
  return issue(async, keep(outputs, {input, st.flat}), st.finish(), [&](auto... tag) {
    return pg.all_gather(in.data, st.data, in.count, in.dtype, o, tag...);
  });
}

Work ProcessGroup::all_gather_into_tensor_impl(const at::Tensor& output, const at::Tensor& input,
                                               const AllGatherOptions& o, bool async) const {
  const char* op = "all_gather_into_tensor";
  auto& pg = get();
  const Route r = route_of(op, {output, input}, cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    return s.done(all_gather_into_tensor_impl(s.out(output), s.in(input), o, async));
  }
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  check_like(op, "output", out, in.dtype, in.count * static_cast<size_t>(pg.size()),
             "size() * input.numel()");
  if (r.path == Path::kZeroCopy) {
    Tensor cin = detail::wrap_device_memory(input), cout = detail::wrap_device_memory(output);
    return issue_on_device(async, r.index, {input, output}, {}, [&](auto... tag) {
      return pg.all_gather_into_tensor(cout, cin, o, tag...);
    });
  }
  return issue(async, {input, output}, {}, [&](auto... tag) {
    return pg.all_gather(in.data, out.data, in.count, in.dtype, o, tag...);
  });
}

Work ProcessGroup::gather_impl(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                               const GatherOptions& o, bool async) const {
  auto& pg = get();
  // cohort has no device form of gather: CUDA tensors are staged on both paths.
  if (route_of("gather", keep(outputs, {input}), cuda_path_).path != Path::kHost) {
    detail::HostStaging s;
    return s.done(gather_impl(s.out(outputs), s.in(input), o, async));
  }
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
  // As gather: staged on both CUDA paths.
  if (route_of("scatter", keep(inputs, {output}), cuda_path_).path != Path::kHost) {
    detail::HostStaging s;
    return s.done(scatter_impl(s.out(output), s.in(inputs), o, async));
  }
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
  const Route r = route_of("reduce_scatter", keep(inputs, {output}), cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    return s.done(reduce_scatter_impl(s.out(output), s.in(inputs), o, async));
  }
  Buf out = check_tensor("reduce_scatter", "output", output);
  auto ins = check_list("reduce_scatter", "inputs", inputs, static_cast<size_t>(pg.size()),
                        out.dtype, out.count, "like output");
  if (r.path == Path::kZeroCopy) {
    at::Tensor flat = cat_flat(inputs);
    Tensor cflat = detail::wrap_device_memory(flat), cout = detail::wrap_device_memory(output);
    return issue_on_device(async, r.index, {output, flat}, {}, [&](auto... tag) {
      return pg.reduce_scatter_tensor(cout, cflat, o, tag...);
    });
  }
  Staging st = stage(output, ins.size(), ins, {});
  return issue(async, {output, st.flat}, {}, [&](auto... tag) {
    return pg.reduce_scatter(st.data, out.data, out.count, out.dtype, o, tag...);
  });
}

Work ProcessGroup::reduce_scatter_tensor_impl(const at::Tensor& output, const at::Tensor& input,
                                              const ReduceScatterOptions& o, bool async) const {
  const char* op = "reduce_scatter_tensor";
  auto& pg = get();
  const Route r = route_of(op, {output, input}, cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    return s.done(reduce_scatter_tensor_impl(s.out(output), s.in(input), o, async));
  }
  Buf out = check_tensor(op, "output", output);
  Buf in = check_tensor(op, "input", input);
  check_like(op, "input", in, out.dtype, out.count * static_cast<size_t>(pg.size()),
             "size() * output.numel()");
  if (r.path == Path::kZeroCopy) {
    Tensor cin = detail::wrap_device_memory(input), cout = detail::wrap_device_memory(output);
    return issue_on_device(async, r.index, {input, output}, {}, [&](auto... tag) {
      return pg.reduce_scatter_tensor(cout, cin, o, tag...);
    });
  }
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
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  const Route r = route_of("all_to_all", all, cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    return s.done(all_to_all_impl(s.out(outputs), s.in(inputs), o, async));
  }
  Buf first = check_tensor("all_to_all", "inputs[0]", inputs[0]);
  auto ins =
      check_list("all_to_all", "inputs", inputs, n, first.dtype, first.count, "like inputs[0]");
  auto outs =
      check_list("all_to_all", "outputs", outputs, n, first.dtype, first.count, "like inputs[0]");
  if (r.path == Path::kZeroCopy) {
    at::Tensor send = cat_flat(inputs);
    at::Tensor recv = at::empty_like(send);
    Tensor csend = detail::wrap_device_memory(send), crecv = detail::wrap_device_memory(recv);
    return issue_on_device(
        async, r.index, keep(outputs, {send, recv}), split_into(recv, outputs),
        [&](auto... tag) { return pg.all_to_all_single(crecv, csend, o, tag...); });
  }
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
  const Route r = route_of(op, {output, input}, cuda_path_);
  if (r.path == Path::kStaging) {
    detail::HostStaging s;
    return s.done(all_to_all_single_impl(s.out(output), s.in(input), o, async));
  }
  Buf in = check_tensor(op, "input", input);
  Buf out = check_tensor(op, "output", output);
  COHORT_CHECK(in.count % n == 0,
               "{}: argument 'input' has {} elements, not a multiple of the group size {} (equal "
               "splits only)",
               op, in.count, n);
  check_like(op, "output", out, in.dtype, in.count, "like input");
  if (r.path == Path::kZeroCopy) {
    Tensor cin = detail::wrap_device_memory(input), cout = detail::wrap_device_memory(output);
    return issue_on_device(async, r.index, {input, output}, {},
                           [&](auto... tag) { return pg.all_to_all_single(cout, cin, o, tag...); });
  }
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
