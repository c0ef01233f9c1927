#include "cohort/torch_backend/process_group_cohort.h"

#include <Python.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <numeric>
#include <optional>

#include "cohort/base/error.h"
#include "cohort/torch_backend/cohort_work.h"
#include "cohort/torch_backend/torch_store.h"

namespace cohort::torch_backend {
namespace {

using c10d::OpType;
using distributed::async_op;
using distributed::DataType;
using distributed::Duration;
using distributed::ReduceOp;

// c10d's "unset" (-1 ms) is cohort's "the group's timeout".
Duration to_timeout(std::chrono::milliseconds t) {
  return t.count() <= 0 ? distributed::kUseDefaultTimeout : Duration(t.count());
}

ReduceOp to_reduce_op(const c10d::ReduceOp& op, const char* name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProduct;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    case c10d::ReduceOp::BAND:
      return ReduceOp::kBand;
    case c10d::ReduceOp::BOR:
      return ReduceOp::kBor;
    case c10d::ReduceOp::BXOR:
      return ReduceOp::kBxor;
    default:
      break;
  }
  throw NotSupported(fmt::format(
      "{}: the cohort backend has no reduction {} (it takes SUM, AVG, PRODUCT, MIN, MAX, BAND, "
      "BOR and BXOR; PREMUL_SUM is NCCL's)",
      name, static_cast<int>(op.op_)));
}

const at::Tensor& single(const char* op, const char* arg, const std::vector<at::Tensor>& list) {
  COHORT_CHECK(list.size() == 1,
               "{}: the cohort backend takes one tensor in '{}' per call, got {} (the *_multigpu "
               "forms, one tensor per GPU, are NCCL's)",
               op, arg, list.size());
  return list[0];
}

bool reducible(const at::Tensor& t) {
  try {
    libtorch::to_data_type(t.scalar_type());
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

// A tensor an op that only moves data may take: itself when cohort's
// collectives know its dtype, else the same memory as bytes (complex,
// int16, ...). Non-contiguous tensors pass as they are, for the adapter's
// error.
at::Tensor movable(const at::Tensor& t) {
  if (!t.defined() || reducible(t) || !t.is_contiguous() || t.layout() != at::kStrided) return t;
  return t.reshape({-1}).view(at::kByte);
}

std::vector<at::Tensor> movable(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const at::Tensor& t : list) out.push_back(movable(t));
  return out;
}

// gather's outputs and scatter's inputs: one list of `size` tensors on the
// root (PyTorch passes [list]), none elsewhere ([] or [[]]).
std::vector<at::Tensor> root_list(const char* op, const char* arg,
                                  const std::vector<std::vector<at::Tensor>>& lists, int root,
                                  int rank, int size) {
  if (rank == root) {
    COHORT_CHECK(lists.size() == 1,
                 "{}: the root takes one list of {} tensors in '{}', got {} lists", op, size, arg,
                 lists.size());
    return lists[0];
  }
  COHORT_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()),
               "{}: only the root (rank {}) takes '{}'; rank {} got {} lists", op, root, arg, rank,
               lists.size());
  return {};
}

// The bytes of `t` (contiguous copy when needed) as a 1-D uint8 tensor.
at::Tensor as_bytes(const at::Tensor& t) { return t.contiguous().reshape({-1}).view(at::kByte); }

// Copies `bytes` (a 1-D uint8 slice) into `dst`, reinterpreted as dst's dtype.
void copy_bytes_into(const at::Tensor& bytes, const at::Tensor& dst) {
  dst.copy_(bytes.view(dst.scalar_type()).view(dst.sizes()));
}

}  // namespace

