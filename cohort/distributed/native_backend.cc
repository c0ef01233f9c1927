#include "cohort/distributed/native_backend.h"

#include <algorithm>

namespace cohort::distributed {

NativeBackend::NativeBackend(std::shared_ptr<rendezvous::Store> store, int rank, int size,
                             const ProcessGroupOptions& options) {
  collectives::CommunicatorOptions o;
  o.name = options.name;
  o.timeout = options.timeout;
  o.transport = options.transport;
  o.tuning = options.tuning;
  o.network = options.network;
  o.flight_recorder_entries = options.flight_recorder_entries;
  o.flight_recorder_dir = options.flight_recorder_dir;
  comm_ = collectives::Communicator::create(*store, rank, size, o);
  comm_->set_diagnostic_store(std::move(store));
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
