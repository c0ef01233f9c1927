#include "cohort/distributed/process_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "cohort/base/error.h"
#include "cohort/collectives/types.h"
#include "cohort/distributed/process_group_submit.h"
#include "cohort/distributed/work_queue.h"
#include "cohort/rendezvous/prefix_store.h"

namespace cohort::distributed {
namespace {

using collectives::element_size;

// Out-of-place ops need disjoint buffers (the algorithms read one while
// writing the other).
void check_disjoint(const char* op, const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return;
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  COHORT_CHECK(pa + a_bytes <= pb || pb + b_bytes <= pa,
               "{}: send and recv buffers overlap (send [{:#x}, +{}), recv [{:#x}, +{})); "
               "out-of-place ops need separate buffers",
               op, pa, a_bytes, pb, b_bytes);
}

void check_buffer(const char* op, const char* what, const void* p, size_t count) {
  COHORT_CHECK(p != nullptr || count == 0, "{}: {} is null but count is {}", op, what, count);
}

}  // namespace

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
                           Duration timeout, bool async_op) {
  std::shared_ptr<detail::WorkState> s = new_state();
  s->op = op;
  s->collective = collective;
  // The op's own deadline should fire first and give the precise error.
  s->wait_limit = std::max(timeout, options_.timeout) + std::chrono::seconds(5);
  s->may_run_inline = ops_have_deadlines_;
  s->body = std::move(body);
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

Work ProcessGroup::all_reduce_impl(void* data, size_t count, DataType dtype,
                                   const AllReduceOptions& o, Keep keep, bool async) {
  check_buffer("all_reduce", "data", data, count);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("all_reduce", true, t, async, keep,
                [=] { b->all_reduce(data, count, dtype, o.op, t); });
}

Work ProcessGroup::broadcast_impl(void* data, size_t count, DataType dtype,
                                  const BroadcastOptions& o, Keep keep, bool async) {
  check_buffer("broadcast", "data", data, count);
  check_root("broadcast", o.root);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("broadcast", true, t, async, keep,
                [=] { b->broadcast(data, count, dtype, o.root, t); });
}

Work ProcessGroup::reduce_impl(void* data, size_t count, DataType dtype, const ReduceOptions& o,
                               Keep keep, bool async) {
  check_buffer("reduce", "data", data, count);
  check_root("reduce", o.root);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("reduce", true, t, async, keep,
                [=] { b->reduce(data, count, dtype, o.op, o.root, t); });
}

Work ProcessGroup::all_gather_impl(const void* send, void* recv, size_t count, DataType dtype,
                                   const AllGatherOptions& o, Keep keep, bool async) {
  size_t es = element_size(dtype);
  check_buffer("all_gather", "send", send, count);
  check_buffer("all_gather", "recv", recv, count);
  check_disjoint("all_gather", send, count * es, recv, count * es * static_cast<size_t>(size_));
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("all_gather", true, t, async, keep,
                [=] { b->all_gather(send, recv, count, dtype, t); });
}

Work ProcessGroup::gather_impl(const void* send, void* recv, size_t count, DataType dtype,
                               const GatherOptions& o, Keep keep, bool async) {
  size_t es = element_size(dtype);
  check_root("gather", o.root);
  check_buffer("gather", "send", send, count);
  if (rank_ == o.root) {
    check_buffer("gather", "recv (on root)", recv, count);
    check_disjoint("gather", send, count * es, recv, count * es * static_cast<size_t>(size_));
  }
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("gather", true, t, async, keep,
                [=] { b->gather(send, recv, count, dtype, o.root, t); });
}

Work ProcessGroup::scatter_impl(const void* send, void* recv, size_t count, DataType dtype,
                                const ScatterOptions& o, Keep keep, bool async) {
  size_t es = element_size(dtype);
  check_root("scatter", o.root);
  check_buffer("scatter", "recv", recv, count);
  if (rank_ == o.root) {
    check_buffer("scatter", "send (on root)", send, count);
    check_disjoint("scatter", send, count * es * static_cast<size_t>(size_), recv, count * es);
  }
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("scatter", true, t, async, keep,
                [=] { b->scatter(send, recv, count, dtype, o.root, t); });
}

Work ProcessGroup::reduce_scatter_impl(const void* send, void* recv, size_t count, DataType dtype,
                                       const ReduceScatterOptions& o, Keep keep, bool async) {
  size_t es = element_size(dtype);
  check_buffer("reduce_scatter", "send", send, count);
  check_buffer("reduce_scatter", "recv", recv, count);
  check_disjoint("reduce_scatter", send, count * es * static_cast<size_t>(size_), recv, count * es);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("reduce_scatter", true, t, async, keep,
                [=] { b->reduce_scatter(send, recv, count, dtype, o.op, t); });
}

Work ProcessGroup::all_to_all_impl(const void* send, void* recv, size_t count, DataType dtype,
                                   const AllToAllOptions& o, Keep keep, bool async) {
  size_t bytes = element_size(dtype) * count * static_cast<size_t>(size_);
  check_buffer("all_to_all", "send", send, count);
  check_buffer("all_to_all", "recv", recv, count);
  check_disjoint("all_to_all", send, bytes, recv, bytes);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("all_to_all", true, t, async, keep,
                [=] { b->all_to_all(send, recv, count, dtype, t); });
}

Work ProcessGroup::barrier_impl(const BarrierOptions& o, Keep keep, bool async) {
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("barrier", true, t, async, keep, [=] { b->barrier(t); });
}

Work ProcessGroup::send_impl(const void* data, size_t count, DataType dtype, int dst,
                             const SendOptions& o, Keep keep, bool async) {
  check_buffer("send", "data", data, count);
  check_peer("send", dst);
  COHORT_CHECK(dst != rank_, "send: rank {} cannot send to itself (group '{}')", rank_,
               options_.name);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("send", false, t, async, keep, [=] { b->send(data, count, dtype, dst, o.tag, t); });
}

Work ProcessGroup::recv_impl(void* data, size_t count, DataType dtype, int src,
                             const RecvOptions& o, Keep keep, bool async) {
  check_buffer("recv", "data", data, count);
  check_peer("recv", src);
  COHORT_CHECK(src != rank_, "recv: rank {} cannot receive from itself (group '{}')", rank_,
               options_.name);
  Backend* b = backend_.get();
  Duration t = op_timeout(o.timeout);
  return submit("recv", false, t, async, keep, [=] { b->recv(data, count, dtype, src, o.tag, t); });
}

}  // namespace cohort::distributed
