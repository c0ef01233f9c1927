#include "cohort/distributed/native_backend.h"

#include <algorithm>

namespace cohort::distributed {

NativeBackend::NativeBackend(std::shared_ptr<rendezvous::Store> store, int rank, int size,
                             const ProcessGroupOptions& options) {
  collectives::CommunicatorOptions o;
  o.name = options.name;
  o.timeout = options.timeout;
  o.transport = options.transport;
  o.network = options.network;
  o.flight_recorder_entries = options.flight_recorder_entries;
  o.flight_recorder_dir = options.flight_recorder_dir;
  comm_ = collectives::Communicator::create(*store, rank, size, o);
  comm_->set_diagnostic_store(std::move(store));
}

void NativeBackend::all_reduce(void* data, size_t count, DataType dtype, ReduceOp op,
                               Duration timeout) {
  comm_->all_reduce(data, count, dtype, op, timeout);
}

void NativeBackend::broadcast(void* data, size_t count, DataType dtype, int root,
                              Duration timeout) {
  comm_->broadcast(data, count, dtype, root, timeout);
}

void NativeBackend::reduce(void* data, size_t count, DataType dtype, ReduceOp op, int root,
                           Duration timeout) {
  comm_->reduce(data, count, dtype, op, root, timeout);
}

void NativeBackend::all_gather(const void* send, void* recv, size_t count, DataType dtype,
                               Duration timeout) {
  comm_->all_gather(send, recv, count, dtype, timeout);
}

void NativeBackend::gather(const void* send, void* recv, size_t count, DataType dtype, int root,
                           Duration timeout) {
  comm_->gather(send, recv, count, dtype, root, timeout);
}

void NativeBackend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
                            Duration timeout) {
  comm_->scatter(send, recv, count, dtype, root, timeout);
}

void NativeBackend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                                   ReduceOp op, Duration timeout) {
  comm_->reduce_scatter(send, recv, count, dtype, op, timeout);
}

void NativeBackend::all_to_all(const void* send, void* recv, size_t count, DataType dtype,
                               Duration timeout) {
  comm_->all_to_all(send, recv, count, dtype, timeout);
}

void NativeBackend::barrier(Duration timeout) { comm_->barrier(timeout); }

void NativeBackend::send(const void* data, size_t count, DataType dtype, int dst, uint32_t tag,
                         Duration timeout) {
  comm_->send(data, count, dtype, dst, tag, timeout);
}

void NativeBackend::recv(void* data, size_t count, DataType dtype, int src, uint32_t tag,
                         Duration timeout) {
  comm_->recv(data, count, dtype, src, tag, timeout);
}

std::unique_ptr<Backend> NativeBackend::new_subgroup(const std::vector<int>& ranks,
                                                     std::shared_ptr<rendezvous::Store> store,
                                                     const ProcessGroupOptions& options) {
  auto it = std::find(ranks.begin(), ranks.end(), comm_->rank());
  if (it == ranks.end()) return nullptr;
  int sub_rank = static_cast<int>(it - ranks.begin());
  return std::make_unique<NativeBackend>(store, sub_rank, static_cast<int>(ranks.size()), options);
}

}  // namespace cohort::distributed
