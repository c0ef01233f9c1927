// ReductionScheduler: the one place that decides when gradient reductions
// start and end, shared by DistributedDataParallel's reducer, ZeRO's units
// (ShardedDataParallel), the LibTorch adapter's DDP and the pipeline's
// averaging over replicas. It knows keys (0..n-1: the parameters), their
// names for messages and groups of keys (buckets, units); what a group's
// reduction is -- which tensors, which collective, which device -- stays with
// the caller, behind the `launch` callback, which starts the reduction and
// returns a BucketReduction (a Work to wait for and a `finish` step). A CUDA
// reducer plugs in there with streams and events: the scheduler never touches
// memory and makes no assumption about where the bytes live.
//
// One iteration: arm() (from forward); each gradient-ready hook calls
// mark_ready(key); a group whose keys are all ready is launched, strictly in
// group order (group g waits for groups 0..g-1 to be launched), so every rank
// issues the same collectives in the same order whatever order its gradients
// arrive in; with max_in_flight, launching group g first finishes the oldest
// ones (wait for the Work, then `finish`) until fewer than max_in_flight are
// outstanding. mark_ready returns true once the last group is launched; the
// caller then calls wait_all() (the "finalize" point), which finishes every
// group in order and then every follow-up (then(): a second reduction of a
// group started from its `finish`, e.g. HSDP's all_reduce over replicas).
// Armed without launching (no_sync), complete groups are reported to
// `on_accumulated` instead.
//
// Failure: a failed Work or `finish` waits for every other outstanding Work
// (their buffers belong to the caller), forgets the iteration and rethrows the
// error with its type (PeerLost, TimeoutError, ...) and describe(group, stage)
// in front. A key marked twice throws InvalidArgument naming the parameter; a
// key that never became ready keeps its group from launching, and
// throw_if_unfinished() (the next forward) names such keys. Keys in no group
// (frozen parameters) are never waited for.
//
// Ownership: the scheduler holds the BucketReductions of the current
// iteration (and so whatever their closures keep alive) until they finish or
// the iteration is reset; its destructor waits for outstanding Works. Thread
// safety: none; callers serialise (the hooks run on the thread that runs
// backward, and the reducers hold a mutex around every call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/distributed/work.h"

namespace cohort::parallel {

// A started reduction: wait for `work` (may be undefined: nothing to wait
// for), then call `finish` (may be empty). bytes: what this rank handed to
// the collective for it (summed in ReductionScheduler::launched_bytes).
struct BucketReduction {
  distributed::Work work = {};
  std::function<void()> finish = {};
  size_t bytes = 0;
};

struct ReductionCallbacks {
  // Required: starts group `group`'s reduction and returns at once.
  std::function<BucketReduction(size_t group)> launch = {};
  // Optional: a key became ready (before its group is counted); e.g. put the
  // gradient back into the bucket.
  std::function<void(size_t key)> on_ready = {};
  // Optional: armed without launching, group `group`'s keys are all ready.
  std::function<void(size_t group)> on_accumulated = {};
  // Optional: the context of a failure of `group` (stage 0: its reduction,
  // 1: its follow-up); empty or unset: the error is rethrown unchanged.
  std::function<std::string(size_t group, int stage)> describe = {};
};

struct ReductionSchedulerOptions {
  // Messages begin "{what} (rank {rank}): ".
  std::string what = {};
  int rank = 0;
  // Groups launched but not finished, at most; 0: no cap.
  size_t max_in_flight = 0;
  // After "parameter 'x' got its gradient twice in one iteration": the
  // likely causes, in parentheses.
  std::string twice_hint = {};
  // After "the previous iteration's gradient reduction did not finish: ...":
  // what to do about it.
  std::string unfinished_advice = {};
};

class ReductionScheduler {
 public:
  // key_names: one per key. groups: key indices per group, in launch order;
  // a key belongs to one group at most.
  ReductionScheduler(std::vector<std::string> key_names, std::vector<std::vector<size_t>> groups,
                     ReductionSchedulerOptions options, ReductionCallbacks callbacks);
  ~ReductionScheduler();
  ReductionScheduler(const ReductionScheduler&) = delete;
  ReductionScheduler& operator=(const ReductionScheduler&) = delete;

