#include "cohort/distributed/process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <utility>

#include "cohort/base/error.h"
#include "cohort/collectives/op_table.h"
#include "cohort/distributed/process_group_submit.h"
#include "cohort/distributed/work_queue.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::distributed {

std::shared_ptr<ProcessGroup> ProcessGroup::create(BackendKind backend,
                                                   std::shared_ptr<rendezvous::Store> store,
                                                   int rank, int size,
                                                   ProcessGroupOptions options) {
  auto b = create_backend(backend, store, rank, size, options);
  std::vector<int> world(static_cast<size_t>(b->size()));
  std::iota(world.begin(), world.end(), 0);
  return std::make_shared<ProcessGroup>(Private{}, backend, std::move(b), std::move(store),
                                        std::move(world), std::move(options));
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(std::unique_ptr<Backend> backend,
                                                   std::shared_ptr<rendezvous::Store> store,
                                                   ProcessGroupOptions options) {
  COHORT_CHECK(backend != nullptr, "ProcessGroup::create: backend is null");
  std::vector<int> world(static_cast<size_t>(backend->size()));
  std::iota(world.begin(), world.end(), 0);
  BackendKind kind = backend->kind();
  return std::make_shared<ProcessGroup>(Private{}, kind, std::move(backend), std::move(store),
                                        std::move(world), std::move(options));
}

ProcessGroup::ProcessGroup(Private, BackendKind kind, std::unique_ptr<Backend> backend,
                           std::shared_ptr<rendezvous::Store> store, std::vector<int> world_ranks,
                           ProcessGroupOptions options)
    : backend_kind_(kind),
      backend_(std::move(backend)),
      store_(std::move(store)),
      world_ranks_(std::move(world_ranks)),
      options_(std::move(options)),
      rank_(backend_->rank()),
      size_(backend_->size()),
      ops_have_deadlines_(backend_->ops_have_deadlines()),
      group_name_(std::make_shared<const std::string>(options_.name)),
      queue_(std::make_shared<detail::WorkQueue>(options_.name)) {}

ProcessGroup::~ProcessGroup() { destroy(); }

void ProcessGroup::destroy() {
  {
    std::lock_guard<std::mutex> lk(issue_mu_);
    if (destroyed_) return;
    destroyed_ = true;
  }
  if (size_t pending = queue_->pending(); pending > 0) {
    // Waiting could take the ops' whole timeout (a peer may never issue the
    // matching op); failing them ends every rank's wait at once instead.
    backend_->abort(fmt::format("process group '{}' was destroyed on rank {} with {} op(s) pending",
                                options_.name, rank_, pending));
  }
  queue_->close();
  backend_.reset();
  store_.reset();
}

void ProcessGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lk(issue_mu_);
  if (!destroyed_) backend_->abort(reason);
}

std::string ProcessGroup::transport_name(int peer) const {
  check_peer("transport_name", peer);
  std::lock_guard<std::mutex> lk(issue_mu_);
  COHORT_CHECK(!destroyed_, "transport_name: process group '{}' was destroyed", options_.name);
  return backend_->transport_name(peer);
}

std::string ProcessGroup::flight_record() const {
  std::lock_guard<std::mutex> lk(issue_mu_);
  return destroyed_ ? std::string() : backend_->flight_record();
}

std::shared_ptr<detail::WorkState> ProcessGroup::new_state() const {
  // One state per queued op. (Reusing the last op's state once no Work held
  // it saved an allocation, but its hand-over rested on an acquire fence
  // after use_count(), which ThreadSanitizer cannot see; the ops that gained
  // most, blocking ones, now run inline with no state at all.)
  auto s = std::make_shared<detail::WorkState>();
  s->group = group_name_;
  s->rank = rank_;
  s->queue = queue_;
  return s;
}

