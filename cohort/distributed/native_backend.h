// NativeBackend: a process group's ops over cohort's own collectives
// (collectives::Communicator: shared memory between processes on one host,
// TCP between hosts; algorithm chosen by size, see docs/transports.md).
// Failure handling is the Communicator's: PeerLost naming a dead rank within
// about 100 ms, mismatches reported with both sides, timeouts naming the
// missing ranks. Thread safety: one op at a time; abort() from any thread.
#pragma once

#include <memory>

#include "cohort/distributed/backend.h"

namespace cohort::distributed {

class NativeBackend final : public Backend {
 public:
  // Meets the other size-1 ranks through the store (blocks until all arrived
  // or options.timeout passed).
  // The store stays shared: the flight recorder compares ranks through it on failures.
  NativeBackend(std::shared_ptr<rendezvous::Store> store, int rank, int size,
                const ProcessGroupOptions& options);

  BackendKind kind() const override { return BackendKind::kNative; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  bool ops_have_deadlines() const override { return true; }
  std::string transport_name(int peer) const override { return comm_->transport_name(peer); }
  std::string flight_record() const override { return comm_->flight_record_json(); }

  void run(const OpArgs& a) override { comm_->run(a); }

  std::unique_ptr<Backend> new_subgroup(const std::vector<int>& ranks,
                                        std::shared_ptr<rendezvous::Store> store,
                                        const ProcessGroupOptions& options) override;
  void abort(const std::string& reason) override { comm_->abort(reason); }

  collectives::Communicator& communicator() { return *comm_; }

 private:
  std::unique_ptr<collectives::Communicator> comm_;
};

}  // namespace cohort::distributed
