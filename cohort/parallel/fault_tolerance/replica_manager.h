// ReplicaManager: data-parallel training that goes on through failures,
// without a restart (torchft's Manager). Each replica -- one process here,
// with a stable id that its replacement keeps -- agrees with the others at
// every step on who takes part (the quorum service in the TCP store's
// server, rendezvous/quorum.h), averages its gradients over them, and
// commits the step only if every participant finished it:
//
//   ReplicaManager m({.replica_id = "r1", .store_host = host, .store_port = port,
//                     .state_dict = [&] { return state(); },
//                     .load_state_dict = [&](const TensorDict& s) { load(s); }});
//   while (m.step() < steps) {
//     m.start_step();                          // quorum; new group, catch-up
//     auto [begin, end] = cursor.range(m.rank(), m.num_participants(), batch);
//     ... forward and backward on samples [begin, end) ...
//     m.all_reduce_average(grads);             // errors are kept, not thrown
//     if (m.should_commit()) { opt.step(); cursor.commit(...); }
//   }
//
// A step: start_step() asks for the quorum with this replica's step count.
// When the members differ from the previous quorum's, or one of them says its
// last step failed, every member destroys its group and builds a new one
// over the members (a new ProcessGroup through the store, ranks in id order:
// the lowest id is rank 0 and does rank 0's duties), in place, no process
// restarting. A member whose step count is behind the highest (a
// replacement, or a replica that missed a commit) then receives the whole
// state from the lowest-ranked member at the highest step (state_transfer.h)
// and loads it (load_state_dict), so its parameters are bit-identical to its
// peers'. all_reduce_average() averages over the participants; a failure (a
// lost peer: PeerLost within about 0.1-0.3 s; a stopped one: the op's
// deadline, op_timeout) is recorded, the group aborted so that the others
// fail at once too, and the step goes on locally to should_commit(), which
// returns true only if every participant's step succeeded (an all_reduce of
// the votes; a failure there is a no). Not committing means: no optimizer
// step, gradients dropped, the sampler not advanced; the next start_step
// drops whoever is gone and the same samples are redone. Replicas that
// disagree about a commit (a peer died half-way through the vote) differ in
// their step counts, and the next quorum brings the behind ones up to date.
// Every recovery is logged (the step, who was lost or joined, the cause).
//
// With DistributedDataParallel (overlapping the averaging with backward, as
// torchft's DDP): the DDP is built over local_group() (this process alone)
// with comm_hook(), which all-reduces each bucket over the step's group as
// all_reduce_average does, keeping failures for should_commit():
//
//   DistributedDataParallel ddp(model, m.local_group(), {.comm_hook = m.comm_hook()});
//
// (find_unused_parameters must stay off: its bitmap would be this replica's
// alone; buffers are each replica's own and travel with the state.)
//
// A replica of several processes (group_size G > 1: a ZeRO shard group, a
// pipeline or a tensor-parallel group, torchft's replica group) fails and
// rejoins as one. Its processes meet once in replica_group() (built over the
// store; the strategy inside the replica runs over it) and each asks the
// quorum as "<replica_id>/<group_rank>", after a barrier of the replica, so
// that they ask together. The quorum's replicas are those whose G processes
// all asked; process g of each builds the step's group with process g of the
// others (the cross-replica dimension of HSDP: per group rank, ranks in
// replica order), averages over it, and receives a state from process g of
// the source replica when behind. should_commit adds a vote of the replica's
// processes, so that they commit together. When one of them is lost -- the
// quorum lacks it, or a collective of replica_group() fails -- the others
// throw Error (their replica is gone; the launcher restarts the replica's
// processes together, and they meet again under a new start count) while the
// other replicas go on. replica_group()'s deadline is twice op_timeout (a
// process may wait there for a partner that waits out a cross-replica op). Inside a replica, the
// strategy's gradients are reduced over replica_group() and then over the step's group: comm_hook()
// for a DDP over replica_group(), sharded_comm_hook() for a
// ShardedDataParallel over it (reduce_scatter in the replica, the segment
// all-reduced across replicas), all_reduce_average() for a pipeline stage's
// or a tensor-parallel shard's own gradients.
//
// Failure: start_step throws Error when no quorum forms within
// quorum_timeout (fewer than min_replicas alive) and when the quorum service
// (the store's server) is gone, naming it: without it the replicas cannot
// agree on membership, and they stop rather than guess. Backends: native,
// and nccl (options.backend; written, never run on a GPU); MPI cannot
// shrink a communicator without ULFM: refused.
// Ownership: owns its store connection, its group and a heartbeat thread.
// Thread safety: one training thread; the heartbeat thread is internal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/core/tensor_dict.h"
#include "cohort/distributed/process_group.h"
#include "cohort/parallel/comm_hooks/comm_hook.h"
#include "cohort/parallel/comm_hooks/sharded_comm_hook.h"
#include "cohort/rendezvous/quorum.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::parallel {