c10::intrusive_ptr<ProcessGroupCohort> ProcessGroupCohort::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& backend, const std::string& name) {
  COHORT_CHECK(timeout.count() > 0, "init_process_group(\"cohort\"): timeout must be positive");
  auto cstore = std::make_shared<TorchStore>(store);
  cstore->set_timeout(timeout);
  distributed::ProcessGroupOptions options = distributed::options_from_env(timeout);
  options.name = name;
  const distributed::BackendKind kind =
      backend == "auto" ? distributed::BackendKind::kNative : distributed::parse_backend(backend);
  std::shared_ptr<distributed::ProcessGroup> group;
  if (kind == distributed::BackendKind::kMpi) {
    // MPI brings its own rendezvous (mpirun): the world only.
    group = distributed::ProcessGroup::create(kind, nullptr, -1, -1, options);
    COHORT_CHECK(group->size() == size && group->rank() == rank,
                 "init_process_group(\"cohort\") over mpi: torch.distributed says rank {} of {}, "
                 "MPI says rank {} of {}; the mpi backend carries the world group only",
                 rank, size, group->rank(), group->size());
  } else {
    group = distributed::ProcessGroup::create(kind, cstore, rank, size, options);
  }
  return c10::make_intrusive<ProcessGroupCohort>(std::move(cstore), std::move(group));
}

ProcessGroupCohort::ProcessGroupCohort(std::shared_ptr<rendezvous::Store> store,
                                       std::shared_ptr<distributed::ProcessGroup> group)
    : c10d::ProcessGroup(group->rank(), group->size()),
      store_(std::move(store)),
      group_(group),
      pg_(std::move(group)) {}

