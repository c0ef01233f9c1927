// CohortStore: PyTorch's c10d::Store over one of cohort's stores, the
// reverse of TorchStore. What cohort_torch's env:// rendezvous yields where
// PyTorch's own cannot run: under `cohort run`, which serves cohort's
// TcpStore on MASTER_PORT itself (PyTorch's rank 0 would try to serve its own
// there), and under mpirun or srun without RANK/WORLD_SIZE (cohort's
// bootstrap reads OMPI_COMM_WORLD_* and SLURM_*: rendezvous/env_bootstrap.h).
// Any backend's groups then meet over it (gloo's too).
//
// Ownership: shares the cohort store. Thread safety: as cohort's stores (all
// are safe from many threads). Failures: cohort's errors (TimeoutError naming
// the missing keys, PeerLost); Python sees RuntimeError.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

#include "cohort/rendezvous/store.h"

namespace cohort::torch_backend {

class CohortStore final : public c10d::Store {
 public:
  explicit CohortStore(std::shared_ptr<rendezvous::Store> store);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  // The keys of a TcpStore (PrefixStores over one count the whole store, as
  // c10d's PrefixStore does); NotSupported for other stores.
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;

  const std::shared_ptr<rendezvous::Store>& store() const { return store_; }

 private:
  std::shared_ptr<rendezvous::Store> store_;
};

// What the env:// bootstrap gives a PyTorch program: cohort's
// rendezvous::bootstrap("env://") (rank, world size and store from the
// launcher's variables, the store `cohort run` hosts or rank 0 serves), or,
// under mpirun with no MASTER_ADDR, a TcpStore that rank 0 serves on a free
// port and announces over MPI (builds with MPI only).
struct Rendezvous {
  c10::intrusive_ptr<CohortStore> store;
  int rank = 0;
  int world_size = 1;
};
Rendezvous env_rendezvous(int rank, int world_size, std::chrono::milliseconds timeout);

}  // namespace cohort::torch_backend
