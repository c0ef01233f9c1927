#include "cohort/torch_backend/cohort_store.h"

#include <fmt/format.h>

#include "cohort/base/config.h"
#include "cohort/base/error.h"
#include "cohort/distributed/process_group.h"
#include "cohort/rendezvous/env_bootstrap.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/tcp_store.h"
#include "cohort/rendezvous/token.h"
#include "cohort/transport/network.h"

namespace cohort::torch_backend {

CohortStore::CohortStore(std::shared_ptr<rendezvous::Store> store)
    : c10d::Store(store ? store->timeout() : kDefaultTimeout), store_(std::move(store)) {
  COHORT_CHECK(store_, "CohortStore: the store is null");
}

void CohortStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  store_->set(key, value);
}

std::vector<uint8_t> CohortStore::compareSet(const std::string& key,
                                             const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  return store_->compare_set(key, expected, desired);
}

std::vector<uint8_t> CohortStore::get(const std::string& key) {
  store_->wait({key}, timeout_);
  return store_->get(key);
}

int64_t CohortStore::add(const std::string& key, int64_t value) { return store_->add(key, value); }

bool CohortStore::deleteKey(const std::string& key) { return store_->delete_key(key); }

bool CohortStore::check(const std::vector<std::string>& keys) { return store_->check(keys); }

int64_t CohortStore::getNumKeys() {
  rendezvous::Store* s = store_.get();
  while (auto* p = dynamic_cast<rendezvous::PrefixStore*>(s)) s = p->base().get();
  if (auto* tcp = dynamic_cast<rendezvous::TcpStore*>(s)) return tcp->num_keys();
  throw NotSupported("CohortStore::getNumKeys: only a TcpStore counts its keys");
}

void CohortStore::wait(const std::vector<std::string>& keys) { store_->wait(keys, timeout_); }

void CohortStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  store_->wait(keys, timeout.count() > 0 ? timeout : timeout_);
}

void CohortStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  store_->set_timeout(timeout);
}

namespace {

#if COHORT_HAVE_MPI
// mpirun without MASTER_ADDR: rank 0 serves a TcpStore on a free port of its
// advertised address, and MPI tells the others where, with a fresh token.
Rendezvous over_mpi(std::chrono::milliseconds timeout) {
  distributed::ProcessGroupOptions o;
  o.name = "cohort_torch rendezvous";
  o.timeout = timeout;
  auto mpi = distributed::ProcessGroup::create(distributed::BackendKind::kMpi, nullptr, -1, -1, o);
  constexpr size_t kLen = 512;
  std::vector<char> where(kLen, '\0');
  std::shared_ptr<rendezvous::TcpStore> store;
  if (mpi->rank() == 0) {
    rendezvous::TcpStoreOptions so;
    so.host = transport::advertised_addresses(transport::NetworkOptions{}).front();
    so.is_server = true;
    so.bind_host = "0.0.0.0";
    so.token = rendezvous::generate_token();
    so.timeout = timeout;
    store = std::make_shared<rendezvous::TcpStore>(so);
    const std::string s = fmt::format("{} {} {}", so.host, store->port(), *so.token);
    COHORT_CHECK(s.size() < kLen, "cohort_torch rendezvous: address too long: {}", s);
    std::copy(s.begin(), s.end(), where.begin());
  }
  mpi->broadcast(where.data(), kLen, distributed::DataType::kUInt8, {.root = 0});
  if (mpi->rank() != 0) {
    char host[kLen], token[kLen];
    unsigned port = 0;
    COHORT_CHECK(std::sscanf(where.data(), "%511s %u %511s", host, &port, token) == 3,
                 "cohort_torch rendezvous: rank 0 announced '{}'", where.data());
    rendezvous::TcpStoreOptions so;
    so.host = host;
    so.port = static_cast<uint16_t>(port);
    so.token = std::string(token);
    so.timeout = timeout;
    store = std::make_shared<rendezvous::TcpStore>(so);
  }
  Rendezvous r;
  r.rank = mpi->rank();
  r.world_size = mpi->size();
  r.store = c10::make_intrusive<CohortStore>(store);
  // Everyone is connected before rank 0's server may be asked to go.
  mpi->barrier();
  mpi->destroy();
  return r;
}
#endif

}  // namespace

Rendezvous env_rendezvous(int rank, int world_size, std::chrono::milliseconds timeout) {
#if COHORT_HAVE_MPI
  if (rendezvous::env_mpirun_without_master()) return over_mpi(timeout);
#endif
  rendezvous::BootstrapOptions bo;
  bo.rank = rank;
  bo.world_size = world_size;
  bo.timeout = timeout;
  rendezvous::BootstrapResult b = rendezvous::bootstrap("env://", bo);
  b.store->set_timeout(timeout);
  Rendezvous r;
  r.rank = b.rank;
  r.world_size = b.world_size;
  r.store = c10::make_intrusive<CohortStore>(b.store);
  return r;
}

}  // namespace cohort::torch_backend
