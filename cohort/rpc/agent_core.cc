#include "cohort/rpc/agent_core.h"

#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/rpc/wire_error.h"

namespace cohort::rpc::detail {

namespace {

// Set on handler threads: calls made while serving another worker stay
// allowed during graceful shutdown (the caller waits for them).
thread_local const AgentCore* t_handler_core = nullptr;

}  // namespace

AgentCore::AgentCore(std::string name, int rank, std::vector<std::string> names, RpcOptions opts,
                     std::vector<UniqueFd> fds)
    : name_(std::move(name)), rank_(rank), names_(std::move(names)), opts_(std::move(opts)) {
  for (size_t r = 0; r < names_.size(); ++r) ranks_[names_[r]] = static_cast<int>(r);
  peers_.resize(names_.size());
  for (size_t r = 0; r < names_.size(); ++r) {
    if (static_cast<int>(r) == rank_) continue;
    auto p = std::make_unique<Peer>();
    p->rank = static_cast<int>(r);
    p->name = names_[r];
    p->fd = std::move(fds[r]);
    p->in.resize(Peer::kInBytes);
    peers_[r] = std::move(p);
  }
  wake_fd_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) throw_errno("rpc: eventfd", errno);
}

AgentCore::~AgentCore() {
  // teardown() joined or deliberately left behind every thread; never terminate().
  if (io_thread_.joinable()) io_thread_.detach();
  for (auto& t : pool_) {
    if (t.joinable()) t.detach();
  }
}

void AgentCore::start(RpcAgent* agent) {
  agent_ = agent;
  auto self = shared_from_this();
  io_thread_ = std::thread([self] { self->io_loop(); });
  int n = std::max(1, opts_.num_handler_threads);
  for (int i = 0; i < n; ++i) pool_.emplace_back([self] { self->handler_loop(); });
}

const std::string& AgentCore::worker_name(int rank) const {
  COHORT_CHECK(rank >= 0 && rank < world_size(),
               "rpc: worker '{}': no worker has rank {} (world size {})", name_, rank,
               world_size());
  return names_[static_cast<size_t>(rank)];
}

int AgentCore::rank_of(const std::string& name) const {
  auto it = ranks_.find(name);
  COHORT_CHECK(it != ranks_.end(), "rpc: worker '{}': no worker is named '{}'", name_, name);
  return it->second;
}

void AgentCore::register_function(const std::string& fn, Handler h) {
  COHORT_CHECK(!fn.empty() && h, "rpc: worker '{}': register_function needs a name and a handler",
               name_);
  std::vector<Parked> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handlers_[fn] = h;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (it->frame.name == fn) {
        ready.push_back(std::move(*it));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Parked& p : ready) {
    post([self = shared_from_this(), from = p.from, f = std::move(p.frame), h]() mutable {
      self->run_handler(from, std::move(f), h);
    });
  }
}

bool AgentCore::has_function(const std::string& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  return handlers_.count(fn) > 0;
}

// ---------------------------------------------------------------- calls

Future AgentCore::call(int to, FrameKind kind, const std::string& fn, uint64_t rref, Message args,
                       Duration timeout) {
  COHORT_CHECK(to >= 0 && to < world_size(), "rpc: worker '{}': no worker has rank {}", name_, to);
  Duration t = resolve(timeout);
  auto deadline = Clock::now() + t;
  Future future = Future::make();
  uint64_t id;
  bool lost = false;
  bool need_wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.load()) {
      throw Error(fmt::format("rpc: worker '{}' is shut down; cannot call '{}' on worker '{}'",
                              name_, fn, names_[static_cast<size_t>(to)]));
    }
    if (closing_ && t_handler_core != this) {
      throw Error(fmt::format(
          "rpc: worker '{}' is shutting down; cannot start a new call of '{}' on worker '{}'",
          name_, fn, names_[static_cast<size_t>(to)]));
    }
    id = next_id_++;
    lost = to != rank_ && peers_[static_cast<size_t>(to)]->lost.load();
    if (!lost) {
      pending_.emplace(id, Pending{future, to, fn, deadline, t});
      if (deadline < earliest_) {
        earliest_ = deadline;
        need_wake = true;
      }
    }
  }
  auto lost_error = [&] {
    return std::make_exception_ptr(PeerLost(fmt::format(
        "rpc: worker '{}' (rank {}) is lost (its connection closed); worker '{}' cannot call '{}'",
        names_[static_cast<size_t>(to)], to, name_, fn)));
  };
  if (lost) {
    future.set_error(lost_error());
    return future;
  }
  Frame f;
  f.kind = kind;
  f.id = id;
  f.rref = rref;
  f.timeout_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
  f.name = fn;
  f.message = std::move(args);
  if (!send(to, std::move(f))) {
    complete_pending(id, nullptr, lost_error());
  } else if (need_wake) {
    wake();
  }
  return future;
}