bool ProcessGroup::begin_inline(const char* op, bool collective, uint64_t& seq) {
  // No lock: the claim is one compare-exchange, which also takes the
  // sequence number (work_queue.h). A destroyed group's queue is closed,
  // which try_claim sees; a claim racing destroy() is caught below: either
  // this load sees destroyed_, or destroy()'s pending() sees the claim and
  // its close() waits for the release (both sequentially consistent).
  if (!queue_->try_claim(collective, &seq)) return false;
  if (destroyed_.load()) {
    queue_->release();
    throw Error(fmt::format("{}: process group '{}' was destroyed", op, options_.name));
  }
  // Only the claim holder writes it (claims are exclusive and ordered).
  ops_inline_.store(ops_inline_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return true;
}

void ProcessGroup::fail_inline(const char* op, bool collective, uint64_t seq) {
  std::exception_ptr error = std::current_exception();
  queue_->release();
  std::rethrow_exception(
      detail::with_context(error, detail::describe_op(op, options_.name, rank_, collective, seq)));
}

ProcessGroupStats ProcessGroup::stats() const {
  return ProcessGroupStats{ops_inline_.load(std::memory_order_relaxed),
                           ops_queued_.load(std::memory_order_relaxed)};
}

Work ProcessGroup::enqueue(const char* op, bool collective, std::function<void()> body,
                           Duration timeout, bool async_op,
                           std::shared_ptr<detail::DeviceEnd> device_end,
                           std::shared_ptr<const int> source) {
  std::shared_ptr<detail::WorkState> s = new_state();
  s->op = op;
  s->collective = collective;
  // The op's own deadline should fire first and give the precise error.
  s->wait_limit = std::max(timeout, options_.timeout) + std::chrono::seconds(5);
  s->may_run_inline = ops_have_deadlines_;
  s->body = std::move(body);
  s->device_end = std::move(device_end);
  s->source = std::move(source);
  {
    std::lock_guard<std::mutex> lk(issue_mu_);
    if (destroyed_) {
      throw Error(fmt::format("{}: process group '{}' was destroyed", op, options_.name));
    }
    queue_->push(s, /*numbered=*/collective);  // sets s->seq
    ops_queued_.fetch_add(1, std::memory_order_relaxed);
  }
  Work w(std::move(s));
  if (!async_op) w.wait();
  return w;
}

void ProcessGroup::check_root(const char* op, int root) const {
  COHORT_CHECK(root >= 0 && root < size_,
               "{}: root must be a rank of group '{}' in [0, {}), got {}", op, options_.name, size_,
               root);
}

void ProcessGroup::check_peer(const char* op, int peer) const {
  COHORT_CHECK(peer >= 0 && peer < size_,
               "{}: peer must be a rank of group '{}' in [0, {}), got {}", op, options_.name, size_,
               peer);
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks,
                                                      NewGroupOptions options) {
  if (ranks.empty()) {
    ranks.resize(static_cast<size_t>(size_));
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  std::sort(ranks.begin(), ranks.end());
  COHORT_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
               "new_group: ranks must be distinct, got {} twice",
               *std::adjacent_find(ranks.begin(), ranks.end()));
  COHORT_CHECK(ranks.front() >= 0 && ranks.back() < size_,
               "new_group: ranks must be in [0, {}) (group '{}'), got {}", size_, options_.name,
               ranks.front() < 0 ? ranks.front() : ranks.back());
  int id = 0;
  {
    std::lock_guard<std::mutex> lk(issue_mu_);
    COHORT_CHECK(!destroyed_, "new_group: process group '{}' was destroyed", options_.name);
    id = subgroups_++;
  }
  ProcessGroupOptions sub = options_;
  sub.name = options.name.empty() ? fmt::format("{}/{}", options_.name, id) : options.name;
  if (options.timeout != kUseDefaultTimeout) sub.timeout = options.timeout;
  std::shared_ptr<rendezvous::Store> sub_store;
  if (store_)
    sub_store = std::make_shared<rendezvous::PrefixStore>(fmt::format("sub{}", id), store_);
  auto slot = std::make_shared<std::unique_ptr<Backend>>();
  Backend* b = backend_.get();
  submit("new_group", false, sub.timeout, /*async=*/false, {},
         [b, ranks, sub_store, sub, slot] { *slot = b->new_subgroup(ranks, sub_store, sub); });
  if (!*slot) return nullptr;
  std::vector<int> world;
  world.reserve(ranks.size());
  for (int r : ranks) world.push_back(world_ranks_[static_cast<size_t>(r)]);
  return std::make_shared<ProcessGroup>(Private{}, backend_kind_, std::move(*slot),
                                        std::move(sub_store), std::move(world), std::move(sub));
}

Work ProcessGroup::run_op(OpArgs a, Keep keep, bool async) {
  const collectives::OpInfo& info = collectives::op_info(a.kind);
  collectives::check_op_args(a, rank_, size_, options_.name);
  a.timeout = op_timeout(a.timeout);
  if (a.send_counts != nullptr) {
    // all_to_all_v: a queued op outlives the caller's count arrays, so it
    // runs on its own copy (the other ops' closures stay as they were).
    const auto n = static_cast<size_t>(size_);
    auto counts = std::make_shared<std::vector<size_t>>(a.send_counts, a.send_counts + n);
    counts->insert(counts->end(), a.recv_counts, a.recv_counts + n);
    a.send_counts = counts->data();
    a.recv_counts = counts->data() + n;
    keep.counts = std::move(counts);
  }
  const Device first = keep.first ? keep.first->device() : kCPU;
  const Device second = keep.second ? keep.second->device() : first;
  COHORT_CHECK(first == second,
               "{}: expected all tensors on one device, but found at least two devices, {} and {}",
               info.name, first.str(), second.str());
  // recv_any writes its source into a slot the op owns: a blocking caller
  // that gave up waiting (Work::wait's own timeout) is not written to later.
  int* caller_source = nullptr;
  std::shared_ptr<int> source;
  if (a.kind == OpKind::kRecvAny) {
    source = std::make_shared<int>(-1);
    caller_source = std::exchange(a.source, source.get());
    keep.source = source;
  }
  Work w;
  if (!first.is_cpu()) {
    w = run_device_op(a, std::move(keep), async, first);
  } else {
    Backend* b = backend_.get();
    // all_to_all_v's body holds its count arrays, which its OpArgs point into.
    auto counts = keep.counts;
    w = counts ? submit(info.name, info.collective, a.timeout, async, std::move(keep),
                        [b, a, counts] { b->run(a); })
               : submit(info.name, info.collective, a.timeout, async, std::move(keep),
                        [b, a] { b->run(a); });
  }
  if (caller_source != nullptr && !async) *caller_source = *source;
  return w;
}

OpArgs ProcessGroup::all_to_all_v_args(const void* send, std::span<const size_t> send_counts,
                                       void* recv, std::span<const size_t> recv_counts,
                                       DataType dtype, const AllToAllOptions& o) const {
  const auto n = static_cast<size_t>(size_);
  COHORT_CHECK(send_counts.size() == n && recv_counts.size() == n,
               "all_to_all_v: send_counts and recv_counts must hold {} counts (one per rank of "
               "group '{}'), got {} and {}",
               n, options_.name, send_counts.size(), recv_counts.size());
  OpArgs a = op_args(OpKind::kAllToAllV, send, recv, 0, dtype, o);
  a.send_counts = send_counts.data();
  a.recv_counts = recv_counts.data();
  return a;
}

}  // namespace cohort::distributed
