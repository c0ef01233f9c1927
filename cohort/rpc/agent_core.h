// AgentCore: the engine behind RpcAgent (internal; include rpc_agent.h).
// One I/O thread owns every socket's reading side and the timers; any thread
// may write (under the peer's send lock, non-blocking; what does not fit is
// left to the I/O thread); a pool of handler threads runs the registered
// functions. See docs/rpc.md for the frames and the shutdown protocol.
// agent_core.cc holds calls, RRefs, handlers and shutdown; agent_io.cc the
// sending side and the I/O thread; wire_error.h the error classes of frames.
//
// Ownership: shared by RpcAgent, RRefs and its own threads (which hold a
// reference so a stuck handler can be left behind at teardown without
// touching freed memory). Thread safety: every public member is safe from
// any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cohort/base/unique_fd.h"
#include "cohort/rpc/rpc_agent.h"

namespace cohort::rpc::detail {

// d in whole milliseconds, for error messages.
inline int64_t ms(Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

enum class FrameKind : uint8_t {
  kRequest = 1,   // id, function, args, timeout: run it, answer kReply/kError
  kReply = 2,     // id, result
  kError = 3,     // id, error class, text (in the name field)
  kRemote = 4,    // id, rref, function, args: run it and keep the result under rref
  kFetch = 5,     // id, rref: answer with the value (when it exists)
  kRefInc = 6,    // id, rref: one more user reference; answered (empty kReply)
  kRefDec = 7,    // rref: one user reference fewer; no answer
  kShutdown = 8,  // the sender entered shutdown: its own calls are done
};

// A decoded frame.
struct Frame {
  FrameKind kind = FrameKind::kRequest;
  uint8_t error_class = 0;
  uint64_t id = 0;
  uint64_t rref = 0;
  uint64_t timeout_ns = 0;
  std::string name;  // function, or error text
  Message message;
};

// One peer's connection. fd/out under send_mu; the receive state is the I/O
// thread's alone.
struct Peer {
  int rank = -1;
  std::string name;
  std::mutex send_mu;
  UniqueFd fd;
  struct Out {
    std::string prefix;  // wire header + name + message header + buffer sizes
    Message message;     // keeps the payload buffers alive until written
    size_t slice = 0;    // 0: prefix, i > 0: buffer i - 1
    size_t offset = 0;
  };
  std::deque<Out> out;
  std::atomic<bool> lost{false};
  std::atomic<bool> broken{false};  // a write failed; the I/O thread declares it lost
  bool said_shutdown = false;       // under AgentCore::mu_

  // Receive state (I/O thread only).
  static constexpr size_t kInBytes = 256 * 1024;
  std::vector<char> in;  // kInBytes
  size_t rpos = 0, wpos = 0;
  int stage = 0;  // 0 wire header, 1 meta, 2 buffers
  size_t meta_need = 0;
  std::string meta;
  Frame cur;
  std::vector<uint64_t> sizes;
  size_t buf_index = 0, buf_offset = 0;
  std::shared_ptr<std::byte> buf;
};

struct RRefState;

class AgentCore : public std::enable_shared_from_this<AgentCore> {
 public:
  AgentCore(std::string name, int rank, std::vector<std::string> names, RpcOptions opts,
            std::vector<UniqueFd> fds);
  ~AgentCore();

  // Starts the I/O thread and the handler pool (after construction, as they
  // hold shared_from_this()).
  void start(RpcAgent* agent);

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(names_.size()); }
  const std::string& worker_name(int rank) const;
  int rank_of(const std::string& name) const;
  const RpcOptions& options() const { return opts_; }

  void register_function(const std::string& fn, Handler h);
  bool has_function(const std::string& fn) const;

  Future call(int to, FrameKind kind, const std::string& fn, uint64_t rref, Message args,
              Duration timeout);
  RRef remote(int to, const std::string& fn, Message args, Duration timeout);
  Message local_value(RRefId id, Duration timeout) const;
  size_t owned_rref_count() const;
  // Fire-and-forget release of one reference (RRef destructor); never throws.
  void release(int owner, RRefId id) noexcept;
  RRefId next_rref_id();

  void shutdown(bool graceful, Duration timeout);
  bool is_shut_down() const { return closed_.load(); }
  Duration resolve(Duration timeout) const {
    return timeout > Duration::zero() ? timeout : opts_.default_timeout;
  }

 private:
  struct Pending {
    Future future;
    int peer;
    std::string fn;
    Clock::time_point deadline;
    Duration timeout;
  };
  struct Parked {  // a request for a function not registered yet
    int from;
    Frame frame;
    Clock::time_point expiry;
  };
  struct Owned {  // a value this worker owns for RRefs
    int64_t refs = 1;
    bool ready = false;
    Message value;
    std::exception_ptr error;
    uint8_t error_class = 0;
    std::string error_text;
    std::vector<std::pair<int, uint64_t>> waiters;  // fetches (peer, call id) before ready
  };

  // Queues a frame to peer (or to this worker's local queue); false when the
  // peer is lost or the agent is torn down.
  bool send(int to, Frame f);
  void flush_locked(Peer& p);
  void wake();
  void reply_error(int to, uint64_t id, std::exception_ptr e);
  void reply_error(int to, uint64_t id, uint8_t cls, const std::string& text);

  void io_loop();
  void read_peer(Peer& p);
  bool parse(Peer& p);  // true when a frame completed (p.cur ready)
  void dispatch(int from, Frame f);
  void on_request(int from, Frame f);
  void run_handler(int from, Frame f, Handler h);
  void finish_owned(RRefId id, Message value, std::exception_ptr error);
  void complete_pending(uint64_t id, Message* value, std::exception_ptr error);
  void peer_lost(Peer& p, const std::string& why);
  void sweep(Clock::time_point now);

  void handler_loop();
  void post(std::function<void()> task);
  void teardown(const std::string& why, Clock::time_point deadline);

  std::exception_ptr call_error(uint8_t cls, const std::string& fn, int peer,
                                const std::string& text) const;

  const std::string name_;
  const int rank_;
  const std::vector<std::string> names_;
  const RpcOptions opts_;
  std::unordered_map<std::string, int> ranks_;
  std::vector<std::unique_ptr<Peer>> peers_;  // null at rank_
  RpcAgent* agent_ = nullptr;

  UniqueFd wake_fd_;  // eventfd the I/O thread polls
  std::thread io_thread_;
  std::atomic<bool> stop_io_{false};

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Handler> handlers_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<Parked> parked_;
  std::unordered_map<RRefId, Owned> owned_;
  std::deque<Frame> local_;  // frames to this worker itself
  uint64_t next_id_ = 1;
  uint64_t next_rref_ = 1;
  int running_handlers_ = 0;  // under pool_mu_
  bool closing_ = false;
  Clock::time_point earliest_ = Clock::time_point::max();  // next deadline the I/O thread must see

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::deque<std::function<void()>> tasks_;
  bool pool_stop_ = false;
  std::vector<std::thread> pool_;

  std::atomic<bool> closed_{false};
  std::mutex teardown_mu_;
  bool torn_down_ = false;
};

struct RRefState {
  std::shared_ptr<AgentCore> core;
  RRefId id = 0;
  int owner = -1;
  Future created;
  ~RRefState();
};

}  // namespace cohort::rpc::detail
