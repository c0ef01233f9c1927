#include "cohort/parallel/fault_tolerance/replica_manager.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

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
  COHORT_CHECK(options_.group_size >= 1 && options_.group_rank >= 0 &&
                   options_.group_rank < options_.group_size,
               "ReplicaManager (replica {}): group_rank {} is not in [0, group_size {})",
               options_.replica_id, options_.group_rank, options_.group_size);
  COHORT_CHECK(options_.group_size == 1 || options_.replica_id.find('/') == std::string::npos,
               "ReplicaManager (replica {}): a replica of several processes needs an id without "
               "'/' (its processes ask the quorum as <replica_id>/<group_rank>)",
               options_.replica_id);
  const bool nccl = options_.backend == distributed::BackendKind::kNccl;
  if (options_.backend != distributed::BackendKind::kNative && !nccl) {
    throw NotSupported(fmt::format(
        "ReplicaManager (replica {}): training through failures needs the native or the nccl "
        "backend: MPI cannot shrink a communicator after a failure without ULFM",
        options_.replica_id));
  }
  COHORT_CHECK(!nccl || options_.device.is_cuda(),
               "ReplicaManager (replica {}): the nccl backend takes device buffers: give the "
               "options' device (this process's GPU, e.g. cuda:0), not {}",
               options_.replica_id, options_.device.str());
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
  if (replica_group_ != nullptr) replica_group_->destroy();
}

std::string ReplicaManager::who() const {
  if (options_.group_size == 1) return options_.replica_id;
  return fmt::format("{} (process {} of {})", options_.replica_id, options_.group_rank,
                     options_.group_size);
}

std::string ReplicaManager::process_id() const {
  if (options_.group_size == 1) return options_.replica_id;
  return fmt::format("{}/{}", options_.replica_id, options_.group_rank);
}