ProcessGroupCohort::~ProcessGroupCohort() {
  // Python drops its last reference to a group with the GIL held, and
  // destroy() waits for the group's thread, which may be releasing the last
  // reference to a tensor Python owns (a finished op's Work), and that takes
  // the GIL: wait without holding it.
  PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  try {
    group_->destroy();
  } catch (const std::exception&) {
    // A destructor has nobody to tell; destroy() only fails the pending ops.
  }
  if (saved) PyEval_RestoreThread(saved);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single("broadcast", "tensors", tensors);
  COHORT_CHECK(opts.rootTensor == 0, "broadcast: rootTensor must be 0 (one tensor), got {}",
               opts.rootTensor);
  auto w = pg_.broadcast(
      movable(t), {.root = static_cast<int>(opts.rootRank), .timeout = to_timeout(opts.timeout)},
      async_op);
  return collective(
      CohortWork::make(rank(), OpType::BROADCAST, "cohort:broadcast", tensors, tensors, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single("allreduce", "tensors", tensors);
  auto w = pg_.all_reduce(
      t, {.op = to_reduce_op(opts.reduceOp, "allreduce"), .timeout = to_timeout(opts.timeout)},
      async_op);
  return collective(
      CohortWork::make(rank(), OpType::ALLREDUCE, "cohort:all_reduce", tensors, tensors, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  COHORT_CHECK(!tensors.empty(), "{}: the tensor list is empty", op);
  std::vector<at::Tensor> flat_parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    COHORT_CHECK(tensors[i].scalar_type() == tensors[0].scalar_type(),
                 "{}: tensors[{}] has dtype {}, tensors[0] {}; all tensors must have one dtype", op,
                 i, c10::toString(tensors[i].scalar_type()),
                 c10::toString(tensors[0].scalar_type()));
    COHORT_CHECK(tensors[i].device() == tensors[0].device(),
                 "{}: tensors[{}] is on {}, tensors[0] on {}; all tensors must be on one device",
                 op, i, tensors[i].device().str(), tensors[0].device().str());
    flat_parts.push_back(tensors[i].reshape({-1}));
  }
  at::Tensor flat = at::cat(flat_parts);
  auto w = pg_.all_reduce(
      flat, {.op = to_reduce_op(opts.reduceOp, op), .timeout = to_timeout(opts.timeout)}, async_op);
  auto unflatten = [flat, tensors] {
    at::NoGradGuard no_grad;
    int64_t off = 0;
    for (const at::Tensor& t : tensors) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  };
  return collective(CohortWork::make(rank(), OpType::ALLREDUCE_COALESCED, "cohort:all_reduce",
                                     tensors, tensors, w, unflatten));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single("reduce", "tensors", tensors);
  COHORT_CHECK(opts.rootTensor == 0, "reduce: rootTensor must be 0 (one tensor), got {}",
               opts.rootTensor);
  auto w = pg_.reduce(t,
                      {.op = to_reduce_op(opts.reduceOp, "reduce"),
                       .root = static_cast<int>(opts.rootRank),
                       .timeout = to_timeout(opts.timeout)},
                      async_op);
  return collective(CohortWork::make(rank(), OpType::REDUCE, "cohort:reduce", tensors, tensors, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = single("allgather", "inputs", inputs);
  COHORT_CHECK(outputs.size() == 1,
               "allgather: the cohort backend takes one output list per call, got {}",
               outputs.size());
  auto w = pg_.all_gather(movable(outputs[0]), movable(in), {.timeout = to_timeout(opts.timeout)},
                          async_op);
  return collective(
      CohortWork::make(rank(), OpType::ALLGATHER, "cohort:all_gather", inputs, outputs[0], w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  auto w = pg_.all_gather_into_tensor(movable(output), movable(input),
                                      {.timeout = to_timeout(opts.timeout)}, async_op);
  return collective(CohortWork::make(rank(), OpType::_ALLGATHER_BASE,
                                     "cohort:all_gather_into_tensor", {input}, {output}, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  const auto n = static_cast<size_t>(getSize());
  COHORT_CHECK(output_lists.size() == n,
               "{}: argument 'output_lists' must hold {} lists (one per rank), got {}", op, n,
               output_lists.size());
  // One flat byte buffer: every input's bytes, one after the other.
  int64_t total = 0;
  for (const at::Tensor& t : inputs) total += static_cast<int64_t>(t.nbytes());
  for (size_t r = 0; r < n; ++r) {
    COHORT_CHECK(output_lists[r].size() == inputs.size(),
                 "{}: output_lists[{}] holds {} tensors; it must hold one per input ({})", op, r,
                 output_lists[r].size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& o = output_lists[r][i];
      COHORT_CHECK(o.scalar_type() == inputs[i].scalar_type() && o.numel() == inputs[i].numel(),
                   "{}: output_lists[{}][{}] has dtype {} and {} elements; it must be like "
                   "inputs[{}] (dtype {}, {} elements)",
                   op, r, i, c10::toString(o.scalar_type()), o.numel(), i,
                   c10::toString(inputs[i].scalar_type()), inputs[i].numel());
    }
  }
  at::Tensor send = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  int64_t off = 0;
  for (const at::Tensor& t : inputs) {
    const auto b = static_cast<int64_t>(t.nbytes());
    if (b) send.narrow(0, off, b).copy_(as_bytes(t));
    off += b;
  }
  at::Tensor recv = at::empty({total * static_cast<int64_t>(n)}, send.options());
  auto w = pg_.all_gather_into_tensor(recv, send, {.timeout = to_timeout(opts.timeout)}, async_op);
  auto unpack = [recv, output_lists, total] {
    at::NoGradGuard no_grad;
    for (size_t r = 0; r < output_lists.size(); ++r) {
      int64_t at_ = total * static_cast<int64_t>(r);
      for (const at::Tensor& o : output_lists[r]) {
        const auto b = static_cast<int64_t>(o.nbytes());
        if (b) copy_bytes_into(recv.narrow(0, at_, b), o);
        at_ += b;
      }
    }
  };
  std::vector<at::Tensor> outs;
  for (const auto& l : output_lists) outs.insert(outs.end(), l.begin(), l.end());
  return collective(CohortWork::make(rank(), OpType::ALLGATHER_COALESCED, "cohort:all_gather",
                                     inputs, outs, w, unpack));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = single("gather", "inputs", inputs);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs = root_list("gather", "outputs", outputs, root, rank(), getSize());
  auto w = pg_.gather(movable(outs), movable(in),
                      {.root = root, .timeout = to_timeout(opts.timeout)}, async_op);
  return collective(CohortWork::make(rank(), OpType::GATHER, "cohort:gather", inputs, outs, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single("scatter", "outputs", outputs);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins = root_list("scatter", "inputs", inputs, root, rank(), getSize());
  auto w = pg_.scatter(movable(out), movable(ins),
                       {.root = root, .timeout = to_timeout(opts.timeout)}, async_op);
  return collective(CohortWork::make(rank(), OpType::SCATTER, "cohort:scatter", ins, outputs, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single("reduce_scatter", "outputs", outputs);
  COHORT_CHECK(inputs.size() == 1,
               "reduce_scatter: the cohort backend takes one input list per call, got {}",
               inputs.size());
  auto w = pg_.reduce_scatter(
      out, inputs[0],
      {.op = to_reduce_op(opts.reduceOp, "reduce_scatter"), .timeout = to_timeout(opts.timeout)},
      async_op);
  return collective(CohortWork::make(rank(), OpType::REDUCE_SCATTER, "cohort:reduce_scatter",
                                     inputs[0], outputs, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  auto w = pg_.reduce_scatter_tensor(output, input,
                                     {.op = to_reduce_op(opts.reduceOp, "_reduce_scatter_base"),
                                      .timeout = to_timeout(opts.timeout)},
                                     async_op);
  return collective(CohortWork::make(rank(), OpType::_REDUCE_SCATTER_BASE,
                                     "cohort:reduce_scatter_tensor", {output}, {output}, w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  const distributed::AllToAllOptions o{.timeout = to_timeout(opts.timeout)};
  if (output_splits.empty() && input_splits.empty()) {
    auto w = pg_.all_to_all_single(movable(output), movable(input), o, async_op);
    return collective(
        CohortWork::make(rank(), OpType::ALLTOALL_BASE, "cohort:all_to_all", {input}, {output}, w));
  }
  // Split sizes count rows (dim 0), as PyTorch's all_to_all_single.
  const auto n = static_cast<size_t>(getSize());
  auto counts = [&](const char* arg, const at::Tensor& t, const std::vector<int64_t>& splits) {
    COHORT_CHECK(t.dim() >= 1, "{}: argument '{}' must have a first dimension to split", op, arg);
    COHORT_CHECK(t.is_contiguous(), "{}: argument '{}' must be contiguous", op, arg);
    const int64_t rows = t.size(0);
    const auto row_bytes = static_cast<size_t>(rows ? t.nbytes() / static_cast<size_t>(rows) : 0);
    std::vector<size_t> c(n);
    if (splits.empty()) {
      COHORT_CHECK(rows % static_cast<int64_t>(n) == 0,
                   "{}: argument '{}' has {} rows, not a multiple of the group size {} (pass "
                   "split sizes)",
                   op, arg, rows, n);
      for (auto& x : c) x = static_cast<size_t>(rows) / n * row_bytes;
      return c;
    }
    COHORT_CHECK(splits.size() == n, "{}: {} split sizes for '{}' must be {} (one per rank)", op,
                 splits.size(), arg, n);
    int64_t sum = 0;
    for (size_t j = 0; j < n; ++j) {
      COHORT_CHECK(splits[j] >= 0, "{}: split size {} of '{}' is negative", op, j, arg);
      sum += splits[j];
      c[j] = static_cast<size_t>(splits[j]) * row_bytes;
    }
    COHORT_CHECK(sum == rows, "{}: the split sizes of '{}' add up to {}, but it has {} rows", op,
                 arg, sum, rows);
    return c;
  };
  COHORT_CHECK(output.scalar_type() == input.scalar_type(),
               "{}: output has dtype {}, input {}; they must match", op,
               c10::toString(output.scalar_type()), c10::toString(input.scalar_type()));
  auto in_counts = counts("input", input, input_splits);
  auto out_counts = counts("output", output, output_splits);
  return collective(all_to_all_bytes(OpType::ALLTOALL_BASE, {input}, {output}, output, input,
                                     std::move(out_counts), std::move(in_counts), o, {}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  const auto n = static_cast<size_t>(getSize());
  const distributed::AllToAllOptions o{.timeout = to_timeout(opts.timeout)};
  COHORT_CHECK(inputs.size() == n && outputs.size() == n,
               "{}: 'inputs' and 'outputs' must hold {} tensors each (one per rank), got {} and {}",
               op, n, inputs.size(), outputs.size());
  bool even = true;
  for (size_t j = 0; j < n; ++j) {
    even = even && inputs[j].nbytes() == inputs[0].nbytes() &&
           outputs[j].nbytes() == inputs[0].nbytes() &&
           inputs[j].scalar_type() == inputs[0].scalar_type() &&
           outputs[j].scalar_type() == inputs[0].scalar_type();
  }
  if (even) {
    auto w = pg_.all_to_all(movable(outputs), movable(inputs), o, async_op);
    return collective(
        CohortWork::make(rank(), OpType::ALLTOALL, "cohort:all_to_all", inputs, outputs, w));
  }
  // Tensors of several sizes: packed into one byte buffer each way.
  std::vector<size_t> in_counts(n), out_counts(n);
  int64_t in_total = 0, out_total = 0;
  for (size_t j = 0; j < n; ++j) {
    in_counts[j] = inputs[j].nbytes();
    out_counts[j] = outputs[j].nbytes();
    in_total += static_cast<int64_t>(in_counts[j]);
    out_total += static_cast<int64_t>(out_counts[j]);
  }
  at::Tensor send = at::empty({in_total}, at::TensorOptions().dtype(at::kByte));
  int64_t off = 0;
  for (size_t j = 0; j < n; ++j) {
    const auto b = static_cast<int64_t>(in_counts[j]);
    if (b) send.narrow(0, off, b).copy_(as_bytes(inputs[j]));
    off += b;
  }
  at::Tensor recv = at::empty({out_total}, send.options());
  auto unpack = [recv, outputs] {
    at::NoGradGuard no_grad;
    int64_t at_ = 0;
    for (const at::Tensor& t : outputs) {
      const auto b = static_cast<int64_t>(t.nbytes());
      if (b) copy_bytes_into(recv.narrow(0, at_, b), t);
      at_ += b;
    }
  };
  return collective(all_to_all_bytes(OpType::ALLTOALL, inputs, outputs, recv, send,
                                     std::move(out_counts), std::move(in_counts), o, unpack));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::all_to_all_bytes(
    OpType type, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
    const at::Tensor& recv, const at::Tensor& send, std::vector<size_t> out_counts,
    std::vector<size_t> in_counts, const distributed::AllToAllOptions& o,
    std::function<void()> after) {
  COHORT_CHECK(send.device().is_cpu() && recv.device().is_cpu(),
               "all_to_all with uneven splits: the cohort backend takes CPU tensors here (got {} "
               "and {})",
               send.device().str(), recv.device().str());
  distributed::Work w = group_->all_to_all_v(send.nbytes() ? send.data_ptr() : nullptr, in_counts,
                                             recv.nbytes() ? recv.data_ptr() : nullptr, out_counts,
                                             DataType::kUInt8, o, async_op);
  return CohortWork::make(rank(), type, "cohort:all_to_all", inputs, std::move(outputs), w,
                          {send, recv}, std::move(after));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  const at::Tensor& t = single("send", "tensors", tensors);
  COHORT_CHECK(tag >= 0, "send: tag must be >= 0, got {}", tag);
  auto w = pg_.send(movable(t), dst, {.tag = static_cast<uint32_t>(tag)}, async_op);
  return CohortWork::make(rank(), OpType::SEND, "cohort:send", tensors, tensors, w);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  const at::Tensor& t = single("recv", "tensors", tensors);
  COHORT_CHECK(tag >= 0, "recv: tag must be >= 0, got {}", tag);
  auto w = pg_.recv(movable(t), src, {.tag = static_cast<uint32_t>(tag)}, async_op);
  return CohortWork::make(rank(), OpType::RECV, "cohort:recv", tensors, tensors, w, {},
                          [src] { return src; });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  const char* op = "recv_any";
  const at::Tensor& t = single(op, "tensors", tensors);
  COHORT_CHECK(tag >= 0, "{}: tag must be >= 0, got {}", op, tag);
  COHORT_CHECK(t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous(),
               "{}: the tensor must be a dense, contiguous CPU tensor (got {} on {}{})", op,
               c10::toString(t.scalar_type()), t.device().str(),
               t.is_contiguous() ? "" : ", not contiguous");
  const at::Tensor m = movable(t);
  distributed::Work w =
      group_->recv_any(m.numel() ? m.data_ptr() : nullptr, static_cast<size_t>(m.numel()),
                       libtorch::to_data_type(m.scalar_type(), op, "tensor"),
                       {.tag = static_cast<uint32_t>(tag)}, async_op);
  return CohortWork::make(rank(), OpType::RECVANYSOURCE, "cohort:recvAnySource", tensors, tensors,
                          w, {m}, {}, [w] { return w.source_rank(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::barrier(const c10d::BarrierOptions& opts) {
  auto w = pg_.barrier({.timeout = to_timeout(opts.timeout)}, async_op);
  return collective(CohortWork::make(rank(), OpType::BARRIER, "cohort:barrier", {}, {}, w));
}

void ProcessGroupCohort::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // c10d's "unset" is the group's timeout; 0 is 0, as gloo takes it.
  const Duration timeout =
      opts.timeout.count() >= 0 ? Duration(opts.timeout.count()) : group_->timeout();
  const std::string base = fmt::format("cohort/monitored_barrier/{}/", monitored_barriers_++);
  const std::string verdict_key = base + "verdict";
  const std::string what =
      fmt::format("monitored_barrier (group '{}', rank {})", group_->name(), rank());
  store_->set(base + std::to_string(rank()), std::string("1"));
  if (rank() != 0) {
    // Rank 0 writes "ok", or why it failed; it waits up to `timeout` for each
    // rank, so allow it that long plus a margin.
    const std::string reached = fmt::format(
        "{}: Rank {} successfully reached monitoredBarrier, but received errors while waiting "
        "for send/recv from rank 0",
        what, rank());
    try {
      store_->wait({verdict_key}, timeout * getSize() + std::chrono::seconds(5));
    } catch (const TimeoutError&) {
      throw TimeoutError(fmt::format(
          "{}: rank 0 gave no verdict within {} ms (it is gone or stuck). Please check rank 0 "
          "logs for faulty rank.",
          reached, timeout.count()));
    }
    const std::string verdict = store_->get_string(verdict_key);
    if (verdict != "ok") {
      throw TimeoutError(
          fmt::format("{}: {}. Please check rank 0 logs for faulty rank.", reached, verdict));
    }
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto fail = [&](const std::string& why) {
    store_->set(verdict_key, why);
    throw TimeoutError(fmt::format("{}: {}", what, why));
  };
  std::vector<int> missing;
  for (int r = 1; r < getSize(); ++r) {
    const auto left =
        std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    const std::string key = base + std::to_string(r);
    if (left <= Duration::zero() && missing.empty() && !wait_all_ranks && !store_->check({key})) {
      fail(
          fmt::format("Rank 0 timed out in monitoredBarrier after {} ms (rank {} had not "
                      "arrived)",
                      timeout.count(), r));
    }
    bool arrived = true;
    if (left > Duration::zero()) {
      try {
        store_->wait({key}, left);
      } catch (const TimeoutError&) {
        arrived = false;
      }
    } else {
      arrived = store_->check({key});
    }
    if (!arrived) {
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    fail(fmt::format("Rank{} {} failed to pass monitoredBarrier in {} ms",
                     missing.size() > 1 ? "s" : "", ranks, timeout.count()));
  }
  store_->set(verdict_key, std::string("ok"));
}

void ProcessGroupCohort::setSequenceNumberForGroup() {
  // Every rank starts at 0 and counts the same collectives: nothing to agree on.
}

uint64_t ProcessGroupCohort::getSequenceNumberForGroup() { return sequence_.load(); }

}  // namespace cohort::torch_backend
