#include "cohort/parallel/fault_tolerance/replica_manager.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/parallel/fault_tolerance/state_transfer.h"
#include "cohort/rendezvous/hash_store.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::parallel {

ReplicaManager::ReplicaManager(ReplicaManagerOptions options) : options_(std::move(options)) {
  COHORT_CHECK(!options_.replica_id.empty(), "ReplicaManager: replica_id is empty");
  COHORT_CHECK(options_.store_port != 0,
               "ReplicaManager (replica {}): store_port is 0; give the port of the job's TCP "
               "store, whose server runs the quorum service",
               options_.replica_id);
  COHORT_CHECK(options_.min_replicas >= 1, "ReplicaManager (replica {}): min_replicas must be >= 1",
               options_.replica_id);
  if (options_.backend != distributed::BackendKind::kNative) {
    throw NotSupported(fmt::format(
        "ReplicaManager (replica {}): training through failures needs the native backend: MPI "
        "cannot shrink a communicator after a failure without ULFM, and the nccl path (abort "
        "and re-create the communicator) is not written",
        options_.replica_id));
  }
  rendezvous::TcpStoreOptions so;
  so.host = options_.store_host;
  so.port = options_.store_port;
  so.token = options_.token;
  so.timeout = options_.quorum_timeout;
  store_ = std::make_shared<rendezvous::TcpStore>(so);
  // Heartbeats begin with the first start_step: a replica still setting up
  // must not hold the others' quorum.
  heartbeat_thread_ = std::thread([this] { heartbeats(); });
}

ReplicaManager::~ReplicaManager() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (pg_ != nullptr) pg_->destroy();
}

void ReplicaManager::heartbeats() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.heartbeat_interval);
    if (stop_ || !heartbeating_.load()) continue;
    lock.unlock();
    try {
      store_->heartbeat(options_.replica_id);
    } catch (const std::exception&) {
      // start_step names the lost service; a heartbeat has nobody to tell.
    }
    lock.lock();
  }
}

void ReplicaManager::log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    COHORT_INFO("{}", line);
  }
}

void ReplicaManager::start_step() {
  const std::string last_error = std::move(step_error_);
  step_error_.clear();
  rendezvous::QuorumRequest r{.id = options_.replica_id,
                              .step = step_,
                              .last_step_failed = last_step_failed_,
                              .min_replicas = first_quorum_ && options_.initial_replicas > 0
                                                  ? options_.initial_replicas
                                                  : options_.min_replicas,
                              .join_timeout = options_.join_timeout,
                              .heartbeat_timeout = options_.heartbeat_timeout};
  rendezvous::Quorum q;
  const auto deadline = std::chrono::steady_clock::now() + options_.quorum_timeout;
  try {
    store_->heartbeat(options_.replica_id);
    heartbeating_.store(true);
    while (true) {
      q = store_->quorum(r, options_.quorum_timeout);
      const bool ahead = std::any_of(q.members.begin(), q.members.end(),
                                     [](const rendezvous::QuorumMember& m) { return m.step > 0; });
      // Peers at step 0 too: the job itself is at its start.
      if (!options_.replacement || !first_quorum_ || step_ > 0 || ahead || q.members.size() > 1)
        break;
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(fmt::format(
            "ReplicaManager (replica {}): a replacement, and no live replica ahead of it to take "
            "the state from within {} ms (the job may have ended); not training alone from the "
            "start",
            options_.replica_id, options_.quorum_timeout.count()));
      }
      std::this_thread::sleep_for(options_.heartbeat_interval);
    }
  } catch (const PeerLost& e) {
    throw Error(fmt::format(
        "ReplicaManager (replica {}, step {}): the quorum service (the TCP store's server at "
        "{}:{}) is gone ({}); without it the replicas cannot agree on who takes part, so this "
        "one stops",
        options_.replica_id, step_, options_.store_host, options_.store_port, e.what()));
  } catch (const TimeoutError& e) {
    throw Error(fmt::format(
        "ReplicaManager (replica {}, step {}): no quorum of at least {} replica(s) within {} ms: "
        "{}",
        options_.replica_id, step_, r.min_replicas, options_.quorum_timeout.count(), e.what()));
  }
  first_quorum_ = false;
  last_step_failed_ = false;
  std::vector<std::string> ids;
  for (const rendezvous::QuorumMember& m : q.members) ids.push_back(m.id);
  if (!have_group_ || q.group_epoch != group_epoch_) {
    std::vector<std::string> lost, joined, behind;
    int64_t max_step = 0;
    for (const rendezvous::QuorumMember& m : q.members) max_step = std::max(max_step, m.step);
    for (const rendezvous::QuorumMember& m : q.members)
      if (m.step < max_step) behind.push_back(fmt::format("{} at step {}", m.id, m.step));
    for (const std::string& id : members_)
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) lost.push_back(id);
    for (const std::string& id : ids)
      if (std::find(members_.begin(), members_.end(), id) == members_.end()) joined.push_back(id);
    if (!members_.empty()) {
      log(fmt::format(
          "ReplicaManager (replica {}): step {}: a new group, quorum {} of {} replica(s) "
          "[{}]{}{}{}{}",
          r.id, step_, q.id, ids.size(), fmt::join(ids, ", "),
          lost.empty() ? "" : fmt::format("; lost [{}]", fmt::join(lost, ", ")),
          joined.empty() ? "" : fmt::format("; joined [{}]", fmt::join(joined, ", ")),
          behind.empty() ? "" : fmt::format("; behind, to catch up [{}]", fmt::join(behind, ", ")),
          last_error.empty() ? "" : fmt::format("; the last step failed here: {}", last_error)));
    }
    rebuild_group(q);
  }
  members_ = std::move(ids);
  catch_up(q);
}