void ReplicaManager::heartbeats() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.heartbeat_interval);
    if (stop_ || !heartbeating_.load()) continue;
    lock.unlock();
    try {
      store_->heartbeat(process_id());
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
  const int g = options_.group_size;
  if (g > 1) meet_replica();
  // The service counts processes: a replica of g is g of them.
  rendezvous::QuorumRequest r{.id = process_id(),
                              .step = step_,
                              .last_step_failed = last_step_failed_,
                              .min_replicas = g * (first_quorum_ && options_.initial_replicas > 0
                                                       ? options_.initial_replicas
                                                       : options_.min_replicas),
                              .join_timeout = options_.join_timeout,
                              .heartbeat_timeout = options_.heartbeat_timeout};
  rendezvous::Quorum q;
  const auto deadline = std::chrono::steady_clock::now() + options_.quorum_timeout;
  try {
    store_->heartbeat(process_id());
    heartbeating_.store(true);
    while (true) {
      q = store_->quorum(r, options_.quorum_timeout);
      if (g > 1) q = replicas_of(q);
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
            who(), options_.quorum_timeout.count()));
      }
      std::this_thread::sleep_for(options_.heartbeat_interval);
      if (g > 1) meet_replica();
    }
  } catch (const PeerLost& e) {
    throw Error(fmt::format(
        "ReplicaManager (replica {}, step {}): the quorum service (the TCP store's server at "
        "{}:{}) is gone ({}); without it the replicas cannot agree on who takes part, so this "
        "one stops",
        who(), step_, options_.store_host, options_.store_port, e.what()));
  } catch (const TimeoutError& e) {
    throw Error(fmt::format(
        "ReplicaManager (replica {}, step {}): no quorum of at least {} replica(s) within {} ms: "
        "{}",
        who(), step_, r.min_replicas / g, options_.quorum_timeout.count(), e.what()));
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
          who(), step_, q.id, ids.size(), fmt::join(ids, ", "),
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

rendezvous::Quorum ReplicaManager::replicas_of(const rendezvous::Quorum& processes) const {
  const int g = options_.group_size;
  // By replica id: the group ranks present and their lowest step.
  std::map<std::string, std::pair<std::vector<int>, int64_t>> replicas;
  for (const rendezvous::QuorumMember& m : processes.members) {
    const size_t slash = m.id.rfind('/');
    int rank = -1;
    if (slash != std::string::npos) {
      try {
        rank = std::stoi(m.id.substr(slash + 1));
      } catch (const std::exception&) {
        rank = -1;
      }
    }
    if (rank < 0 || rank >= g) {
      throw Error(fmt::format(
          "ReplicaManager (replica {}): quorum member '{}' is not a process of a replica of {} "
          "(<replica_id>/<group_rank>, group_rank < {}); every replica of a job must have the "
          "same group_size",
          who(), m.id, g, g));
    }
    auto [it, fresh] = replicas.try_emplace(m.id.substr(0, slash), std::vector<int>{}, m.step);
    it->second.first.push_back(rank);
    it->second.second = std::min(it->second.second, m.step);
  }
  rendezvous::Quorum out{.id = processes.id, .group_epoch = processes.group_epoch};
  for (auto& [id, seen] : replicas) {
    std::sort(seen.first.begin(), seen.first.end());
    const bool complete = static_cast<int>(seen.first.size()) == g;
    if (id == options_.replica_id && !complete) {
      std::vector<int> missing;
      for (int k = 0; k < g; ++k)
        if (!std::binary_search(seen.first.begin(), seen.first.end(), k)) missing.push_back(k);
      replica_lost(fmt::format("quorum {}", processes.id),
                   fmt::format("its process(es) {} did not ask to take part (gone or stopped)",
                               fmt::join(missing, ", ")));
    }
    if (complete) out.members.push_back({id, seen.second});
  }
  return out;
}

void ReplicaManager::meet_replica() {
  const double step = static_cast<double>(step_);
  Tensor t = Tensor::from_vector<double>({step, -step}).to(options_.device);
  try {
    replica_group()->all_reduce(t, {.op = distributed::ReduceOp::kMax});
  } catch (const Error& e) {
    replica_lost("meeting before the quorum", e.what());
  }
  const std::vector<double> v = t.cpu().to_vector<double>();
  COHORT_CHECK(v[0] == -v[1],
               "ReplicaManager (replica {}): the replica's processes are at steps {} to {}; they "
               "commit together, so this is a defect",
               who(), -v[1], v[0]);
}

void ReplicaManager::replica_lost(const std::string& what, const std::string& cause) const {
  throw Error(fmt::format(
      "ReplicaManager (replica {}, step {}): this replica lost a process ({}: {}); a replica of "
      "several processes fails and rejoins as one, so this process stops: its launcher restarts "
      "the replica's processes together, while the other replicas go on",
      who(), step_, what, cause));
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
               who());
  distributed::ProcessGroupOptions go = options_.group_options;
  // Process g of a replica meets process g of the others.
  const std::string dim = options_.group_size == 1 ? "" : fmt::format("g{}/", options_.group_rank);
  go.name = fmt::format("ft-epoch{}{}", q.group_epoch,
                        options_.group_size == 1 ? "" : fmt::format("-g{}", options_.group_rank));
  // Advertise the address of the route to the store, which every member reaches.
  if (go.network.master_addr.empty()) {
    go.network.master_addr = options_.store_host;
    go.network.master_port = options_.store_port;
  }
  go.timeout = options_.op_timeout;
  // Every member meets under the same fresh prefix: the epoch is the server's.
  auto store = std::make_shared<rendezvous::PrefixStore>(
      fmt::format("ft/epoch{}/{}", q.group_epoch, dim), store_);
  try {
    pg_ = create_group(store, rank, static_cast<int>(q.members.size()), go);
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
                     who());
        send_state(*pg_, options_.state_dict(), dst, options_.device);
      } else if (rank_ == dst) {
        COHORT_CHECK(options_.load_state_dict != nullptr,
                     "ReplicaManager (replica {}): behind and no load_state_dict was given", who());
        TensorDict state = recv_state(*pg_, source, options_.device);
        options_.load_state_dict(state);
        log(fmt::format(
            "ReplicaManager (replica {}): received the state of step {} from replica {} (was "
            "at step {})",
            who(), max_step, q.members[static_cast<size_t>(source)].id, step_));
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
    log(fmt::format("ReplicaManager (replica {}): step {} fails while {}", who(), step_,
                    step_error_));
  }
  // The others fail at once too, instead of waiting out the deadline.
  if (pg_ != nullptr) pg_->abort(fmt::format("replica {}: {}", who(), what));
}

void ReplicaManager::all_reduce_average(std::vector<Tensor>& tensors) {
  if (!step_error_.empty() || !have_group_) return;
  try {
    for (Tensor& t : tensors) pg_->all_reduce(t, {.op = distributed::ReduceOp::kAvg});
  } catch (const std::exception& e) {
    note_failure("averaging the gradients", e);
  }
}

