// ProcessGroup ops on device tensors. A backend that runs on the device
// (nccl) gets the op with the issuing stream's event and enqueues it on its
// own stream; for every other backend the buffers are staged through host
// memory on a side stream, as gloo does for CUDA tensors, so every strategy
// also runs where NCCL cannot (ranks sharing a GPU, no NCCL) and gives the
// reference results NCCL is checked against.
#include <fmt/format.h>

#include <cstddef>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/collectives/op_table.h"
#include "cohort/distributed/process_group.h"
#include "cohort/distributed/process_group_submit.h"

namespace cohort::distributed {
namespace {

// Ops that read their recv buffer before writing it (in place).
bool reads_recv(const collectives::OpInfo& info) {
  return info.send.extent == collectives::Extent::kNone && info.kind != OpKind::kRecv &&
         info.kind != OpKind::kRecvAny;
}

size_t buffer_bytes(const collectives::BufferRule& rule, size_t elements, const OpArgs& a,
                    int rank) {
  if (rule.root_only && rank != a.root) return 0;
  return elements * collectives::element_size(a.dtype);
}

// The op on host copies of its device buffers: device to host on a side
// stream ordered after the issuing stream's work, the backend's op on the
// host, the result back to the device; returns once it arrived there, so the
// op is complete, on the device too, when its Work is.
void run_staged(Backend& backend, OpArgs a, const DeviceOpContext& ctx, int rank, int size) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  DeviceRuntime& rt = device_runtime(ctx.device, info.name);
  DeviceScope on_device(rt, ctx.device.index());
  const Stream side = rt.side_stream(ctx.device.index(), StreamPurpose::kStagedCopies);
  rt.wait(side, ctx.ready);
  const size_t send_bytes =
      a.send ? buffer_bytes(info.send, collectives::send_elements(a, size), a, rank) : 0;
  const size_t recv_bytes =
      a.recv ? buffer_bytes(info.recv, collectives::recv_elements(a, size), a, rank) : 0;
  std::vector<std::byte> send_host(send_bytes);
  std::vector<std::byte> recv_host(recv_bytes);
  void* device_recv = a.recv;
  if (send_bytes) {
    rt.copy(send_host.data(), kCPU, a.send, ctx.device, send_bytes, side);
    a.send = send_host.data();
  }
  if (recv_bytes) {
    if (reads_recv(info)) rt.copy(recv_host.data(), kCPU, a.recv, ctx.device, recv_bytes, side);
    a.recv = recv_host.data();
  }
  backend.run(a);
  if (recv_bytes) {
    rt.copy(device_recv, ctx.device, recv_host.data(), kCPU, recv_bytes, side);
    rt.synchronize(rt.record(side), device_wait_timeout(),
                   fmt::format("{}: copying the result to {}", info.name, ctx.device.str()));
  }
}

}  // namespace

Work ProcessGroup::run_device_op(const OpArgs& a, Keep keep, bool async, Device device) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  DeviceRuntime& rt = device_runtime(device, info.name);
  DeviceOpContext ctx;
  ctx.device = device;
  ctx.stream = current_stream(device);
  ctx.ready = rt.record(ctx.stream);
  for (const Tensor* t : {keep.first, keep.second}) {
    // Borrowed memory (a LibTorch tensor's) is its owner's to keep alive;
    // only the caching allocator's own blocks are recorded on the op's stream.
    if (t && t->storage()->nbytes() > 0 && !t->storage()->borrowed())
      ctx.blocks.push_back(t->storage()->data());
  }
  Backend* b = backend_.get();
  if (!b->runs_on_device(device)) {
    const int rank = rank_, size = size_;
    // keep.counts: all_to_all_v's counts, which `a` points into, live with the op.
    return submit(info.name, info.collective, a.timeout, async, keep,
                  [b, a, ctx = std::move(ctx), rank, size, counts = keep.counts] {
                    run_staged(*b, a, ctx, rank, size);
                  });
  }
  std::shared_ptr<detail::DeviceEnd> end;
  if (async) end = std::make_shared<detail::DeviceEnd>();
  keep.device_end = end;
  std::shared_ptr<const std::vector<size_t>> counts = keep.counts;
  return submit(info.name, info.collective, a.timeout, async, std::move(keep),
                [b, a, ctx = std::move(ctx), end, counts] {
                  DeviceRuntime& rt = device_runtime(ctx.device, "process group");
                  // The op works for the tensors' device, on the queue thread
                  // or a caller's: NCCL's calls find it current, and no call
                  // makes a context on another device.
                  DeviceScope on_device(rt, ctx.device.index());
                  DeviceCompletion done = b->run_on_device(a, ctx);
                  if (end) {
                    end->end = std::move(done.end);
                    end->check = std::move(done.check);
                    return;
                  }
                  // Blocking: the issuing stream waits for the op, the host
                  // does not (PyTorch's ProcessGroupNCCL).
                  rt.wait(ctx.stream, done.end);
                });
}

}  // namespace cohort::distributed