void ReplicaManager::rebuild_group(const rendezvous::Quorum& q) {
  if (pg_ != nullptr) {
    pg_->destroy();
    pg_.reset();
  }
  have_group_ = false;
  int rank = -1;
  for (size_t i = 0; i < q.members.size(); ++i)
    if (q.members[i].id == options_.replica_id) rank = static_cast<int>(i);
  COHORT_CHECK(rank >= 0, "ReplicaManager (replica {}): the quorum does not hold this replica",
               options_.replica_id);
  distributed::ProcessGroupOptions go = options_.group_options;
  go.name = fmt::format("ft-epoch{}", q.group_epoch);
  // Advertise the address of the route to the store, which every member reaches.
  if (go.network.master_addr.empty()) {
    go.network.master_addr = options_.store_host;
    go.network.master_port = options_.store_port;
  }
  go.timeout = options_.op_timeout;
  // Every member meets under the same fresh prefix: the epoch is the server's.
  auto store =
      std::make_shared<rendezvous::PrefixStore>(fmt::format("ft/epoch{}/", q.group_epoch), store_);
  try {
    pg_ = distributed::ProcessGroup::create(options_.backend, store, rank,
                                            static_cast<int>(q.members.size()), go);
  } catch (const std::exception& e) {
    // A member that died between the quorum and the group: this step fails
    // and the next quorum goes on without it.
    note_failure("building the group", e);
    return;
  }
  have_group_ = true;
  group_epoch_ = q.group_epoch;
  rank_ = rank;
  ++groups_built_;
}