struct ReplicaManagerOptions {
  std::string replica_id = {};  // unique among the replicas; a replacement reuses it
  // Processes per replica (the same in every replica of a job) and this
  // one's rank among them (see the header comment).
  int group_size = 1;
  int group_rank = 0;
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::optional<std::string> token = {};  // nullopt: COHORT_TOKEN
  // Fewer live replicas than this: no quorum (start_step waits, then throws).
  int min_replicas = 1;
  // This replica's first quorum waits for this many (the job's initial size,
  // so that replicas starting a little apart begin together); 0: min_replicas.
  int initial_replicas = 0;
  // A replacement of a replica that died: it needs a live peer to take the
  // state from. A quorum of itself alone at step 0 (the job ended, everyone
  // else is gone) is not one: it asks again until quorum_timeout, then throws
  // rather than train alone from the start.
  bool replacement = false;
  std::chrono::milliseconds quorum_timeout{60'000};
  // After the first request, how long a quorum waits for live replicas that
  // have not asked yet.
  std::chrono::milliseconds join_timeout{500};
  // The step's deadline for each collective: a peer that stopped responding
  // fails the step after it.
  std::chrono::milliseconds op_timeout{5'000};
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds heartbeat_timeout{1'000};
  // native, or nccl (compiled, never run on a GPU here: only with a fake
  // NCCL and a fake device): a failed step aborts the communicator (the
  // watchdog does, at op_timeout, when a peer is gone) and the next quorum's
  // group is a new communicator over the members. MPI: refused.
  distributed::BackendKind backend = distributed::BackendKind::kNative;
  // Where the votes, barriers and state transfers' tensors live: the host
  // for native, this process's GPU for nccl (which takes device buffers only).
  Device device = Device();
  // How a group is made (a test seam; empty: ProcessGroup::create(backend, ...)).
  std::function<std::shared_ptr<distributed::ProcessGroup>(std::shared_ptr<rendezvous::Store>,
                                                           int rank, int size,
                                                           const distributed::ProcessGroupOptions&)>
      make_group = {};
  // The groups' options (transport, network); name and timeout are set here.
  distributed::ProcessGroupOptions group_options = {};
  // The state a replica that rejoins receives, and how it is loaded.
  std::function<TensorDict()> state_dict = {};
  std::function<void(const TensorDict&)> load_state_dict = {};
  // Where recovery lines go (default: the log at INFO).
  std::function<void(const std::string&)> log = {};
};

class ReplicaManager {
 public:
  explicit ReplicaManager(ReplicaManagerOptions options);
  ~ReplicaManager();
  ReplicaManager(const ReplicaManager&) = delete;
  ReplicaManager& operator=(const ReplicaManager&) = delete;

  // Joins this step's quorum (see the header comment).
  void start_step();
  // Averages `tensors` in place over the participants. A failure is kept
  // for should_commit() (the tensors then hold partial results).
  void all_reduce_average(std::vector<Tensor>& tensors);
  // Whether every participant finished this step; true advances step().
  bool should_commit();
  // For a DDP over local_group(): the hook that averages its buckets over the
  // step's group (see the header comment). It refers to this manager.
  CommHookPtr comm_hook();
  // A group of this process alone (made once), for such a DDP.
  std::shared_ptr<distributed::ProcessGroup> local_group();
  // The processes of this replica (group_size > 1; built once, on first use,
  // when all of them call it); group_size 1: local_group().
  std::shared_ptr<distributed::ProcessGroup> replica_group();
  // For a ShardedDataParallel over replica_group(): its unit's gradients
  // reduce-scattered (average) in the replica, then this process's segment
  // averaged over the step's group, failures kept for should_commit().
  ShardedCommHookPtr sharded_comm_hook();

  // Committed steps (the same on every participant after start_step).
  int64_t step() const { return step_; }
  // This replica's rank among the step's participating replicas, and their
  // number (a replica of several processes has one rank).
  int rank() const { return rank_; }
  int num_participants() const { return static_cast<int>(members_.size()); }
  const std::vector<std::string>& participants() const { return members_; }
  // The step's group (null before the first start_step).
  distributed::ProcessGroup* group() const { return pg_.get(); }
  // Groups built and states received so far (for logs and tests).
  int64_t groups_built() const { return groups_built_; }
  int64_t states_received() const { return states_received_; }
  // The first failure of this step, or "".
  const std::string& step_error() const { return step_error_; }

 private:
  void heartbeats();
  void note_failure(const std::string& what, const std::exception& e);
  void rebuild_group(const rendezvous::Quorum& q);
  void catch_up(const rendezvous::Quorum& q);
  void log(const std::string& line) const;
  // "r1", or "r1 (process 0 of 2)"; and the quorum id of this process.
  std::string who() const;
  std::string process_id() const;
  // group_size > 1: the quorum of processes as one of replicas (members by
  // replica id, each at its processes' lowest step); throws when this
  // process's replica is incomplete in it.
  rendezvous::Quorum replicas_of(const rendezvous::Quorum& processes) const;
  // Barrier of the replica's processes that also checks their step counts agree.
  void meet_replica();
  [[noreturn]] void replica_lost(const std::string& what, const std::string& cause) const;
  std::shared_ptr<distributed::ProcessGroup> create_group(std::shared_ptr<rendezvous::Store> store,
                                                          int rank, int size,
                                                          distributed::ProcessGroupOptions go);

  ReplicaManagerOptions options_;
  std::shared_ptr<rendezvous::TcpStore> store_;
  std::shared_ptr<distributed::ProcessGroup> pg_;
  std::shared_ptr<distributed::ProcessGroup> local_group_;
  std::shared_ptr<distributed::ProcessGroup> replica_group_;
  uint64_t group_epoch_ = 0;
  bool have_group_ = false;
  std::vector<std::string> members_;
  int rank_ = 0;
  int64_t step_ = 0;
  bool first_quorum_ = true;
  bool last_step_failed_ = false;
  std::string step_error_;
  int64_t groups_built_ = 0;
  int64_t states_received_ = 0;
  std::thread heartbeat_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> heartbeating_{false};
};

}  // namespace cohort::parallel