  size_t num_keys() const { return names_.size(); }
  size_t num_groups() const { return groups_.size(); }
  const std::vector<size_t>& group(size_t g) const { return groups_[g]; }
  const std::string& key_name(size_t key) const { return names_[key]; }

  // Starts an iteration (forgetting the previous one). `unused` keys are
  // marked ready at the first mark_ready, not now, so that a forward without
  // a backward launches nothing. launch false: groups only accumulate.
  void arm(std::vector<size_t> unused = {}, bool launch = true);
  // The coming backward neither launches nor accumulates (hooks do nothing);
  // the iteration's progress is kept for the messages.
  void disarm() { armed_ = false; }
  // Forgets the iteration: nothing armed, nothing ready, reductions dropped
  // without waiting (after a failure they were waited for already).
  void reset();
  bool armed() const { return armed_; }
  bool is_ready(size_t key) const { return ready_[key]; }
  bool launching() const { return launch_; }
  // Armed and some key is ready, but the iteration did not end.
  bool unfinished() const { return armed_ && any_ready_; }
  // When unfinished(): resets and throws InvalidArgument naming the keys
  // that got no gradient (with unfinished_advice).
  void throw_if_unfinished();
  // "2 parameter(s) received no gradient: 'a', 'b'" (the first 8 named).
  std::string describe_unready() const;

  // Marks `key` ready (no-op unless armed); launches the groups that became
  // complete, in order. True when the last group was launched (or, not
  // launching, accumulated): the caller calls wait_all() (or ends its
  // accumulation). Throws on a key marked twice or a failed launch/finish
  // (then the iteration is reset).
  bool mark_ready(size_t key);
  // Every key of every group ready at once (a reduction outside backward).
  bool mark_all_ready();
  // The end of a backward in which some keys got no gradient (an output
  // left out of the loss): marks them ready as unused; as mark_ready.
  bool mark_rest_unused();
  // Per key: 1 if it got a gradient of its own (mark_ready, armed or not:
  // no_sync backwards count) since the last finished iteration, 0 if not or
  // if it was only marked as unused. What find_unused_parameters all-reduces
  // to learn which parameters no rank used.
  const std::vector<uint8_t>& locally_used() const { return used_; }
  // Finishes every launched group in order, then every follow-up; ends the
  // iteration (disarmed, num_completed() + 1). On failure see above.
  void wait_all();
  // From group g's `finish`: a second reduction of g, waited for by wait_all
  // after every group's first (stage 1 in describe()).
  void then(size_t group, BucketReduction follow_up);

  // Group g's Work (undefined before its launch, or without one).
  distributed::Work work(size_t group) const { return reductions_[group].work; }
  size_t launched_bytes() const { return launched_bytes_; }
  int64_t num_completed() const { return num_completed_; }

 private:
  void mark_one(size_t key);
  bool launch_ready();
  void finish_next();
  [[noreturn]] void fail(size_t group, int stage);
  void drain() noexcept;

  std::vector<std::string> names_;
  std::vector<std::vector<size_t>> groups_;
  std::vector<size_t> group_of_;  // kNoGroup for keys in none
  ReductionSchedulerOptions options_;
  ReductionCallbacks callbacks_;

  // Per iteration.
  bool armed_ = false;
  bool launch_ = true;
  bool any_ready_ = false;
  bool unused_marked_ = false;
  std::vector<bool> ready_;
  std::vector<uint8_t> used_;  // kept across no_sync iterations
  std::vector<size_t> unused_;
  std::vector<size_t> pending_;  // per group: keys not ready yet
  std::vector<BucketReduction> reductions_;
  std::vector<BucketReduction> follow_ups_;
  size_t next_launch_ = 0;
  size_t next_finish_ = 0;
  size_t accumulated_ = 0;
  size_t launched_bytes_ = 0;
  int64_t num_completed_ = 0;
};

}  // namespace cohort::parallel