RRefId AgentCore::next_rref_id() {
  std::lock_guard<std::mutex> lock(mu_);
  return (static_cast<uint64_t>(rank_) << 48) | next_rref_++;
}

RRef AgentCore::remote(int to, const std::string& fn, Message args, Duration timeout) {
  RRefId id = next_rref_id();
  Future created = call(to, FrameKind::kRemote, fn, id, std::move(args), timeout);
  auto state = std::make_shared<RRefState>();
  state->core = shared_from_this();
  state->id = id;
  state->owner = to;
  state->created = created;
  return RRef(std::move(state));
}

Message AgentCore::local_value(RRefId id, Duration timeout) const {
  auto deadline = Clock::now() + resolve(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  auto find = [&] { return owned_.find(id); };
  cv_.wait_until(lock, deadline, [&] {
    auto it = find();
    return it == owned_.end() || it->second.ready || closed_.load();
  });
  auto it = find();
  COHORT_CHECK(it != owned_.end(),
               "rpc: worker '{}' holds no value for rref {:#x} (released, or not owned here)",
               name_, id);
  if (!it->second.ready) {
    throw TimeoutError(
        fmt::format("rpc: worker '{}': the value of rref {:#x} was not ready within {} ms", name_,
                    id, ms(resolve(timeout))));
  }
  if (it->second.error) std::rethrow_exception(it->second.error);
  return it->second.value;
}

size_t AgentCore::owned_rref_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return owned_.size();
}

void AgentCore::release(int owner, RRefId id) noexcept {
  if (closed_.load()) return;
  try {
    Frame f;
    f.kind = FrameKind::kRefDec;
    f.rref = id;
    send(owner, std::move(f));
  } catch (...) {
  }
}

std::exception_ptr AgentCore::call_error(uint8_t cls, const std::string& fn, int peer,
                                         const std::string& text) const {
  return make_error(cls, fmt::format("rpc: '{}' failed on worker '{}' (rank {}), called by worker "
                                     "'{}': {}",
                                     fn, names_[static_cast<size_t>(peer)], peer, name_, text));
}

void AgentCore::complete_pending(uint64_t id, Message* value, std::exception_ptr error) {
  Future f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // timed out or failed already
    f = it->second.future;
    pending_.erase(it);
  }
  if (error) {
    f.set_error(error);
  } else {
    f.set_value(std::move(*value));
  }
}

void AgentCore::on_request(int from, Frame f) {
  Handler h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = handlers_.find(f.name);
    if (it == handlers_.end()) {
      // Not registered (yet): a worker may register right after init while
      // others already call it. Parked until registration or the grace ends.
      auto now = Clock::now();
      auto expiry =
          std::min(now + opts_.unregistered_grace, now + std::chrono::nanoseconds(f.timeout_ns));
      if (expiry < earliest_) earliest_ = expiry;
      parked_.push_back({from, std::move(f), expiry});
      return;
    }
    h = it->second;
  }
  post([self = shared_from_this(), from, f = std::move(f), h = std::move(h)]() mutable {
    self->run_handler(from, std::move(f), h);
  });
}

void AgentCore::run_handler(int from, Frame f, Handler h) {
  CallContext ctx;
  ctx.caller_name = names_[static_cast<size_t>(from)];
  ctx.caller_rank = from;
  ctx.function = f.name;
  ctx.deadline = Clock::now() + std::chrono::nanoseconds(f.timeout_ns);
  ctx.agent = agent_;
  Message result;
  std::exception_ptr error;
  try {
    result = h(ctx, std::move(f.message));
  } catch (...) {
    error = std::current_exception();
  }
  if (f.kind == FrameKind::kRemote) {
    finish_owned(f.rref, error ? Message() : std::move(result), error);
    result = Message();  // the creator's reply only says "created"
  }
  if (error) {
    reply_error(from, f.id, error);
  } else {
    Frame reply;
    reply.kind = FrameKind::kReply;
    reply.id = f.id;
    reply.message = std::move(result);
    send(from, std::move(reply));
  }
}

void AgentCore::finish_owned(RRefId id, Message value, std::exception_ptr error) {
  std::vector<std::pair<int, uint64_t>> waiters;
  Frame reply;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = owned_.find(id);
    if (it == owned_.end()) return;  // every reference went away while it ran
    Owned& o = it->second;
    o.ready = true;
    o.value = std::move(value);
    o.error = error;
    if (error) {
      auto [cls, text] = classify(error);
      o.error_class = cls;
      o.error_text = text;
      reply.kind = FrameKind::kError;
      reply.error_class = cls;
      reply.name = text;
    } else {
      reply.kind = FrameKind::kReply;
      reply.message = o.value;
    }
    waiters.swap(o.waiters);
  }
  cv_.notify_all();
  for (auto [to, call_id] : waiters) {
    Frame r = reply;
    r.id = call_id;
    send(to, std::move(r));
  }
}

// ---------------------------------------------------------------- handler pool