std::shared_ptr<distributed::ProcessGroup> ReplicaManager::create_group(
    std::shared_ptr<rendezvous::Store> store, int rank, int size,
    distributed::ProcessGroupOptions go) {
  if (options_.device.is_cuda()) go.device_index = options_.device.index();
  if (options_.make_group) return options_.make_group(std::move(store), rank, size, go);
  return distributed::ProcessGroup::create(options_.backend, std::move(store), rank, size, go);
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

std::shared_ptr<distributed::ProcessGroup> ReplicaManager::replica_group() {
  if (options_.group_size == 1) return local_group();
  if (replica_group_ != nullptr) return replica_group_;
  const std::string base = fmt::format("ft/replica/{}/", options_.replica_id);
  // Each process counts its own starts: processes restarted together meet
  // under the same fresh prefix, never among an earlier life's keys.
  int64_t start = 0;
  try {
    start = store_->add(fmt::format("{}starts{}", base, options_.group_rank), 1);
  } catch (const Error& e) {
    throw Error(fmt::format(
        "ReplicaManager (replica {}): the quorum service (the TCP store's server at {}:{}) "
        "cannot be reached to meet the replica's processes: {}",
        who(), options_.store_host, options_.store_port, e.what()));
  }
  distributed::ProcessGroupOptions go = options_.group_options;
  go.name = "ft-replica-" + options_.replica_id;
  if (go.network.master_addr.empty()) {
    go.network.master_addr = options_.store_host;
    go.network.master_port = options_.store_port;
  }
  // A process may wait here for a partner that waits out a cross-replica
  // op's deadline first (a stopped peer elsewhere): the replica must not
  // take that for a loss of its own. After one failure the step's other
  // cross-replica ops are skipped, so one deadline's delay is the most.
  go.timeout = 2 * options_.op_timeout;
  auto store = std::make_shared<rendezvous::PrefixStore>(fmt::format("{}{}/", base, start), store_);
  try {
    replica_group_ = create_group(store, options_.group_rank, options_.group_size, go);
  } catch (const Error& e) {
    throw Error(fmt::format(
        "ReplicaManager (replica {}): its {} processes did not meet (start {} of this one; "
        "processes of a replica start and restart together): {}",
        who(), options_.group_size, start, e.what()));
  }
  return replica_group_;
}

namespace {

// The cross-replica stage of a hook: `t` averaged over the step's group,
// a failure kept for should_commit (the step is then not committed).
struct CrossReplicaAverage {
  std::function<void(const std::string&, const std::exception&)> fail;
  std::function<distributed::ProcessGroup*()> group;

  BucketReduction operator()(Tensor t) const {
    distributed::ProcessGroup* pg = group();
    if (pg == nullptr) return {};
    distributed::Work w;
    try {
      w = pg->all_reduce(t, {.op = distributed::ReduceOp::kAvg}, distributed::async_op);
    } catch (const std::exception& e) {
      fail("averaging the gradients", e);
      return {};
    }
    // Waited for in finish, so that a failure is kept, not thrown out of backward.
    return BucketReduction{{},
                           [fail = fail, w]() mutable {
                             try {
                               w.wait();
                             } catch (const std::exception& e) {
                               fail("averaging the gradients", e);
                             }
                           },
                           t.nbytes()};
  }
};

}  // namespace

CommHookPtr ReplicaManager::comm_hook() {
  CrossReplicaAverage cross{
      [this](const std::string& what, const std::exception& e) { note_failure(what, e); },
      [this]() -> distributed::ProcessGroup* {
        return step_error_.empty() && have_group_ ? pg_.get() : nullptr;
      }};
  // DDP's own group is this process alone, or its replica's processes (whose
  // average comes first); the buckets then go over the step's group.
  return make_comm_hook(
      "replica_allreduce", cross,
      [](CrossReplicaAverage& cross, distributed::ProcessGroup& pg,
         GradBucket& bucket) -> BucketFuture {
        Tensor b = bucket.buffer;
        if (pg.size() == 1) return {cross(b)};
        distributed::Work w =
            pg.all_reduce(b, {.op = distributed::ReduceOp::kAvg}, distributed::async_op);
        return {BucketReduction{std::move(w), {}, b.nbytes()}, [cross, b] { return cross(b); }};
      });
}

ShardedCommHookPtr ReplicaManager::sharded_comm_hook() {
  CrossReplicaAverage cross{
      [this](const std::string& what, const std::exception& e) { note_failure(what, e); },
      [this]() -> distributed::ProcessGroup* {
        return step_error_.empty() && have_group_ ? pg_.get() : nullptr;
      }};
  return make_sharded_comm_hook("replica_reduce_scatter", cross,
                                [](CrossReplicaAverage& cross, distributed::ProcessGroup& pg,
                                   ShardedGradBucket& bucket) -> BucketFuture {
                                  Tensor out = bucket.output;
                                  distributed::Work w = pg.reduce_scatter_tensor(
                                      out, bucket.input, {.op = distributed::ReduceOp::kAvg},
                                      distributed::async_op);
                                  return {BucketReduction{std::move(w), {}, bucket.input.nbytes()},
                                          [cross, out] { return cross(out); }};
                                });
}

bool ReplicaManager::should_commit() {
  bool ok = step_error_.empty() && have_group_;
  if (have_group_ && step_error_.empty()) {
    try {
      Tensor vote = Tensor::full({1}, 1.0, DType::kFloat32).to(options_.device);
      pg_->all_reduce(vote, {.op = distributed::ReduceOp::kMin});
      ok = vote.cpu().item<float>() == 1.0f;
    } catch (const std::exception& e) {
      note_failure("voting on the commit", e);
      ok = false;
    }
  }
  if (options_.group_size > 1) {
    // The replica's processes commit together, or its shards would part.
    Tensor vote = Tensor::full({1}, ok ? 1.0 : 0.0, DType::kFloat32).to(options_.device);
    try {
      replica_group()->all_reduce(vote, {.op = distributed::ReduceOp::kMin});
    } catch (const Error& e) {
      replica_lost("voting on the commit in the replica", e.what());
    }
    ok = vote.cpu().item<float>() == 1.0f;
  }
  if (ok) {
    ++step_;
  } else {
    last_step_failed_ = true;
  }
  return ok;
}

}  // namespace cohort::parallel
