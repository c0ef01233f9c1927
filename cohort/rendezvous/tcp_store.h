// TcpStore: the Store every process of a job reaches over TCP. One process
// serves (is_server: it runs a TcpStoreServer in this object, one epoll
// thread for all clients), every process, the server's included, connects as
// a client. Connecting retries until the timeout, so clients may start before
// the server. The client opens with the job token (explicit, or COHORT_TOKEN);
// a wrong token makes the constructor throw IoError.
//
// Failure: a blocking call that passes its timeout throws TimeoutError naming
// the missing keys (the server enforces get/wait deadlines and names them);
// a server that dies or closes the connection makes this and every later call
// throw PeerLost.
//
// Ownership: owns its connections (and the server, when is_server). Thread
// safety: every method may be called from many threads at once; a call takes
// an idle connection or opens another, so one thread's long wait does not
// hold up the others.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cohort/base/unique_fd.h"
#include "cohort/rendezvous/quorum.h"
#include "cohort/rendezvous/store.h"
#include "cohort/rendezvous/tcp_store_protocol.h"

namespace cohort::rendezvous {

class TcpStoreServer;

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // the server's address (clients connect here)
  uint16_t port = 0;               // 0 only with is_server: pick a free port
  bool is_server = false;          // also serve the store from this process
  // Server only: address to listen on; "": host's loopback address when host
  // is one, else every interface (transport::bind_host_for).
  std::string bind_host;
  std::optional<std::string> token;         // nullopt: COHORT_TOKEN (or "" when unset)
  Duration timeout = kDefaultStoreTimeout;  // blocking calls and connecting
};

class TcpStore final : public Store {
 public:
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::set;
  using Store::wait;

  int64_t num_keys();

  // The quorum service (quorum.h) of the server: replica `id` is alive.
  void heartbeat(const std::string& id);
  // Asks to join the next quorum; blocks until it formed (returns it) or
  // `timeout` passed (TimeoutError naming what it waited for). PeerLost when
  // the server is gone.
  Quorum quorum(const QuorumRequest& request, Duration timeout);
  // The server's port (the one it picked when options.port was 0).
  uint16_t port() const { return port_; }
  const std::string& host() const { return options_.host; }
  // The server this object runs, or null for a pure client.
  TcpStoreServer* server() const { return server_.get(); }

 private:
  // Sends one request and reads its reply, both bounded by reply_deadline.
  // Returns the reply payload after the status byte has been checked as kOk;
  // kTimeout and kError become exceptions naming op.
  std::vector<uint8_t> call(const char* op, std::vector<uint8_t> frame, Duration wait_budget);
  std::string where() const;

  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
  uint16_t port_ = 0;
  // Opens a connection and completes the token handshake by deadline.
  UniqueFd connect_and_handshake(std::chrono::steady_clock::time_point deadline);

  std::mutex mu_;  // guards idle_ and broken_
  std::vector<UniqueFd> idle_;
  bool broken_ = false;
};

}  // namespace cohort::rendezvous