void AgentCore::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (pool_stop_) return;
    tasks_.push_back(std::move(task));
  }
  pool_cv_.notify_one();
}

void AgentCore::handler_loop() {
  t_handler_core = this;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(pool_mu_);
      pool_cv_.wait(lock, [&] { return pool_stop_ || !tasks_.empty(); });
      if (pool_stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_handlers_;
    }
    task();  // run_handler catches everything the handler throws
    task = nullptr;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      --running_handlers_;
    }
  }
}

// ---------------------------------------------------------------- shutdown

namespace {

// Polls cond every few ms until it holds or deadline passes.
template <typename F>
bool wait_until(Clock::time_point deadline, F cond) {
  for (;;) {
    if (cond()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

void AgentCore::shutdown(bool graceful, Duration timeout) {
  Duration t = timeout > Duration::zero() ? timeout : opts_.shutdown_timeout;
  auto deadline = Clock::now() + t;
  if (closed_.load()) return;
  if (!graceful) {
    teardown("shut down", deadline);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_) {
      // Another thread runs the shutdown; wait for it to close (bounded).
      cv_.wait_until(lock, deadline, [&] { return closed_.load(); });
      return;
    }
    closing_ = true;
  }
  bool ok = wait_until(deadline, [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.empty();
  });
  for (int r = 0; r < world_size(); ++r) {
    if (r == rank_) continue;
    Frame f;
    f.kind = FrameKind::kShutdown;
    send(r, std::move(f));
  }
  std::vector<std::string> waited;
  std::vector<std::string> lost;
  ok = ok && wait_until(deadline, [&] {
         {
           std::lock_guard<std::mutex> lock(mu_);
           if (!pending_.empty() || !local_.empty()) return false;
           for (auto& up : peers_) {
             if (up && !up->said_shutdown && !up->lost.load()) return false;
           }
         }
         std::lock_guard<std::mutex> lock(pool_mu_);
         return tasks_.empty() && running_handlers_ == 0;
       });
  size_t own_calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    own_calls = pending_.size();
    for (auto& up : peers_) {
      if (!up) continue;
      std::string quoted = "'" + up->name + "'";
      if (!up->said_shutdown && !up->lost.load()) waited.push_back(quoted);
      if (!up->said_shutdown && up->lost.load()) lost.push_back(quoted);
    }
  }
  teardown("shut down", deadline);
  if (!lost.empty()) {
    COHORT_WARN("rpc: worker '{}' shut down without workers [{}] (lost before their shutdown)",
                name_, fmt::join(lost, ", "));
  }
  if (!ok) {
    throw TimeoutError(fmt::format(
        "rpc: worker '{}' shutdown timed out after {} ms: still waiting for workers [{}], {} "
        "outstanding calls of its own, or its running handlers; it closed anyway",
        name_, ms(t), fmt::join(waited, ", "), own_calls));
  }
}

void AgentCore::teardown(const std::string& why, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(teardown_mu_);
    if (torn_down_) return;
    torn_down_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_.store(true);
    closing_ = true;
  }
  cv_.notify_all();
  stop_io_.store(true);
  wake();
  if (io_thread_.joinable()) {
    if (io_thread_.get_id() == std::this_thread::get_id()) {
      io_thread_.detach();
    } else {
      io_thread_.join();
    }
  }
  std::unordered_map<uint64_t, Pending> pending;
  std::vector<Parked> parked;
  std::unordered_map<RRefId, Owned> owned;
  std::deque<Frame> local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    parked.swap(parked_);
    owned.swap(owned_);
    local.swap(local_);
  }
  cv_.notify_all();
  for (auto& [id, x] : pending) {
    x.future.set_error(std::make_exception_ptr(
        Error(fmt::format("rpc: worker '{}' {} while its call of '{}' on worker '{}' was pending",
                          name_, why, x.fn, names_[static_cast<size_t>(x.peer)]))));
  }
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    dropped.swap(tasks_);
  }
  // Handlers still running get failing calls now; give them until the
  // deadline, then leave the stuck ones behind (they hold the core alive).
  bool idle = wait_until(deadline, [&] {
    std::lock_guard<std::mutex> lock(pool_mu_);
    int self = t_handler_core == this ? 1 : 0;
    return running_handlers_ <= self;
  });
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool_stop_ = true;
  }
  pool_cv_.notify_all();
  for (auto& th : pool_) {
    if (!th.joinable()) continue;
    if (!idle || th.get_id() == std::this_thread::get_id()) {
      th.detach();
    } else {
      th.join();
    }
  }
  if (!idle) {
    COHORT_WARN("rpc: worker '{}': handlers still running at shutdown were left behind", name_);
  }
  for (auto& up : peers_) {
    if (!up) continue;
    std::lock_guard<std::mutex> lock(up->send_mu);
    up->lost.store(true);
    up->fd.reset();
    up->out.clear();
  }
}

RRefState::~RRefState() {
  if (core) core->release(owner, id);
}

}  // namespace cohort::rpc::detail
