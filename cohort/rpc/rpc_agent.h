// RpcAgent: this process's end of an RPC group of named workers (PyTorch's
// torch.distributed.rpc): functions registered by name, called on other
// workers with rpc_async/rpc_sync, and remote references (rref.h) to values
// that stay where they were computed. Messages are bytes (message.h); tensors
// travel through a serializer the layer above writes.
//
//   auto agent = rpc::init_rpc("ps0", rank, world, store);
//   agent->register_function("ps.push", [](const rpc::CallContext& ctx, rpc::Message m) {
//     ...; return rpc::Message("ok");
//   });
//   rpc::Message r = agent->rpc_sync("ps0", "ps.push", std::move(m));
//   agent->shutdown();
//
// Threads: one I/O thread per agent owns every socket (a full mesh of
// connections made at init: Unix-domain sockets between workers on one host,
// TCP otherwise or when RpcOptions::force_tcp), and a small pool of handler
// threads runs the registered functions, so a handler may itself make RPCs
// (nested calls) and block on them. See docs/rpc.md for the framing.
//
// Registration: allowed at any time. A request for a name not registered
// (yet) is parked up to RpcOptions::unregistered_grace (bounded by the call's
// deadline) in case the function is being registered right after init, then
// fails with InvalidArgument naming the function and the worker.
//
// Failure: every call has a deadline (CallOptions::timeout, default
// RpcOptions::default_timeout); a callee that dies fails the caller's
// pending calls with cohort::PeerLost naming it as soon as its connection
// closes; the other workers carry on. Errors thrown by handlers are sent back
// and rethrown at the caller naming the callee, the function and the
// original message. After shutdown() (or once the agent is destroyed) every
// call throws cohort::Error.
//
// Ownership: init_rpc returns the only owner the user needs; RRefs keep the
// agent's internals alive (not its threads) so they may outlive it harmlessly.
// No process-wide default agent: pass it explicitly. Thread safety: every
// member may be called from any thread, including handler threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/rpc/future.h"
#include "cohort/rpc/message.h"
#include "cohort/rpc/rref.h"
#include "cohort/transport/network.h"

namespace cohort::rendezvous {
class Store;
}  // namespace cohort::rendezvous

namespace cohort::rpc {

struct RpcOptions {
  // Deadline of a call that does not set one (CallOptions::timeout == 0).
  Duration default_timeout = std::chrono::seconds(60);
  // How long init_rpc waits for every worker to publish and connect.
  Duration init_timeout = std::chrono::seconds(120);
  // Deadline of shutdown() when it is given none, and of the destructor's
  // (non-graceful) teardown of handler threads.
  Duration shutdown_timeout = std::chrono::seconds(30);
  // Threads running handlers (and remote() functions) on this worker.
  int num_handler_threads = 4;
  // TCP even between workers on one host (tests; what workers on different
  // hosts use anyway). Callers read COHORT_TRANSPORT=tcp at their edge.
  bool force_tcp = false;
  // The address workers advertise (transport/network.h): by default the route
  // to network.master_addr when set.
  transport::NetworkOptions network;
  // Keys in the store live under "<store_prefix>/"; distinct prefixes let
  // several RPC groups share one store.
  std::string store_prefix = "rpc";
  // How long a request for a function not registered yet waits for it.
  Duration unregistered_grace = std::chrono::seconds(2);
};

struct CallOptions {
  // 0: RpcOptions::default_timeout. The call fails with TimeoutError after it.
  Duration timeout = Duration::zero();
};

class RpcAgent;

// What a handler learns about the call it serves.
struct CallContext {
  std::string caller_name;
  int caller_rank = -1;
  std::string function;
  // The caller's deadline (as seen on this worker); a handler may give up past it.
  Clock::time_point deadline;
  // The agent running the handler, for nested calls and local_value().
  RpcAgent* agent = nullptr;
};

using Handler = std::function<Message(const CallContext&, Message)>;

namespace detail {
class AgentCore;
}  // namespace detail

class RpcAgent final {
 public:
  // Use init_rpc.
  explicit RpcAgent(std::shared_ptr<detail::AgentCore> core);
  // A non-graceful shutdown when shutdown() was not called (never throws).
  ~RpcAgent();
  RpcAgent(const RpcAgent&) = delete;
  RpcAgent& operator=(const RpcAgent&) = delete;

  const std::string& name() const;
  int rank() const;
  int world_size() const;
  // Throws InvalidArgument for an unknown rank / name.
  const std::string& worker_name(int rank) const;
  int rank_of(const std::string& name) const;
  const RpcOptions& options() const;

  // Registers (or replaces) a function; callable from any thread, any time.
  void register_function(const std::string& fn, Handler handler);
  bool has_function(const std::string& fn) const;

  // Calls fn on worker `to` (which may be this worker) with args. Never
  // blocks on the network (the bytes go out from this thread when the socket
  // has room, otherwise from the I/O thread); args' buffers are kept alive
  // until sent. Throws cohort::Error at once after shutdown or for an
  // unknown worker (InvalidArgument).
  Future rpc_async(const std::string& to, const std::string& fn, Message args,
                   CallOptions opts = {});
  // rpc_async(...).wait().
  Message rpc_sync(const std::string& to, const std::string& fn, Message args,
                   CallOptions opts = {});

  // Runs fn(args) on `to` and keeps its result there; returns the reference
  // at once (its created() future tells when the value exists).
  RRef remote(const std::string& to, const std::string& fn, Message args, CallOptions opts = {});
  // Owner side: the value held under id, waiting up to timeout (0: default)
  // while the creating function still runs. Throws InvalidArgument when this
  // worker holds no such value (never created here, or already released),
  // the creating function's error, or TimeoutError.
  Message local_value(RRefId id, Duration timeout = Duration::zero()) const;
  // Values this worker owns right now (tests, leak checks).
  size_t owned_rref_count() const;

  // Graceful (default): stops accepting new calls from non-handler threads,
  // waits for this worker's outstanding calls and in-flight handlers, then
  // waits until every other worker has also entered shutdown (or is lost)
  // while still serving their requests, so nobody leaves while others may
  // still call it. Then closes everything. Always returns within `timeout`
  // (0: RpcOptions::shutdown_timeout) plus a moment: lost peers count as
  // done (a warning is logged); past the deadline it tears down anyway and
  // throws TimeoutError naming the workers it still waited for.
  // Non-graceful: fails every pending call with Error and tears down now.
  // Idempotent; later calls return at once.
  void shutdown(bool graceful = true, Duration timeout = Duration::zero());
  bool is_shut_down() const;

  // Internals, for RRef and tests.
  const std::shared_ptr<detail::AgentCore>& core() const { return core_; }

 private:
  std::shared_ptr<detail::AgentCore> core_;
};

// Joins the RPC group: publishes this worker's name and addresses in `store`,
// learns every other worker's, and connects to all of them. Blocks until all
// world_size workers joined or opts.init_timeout passes (TimeoutError naming
// the missing workers, by name when they published one, else by rank).
// Names must be unique and non-empty (InvalidArgument naming both ranks).
std::shared_ptr<RpcAgent> init_rpc(std::string name, int rank, int world_size,
                                   std::shared_ptr<rendezvous::Store> store, RpcOptions opts = {});
// Same over env:// (rendezvous::bootstrap: MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE as `cohort run` and cohort::spawn set them, and the address
// settings of BootstrapResult::network unless opts.network names some).
std::shared_ptr<RpcAgent> init_rpc(std::string name, RpcOptions opts = {});

}  // namespace cohort::rpc