void ReplicaManager::catch_up(const rendezvous::Quorum& q) {
  if (!have_group_) return;
  int64_t max_step = 0;
  for (const rendezvous::QuorumMember& m : q.members) max_step = std::max(max_step, m.step);
  int source = -1;
  for (size_t i = 0; i < q.members.size() && source < 0; ++i)
    if (q.members[i].step == max_step) source = static_cast<int>(i);
  try {
    for (size_t i = 0; i < q.members.size(); ++i) {
      if (q.members[i].step == max_step) continue;
      const int dst = static_cast<int>(i);
      if (rank_ == source) {
        COHORT_CHECK(options_.state_dict != nullptr,
                     "ReplicaManager (replica {}): a replica is behind and no state_dict was given",
                     options_.replica_id);
        send_state(*pg_, options_.state_dict(), dst);
      } else if (rank_ == dst) {
        COHORT_CHECK(options_.load_state_dict != nullptr,
                     "ReplicaManager (replica {}): behind and no load_state_dict was given",
                     options_.replica_id);
        TensorDict state = recv_state(*pg_, source);
        options_.load_state_dict(state);
        log(fmt::format(
            "ReplicaManager (replica {}): received the state of step {} from replica {} (was "
            "at step {})",
            options_.replica_id, max_step, q.members[static_cast<size_t>(source)].id, step_));
        step_ = max_step;
        ++states_received_;
      }
    }
  } catch (const std::exception& e) {
    note_failure("sending the state to a replica behind", e);
  }
}

void ReplicaManager::note_failure(const std::string& what, const std::exception& e) {
  if (step_error_.empty()) {
    step_error_ = fmt::format("{}: {}", what, e.what());
    log(fmt::format("ReplicaManager (replica {}): step {} fails while {}", options_.replica_id,
                    step_, step_error_));
  }
  // The others fail at once too, instead of waiting out the deadline.
  if (pg_ != nullptr) pg_->abort(fmt::format("replica {}: {}", options_.replica_id, what));
}

void ReplicaManager::all_reduce_average(std::vector<Tensor>& tensors) {
  if (!step_error_.empty() || !have_group_) return;
  try {
    for (Tensor& t : tensors) pg_->all_reduce(t, {.op = distributed::ReduceOp::kAvg});
  } catch (const std::exception& e) {
    note_failure("averaging the gradients", e);
  }
}

std::shared_ptr<distributed::ProcessGroup> ReplicaManager::local_group() {
  if (local_group_ == nullptr) {
    distributed::ProcessGroupOptions go;
    go.name = "ft-local-" + options_.replica_id;
    local_group_ = distributed::ProcessGroup::create(
        distributed::BackendKind::kNative, std::make_shared<rendezvous::HashStore>(), 0, 1, go);
  }
  return local_group_;
}

CommHookPtr ReplicaManager::comm_hook() {
  // DDP's own group is this process alone; the buckets go over the step's.
  return make_comm_hook(
      "replica_allreduce", this,
      [](ReplicaManager* m, distributed::ProcessGroup&, GradBucket& bucket) -> BucketFuture {
        if (!m->step_error_.empty() || !m->have_group_) return {};
        distributed::Work w;
        try {
          Tensor b = bucket.buffer;
          w = m->pg_->all_reduce(b, {.op = distributed::ReduceOp::kAvg}, distributed::async_op);
        } catch (const std::exception& e) {
          m->note_failure("averaging the gradients", e);
          return {};
        }
        // Waited for in finish, so that a failure is kept, not thrown out of backward.
        return {BucketReduction{{},
                                [m, w]() mutable {
                                  try {
                                    w.wait();
                                  } catch (const std::exception& e) {
                                    m->note_failure("averaging the gradients", e);
                                  }
                                },
                                bucket.buffer.nbytes()}};
      });
}

bool ReplicaManager::should_commit() {
  bool ok = step_error_.empty() && have_group_;
  if (have_group_ && step_error_.empty()) {
    try {
      Tensor vote = Tensor::full({1}, 1.0, DType::kFloat32);
      pg_->all_reduce(vote, {.op = distributed::ReduceOp::kMin});
      ok = vote.item<float>() == 1.0f;
    } catch (const std::exception& e) {
      note_failure("voting on the commit", e);
      ok = false;
    }
  }
  if (ok) {
    ++step_;
  } else {
    last_step_failed_ = true;
  }
  return ok;
}

}  // namespace cohort::parallel
